//! A GPU's share of a plan: where each value lives, and the chunks recorded into command
//! lists once per execution context, then replayed on every run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::device::vulkan::{Armed, CommandList, Gpu, GpuBuffer, MemoryUse, Step};
use crate::error::{Error, Result};
use crate::graph::{Graph, Specialized, ValueId};
use crate::ops::{BufRef, FAULT_RECORD_BYTES, GpuKernel, IndexFault};

use super::arena::{self, Interval};
use super::bound::StateLayout;
use super::shared::{Sharing, Uploaded};
use super::upload::{place_weights, zeroed_counters};

pub(super) fn dev_err(e: impl std::fmt::Display) -> Error {
    Error::Device(e.to_string())
}

/// Which buffer of a context a value sits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Region {
    Weights,
    Import,
    Arena,
    /// The context's readback buffer: small exported values are written there directly.
    Readback,
    /// The caller's state buffer: bound values (exec/bound.rs), in place across runs.
    State,
    /// A weight buffer shared with the model's other plans (exec/shared.rs), by its index
    /// among the layout's.
    Shared(usize),
}

/// Exported values up to this size that nothing else on their GPU reads are written by their
/// kernel straight into host-visible readback memory: the run then skips a barrier and a
/// copy, about 5 µs of a one-dispatch run on an H100 class GPU (`timing_report`); larger
/// ones are copied, as writing them across the bus from every invocation would be slower.
const DIRECT_EXPORT_MAX: u64 = 64 << 10;

#[derive(Clone, Copy, Debug)]
pub struct Loc {
    pub region: Region,
    pub offset: u64,
    pub bytes: u64,
}

/// The layout of one GPU's values, the same for every context.
pub struct GpuLayout {
    pub gpu: Arc<Gpu>,
    pub locs: BTreeMap<ValueId, Loc>,
    /// Values the host writes before a chunk runs: (value, offset in the import buffer).
    pub imports: Vec<(ValueId, u64)>,
    import_size: u64,
    arena_size: u64,
    /// Per chunk (plan chunk id): values read back after it, with their readback offsets.
    pub exports: BTreeMap<usize, Vec<(ValueId, u64)>>,
    /// Per chunk: values another GPU left in the bridge, copied into the arena before the
    /// chunk's first dispatch, with their bridge offsets (exec/bridge.rs).
    bridge_in: BTreeMap<usize, Vec<(ValueId, u64)>>,
    /// Per chunk: values copied into the bridge after it, for another GPU.
    bridge_out: BTreeMap<usize, Vec<(ValueId, u64)>>,
    readback_size: u64,
    /// Per chunk (plan chunk id): its ops with a fault record (`BufRef::Fault`), in order, and
    /// where in readback memory their records start, one `FAULT_RECORD_BYTES` each.
    pub faults: BTreeMap<usize, (u64, Vec<usize>)>,
    /// Scratch offsets of each live op (by position in the plan).
    scratch: BTreeMap<usize, Vec<u64>>,
    weights: GpuBuffer,
    /// Weight buffers shared with the model's other plans, held while this layout lives.
    shared: Vec<Arc<GpuBuffer>>,
    /// The one of `shared` this layout uploaded, if any, and its values (value, offset): the
    /// caller registers it for the plans after this one.
    pub fresh: Option<Uploaded>,
}

/// What a GPU needs to know about the plan's ops placed on it.
pub struct GpuOps<'a> {
    /// (position in plan, chunk id) of every op on this GPU, in order.
    pub ops: Vec<(usize, usize)>,
    /// Values produced on this GPU that must be read back: graph outputs and cut edges.
    pub exported: Vec<ValueId>,
    pub kernels: &'a [Option<GpuKernel>],
    /// Bound values kept in the caller's state buffer, if the plan has any.
    pub state: Option<&'a StateLayout>,
    /// The model's weights shared with its other plans, and this GPU's index among the
    /// node's devices.
    pub shared: Option<(&'a Sharing, usize)>,
    /// Values passed between this process's GPUs through the bridge, by bridge offset: those
    /// of them this GPU makes are copied there, those it reads copied from there.
    pub bridge: &'a BTreeMap<ValueId, u64>,
}

impl GpuLayout {
    pub fn new(
        gpu: Arc<Gpu>,
        graph: &Graph,
        spec: &Specialized,
        on: &GpuOps<'_>,
    ) -> Result<GpuLayout> {
        let bytes = |v: ValueId| spec.types[v].as_ref().map_or(0, |t| t.bytes() as u64);
        let mut locs: BTreeMap<ValueId, Loc> = BTreeMap::new();
        let mut weight_list: Vec<ValueId> = Vec::new();
        let mut imports: Vec<(ValueId, u64)> = Vec::new();
        let mut import_size = 0;
        let mut intervals: Vec<Interval> = Vec::new();
        let mut interval_of: BTreeMap<ValueId, usize> = BTreeMap::new();
        let mut scratch_reqs: Vec<(usize, usize)> = Vec::new(); // (op position, interval index)
        let mut root: BTreeMap<ValueId, ValueId> = BTreeMap::new();
        let last_pos = on.ops.last().map_or(0, |o| o.0);
        let chunk_end: BTreeMap<usize, usize> = on.ops.iter().map(|&(p, c)| (c, p)).collect();
        let mut chunk_start: BTreeMap<usize, usize> = BTreeMap::new();
        for &(p, c) in &on.ops {
            chunk_start.entry(c).or_insert(p);
        }
        let mut bridge_in: BTreeMap<usize, Vec<(ValueId, u64)>> = BTreeMap::new();
        for &(pos, chunk) in &on.ops {
            let node = spec.node(graph, spec.live[pos]);
            for &v in node.inputs.iter().flatten() {
                let r = *root.get(&v).unwrap_or(&v);
                if let Some(&i) = interval_of.get(&r) {
                    intervals[i].end = intervals[i].end.max(pos);
                    continue;
                }
                if locs.contains_key(&r) {
                    continue;
                }
                let b = bytes(r);
                if let Some(slot) = on.state.and_then(|s| s.slot_of_input(r)) {
                    locs.insert(
                        r,
                        Loc {
                            region: Region::State,
                            offset: slot.offset,
                            bytes: b,
                        },
                    );
                } else if let Some(&at) = on.bridge.get(&r) {
                    // Copied in when its first reader's chunk starts, so it holds its bytes
                    // from then on.
                    interval_of.insert(r, intervals.len());
                    intervals.push(Interval {
                        bytes: b,
                        start: chunk_start[&chunk],
                        end: pos,
                    });
                    bridge_in.entry(chunk).or_default().push((r, at));
                } else if spec.consts[r].is_some() {
                    weight_list.push(r);
                    locs.insert(
                        r,
                        Loc {
                            region: Region::Weights,
                            offset: 0,
                            bytes: b,
                        },
                    );
                } else {
                    let off = import_size;
                    import_size += b.div_ceil(arena::ALIGN).max(1) * arena::ALIGN;
                    imports.push((r, off));
                    locs.insert(
                        r,
                        Loc {
                            region: Region::Import,
                            offset: off,
                            bytes: b,
                        },
                    );
                }
            }
            if node.op.is_view() {
                let src = node.inputs[0].expect("views have an input");
                let r = *root.get(&src).unwrap_or(&src);
                root.insert(node.outputs[0], r);
                continue;
            }
            for &o in &node.outputs {
                // A bound output is written over its input, in the state buffer.
                if let Some(slot) = on.state.and_then(|s| s.slot_of_output(o)) {
                    locs.insert(
                        o,
                        Loc {
                            region: Region::State,
                            offset: slot.offset,
                            bytes: bytes(o),
                        },
                    );
                    continue;
                }
                interval_of.insert(o, intervals.len());
                intervals.push(Interval {
                    bytes: bytes(o),
                    start: pos,
                    end: pos,
                });
            }
            if let Some(k) = &on.kernels[pos] {
                for &s in &k.scratch {
                    scratch_reqs.push((pos, intervals.len()));
                    intervals.push(Interval {
                        bytes: s,
                        start: pos,
                        end: pos,
                    });
                }
            }
        }
        // Exported values live until their chunk's copy-out at its end.
        let producer_chunk: BTreeMap<ValueId, usize> = on
            .ops
            .iter()
            .flat_map(|&(pos, c)| {
                spec.node(graph, spec.live[pos])
                    .outputs
                    .iter()
                    .map(move |&o| (o, c))
            })
            .collect();
        let mut exports: BTreeMap<usize, Vec<(ValueId, u64)>> = BTreeMap::new();
        let mut bridge_out: BTreeMap<usize, Vec<(ValueId, u64)>> = BTreeMap::new();
        let mut readback_size = 0;
        let mut direct: BTreeMap<ValueId, u64> = BTreeMap::new();
        for &v in &on.exported {
            let r = *root.get(&v).unwrap_or(&v);
            let c = producer_chunk[&v];
            if let Some(&at) = on.bridge.get(&v) {
                bridge_out.entry(c).or_default().push((v, at));
                if let Some(&i) = interval_of.get(&r) {
                    intervals[i].end = intervals[i].end.max(chunk_end[&c]);
                }
                continue;
            }
            let at = readback_size;
            readback_size += bytes(v).div_ceil(arena::ALIGN).max(1) * arena::ALIGN;
            exports.entry(c).or_default().push((v, at));
            if let Some(&i) = interval_of.get(&r) {
                // Produced here by a kernel (not a view) and read by nothing after it here:
                // small enough to write straight into readback memory.
                if r == v && intervals[i].end == intervals[i].start && bytes(v) <= DIRECT_EXPORT_MAX
                {
                    direct.insert(v, at);
                    intervals[i].bytes = 0;
                    continue;
                }
                intervals[i].end = intervals[i]
                    .end
                    .max(chunk_end[&c])
                    .max(last_pos.min(chunk_end[&c]));
            }
        }
        // Fault records sit in readback memory, where the host reads them after the chunk and
        // where an armed chunk's second recording gets its own (relocate).
        let mut faults: BTreeMap<usize, (u64, Vec<usize>)> = BTreeMap::new();
        for &(pos, c) in &on.ops {
            let faulting = on.kernels[pos].as_ref().is_some_and(|k| {
                k.dispatches
                    .iter()
                    .any(|d| d.buffers().contains(&BufRef::Fault))
            });
            if faulting {
                faults.entry(c).or_default().1.push(pos);
            }
        }
        for (at, ops) in faults.values_mut() {
            *at = readback_size;
            readback_size += (ops.len() as u64 * FAULT_RECORD_BYTES).next_multiple_of(arena::ALIGN);
        }
        let (offsets, arena_size) = arena::assign(&intervals);
        for (&v, &i) in &interval_of {
            let loc = match direct.get(&v) {
                Some(&at) => Loc {
                    region: Region::Readback,
                    offset: at,
                    bytes: bytes(v),
                },
                None => Loc {
                    region: Region::Arena,
                    offset: offsets[i],
                    bytes: intervals[i].bytes,
                },
            };
            locs.insert(v, loc);
        }
        let mut scratch: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (pos, i) in scratch_reqs {
            scratch.entry(pos).or_default().push(offsets[i]);
        }
        for (v, r) in &root {
            let l = *locs.get(r).expect("a view's source is placed");
            locs.insert(
                *v,
                Loc {
                    bytes: bytes(*v),
                    ..l
                },
            );
        }
        let (weights, shared, fresh) =
            place_weights(&gpu, spec, &weight_list, &mut locs, on.shared)?;
        Ok(GpuLayout {
            gpu,
            locs,
            imports,
            import_size,
            arena_size,
            exports,
            bridge_in,
            bridge_out,
            readback_size,
            faults,
            scratch,
            weights,
            shared,
            fresh,
        })
    }

    /// Where op `pos` of chunk `c` has its fault record in readback memory, if it has one.
    fn fault_record(&self, c: usize, pos: usize) -> Option<u64> {
        let (at, ops) = self.faults.get(&c)?;
        let i = ops.iter().position(|&p| p == pos)?;
        Some(at + i as u64 * FAULT_RECORD_BYTES)
    }

    /// Zeroes chunk `c`'s fault records in `readback` (a context's, or an armed recording's).
    pub fn clear_faults(&self, c: usize, readback: &GpuBuffer) -> Result<()> {
        if let Some((at, ops)) = self.faults.get(&c) {
            let zeros = vec![0u8; ops.len() * FAULT_RECORD_BYTES as usize];
            readback.write(*at, &zeros).map_err(dev_err)?;
        }
        Ok(())
    }

    /// The first fault chunk `c`'s ops recorded in `readback`, in plan order: (op position,
    /// fault). The records are zeroed again for the next run.
    pub fn take_fault(
        &self,
        c: usize,
        readback: &GpuBuffer,
    ) -> Result<Option<(usize, IndexFault)>> {
        let Some((at, ops)) = self.faults.get(&c) else {
            return Ok(None);
        };
        let mut bytes = vec![0u8; ops.len() * FAULT_RECORD_BYTES as usize];
        readback.read(*at, &mut bytes).map_err(dev_err)?;
        let found = ops
            .iter()
            .zip(bytes.chunks_exact(FAULT_RECORD_BYTES as usize))
            .find_map(|(&pos, r)| IndexFault::from_record(r).map(|f| (pos, f)));
        if found.is_some() {
            self.clear_faults(c, readback)?;
        }
        Ok(found)
    }

    /// Allocates a context's buffers and records every chunk of this GPU. `armable` is the
    /// chunk to queue ahead of each run, if any (see [`ArmSlot`]); it is armed only when it is
    /// short (at most [`ARM_MAX_DISPATCHES`]) and all its exports are written straight into
    /// readback memory (no copies), so that a second recording needs only its own readback
    /// buffer.
    /// `timed`: the lists are recorded with timestamps (profiling; nothing is armed then).
    pub fn context(
        &self,
        graph: &Graph,
        spec: &Specialized,
        on: &GpuOps<'_>,
        armable: Option<usize>,
        outside: Outside<'_>,
        timed: bool,
    ) -> Result<GpuContext> {
        let Outside { state, bridge } = outside;
        let g = &self.gpu;
        // A GPU without timestamps runs its chunks untimed: its ops stay out of the profile.
        let timed = timed && g.info().timestamp_period.is_some();
        let state = match state {
            Some(s) => s,
            None if on.state.is_some() => {
                return Err(Error::Device(
                    "a plan with bound values runs only with a state buffer".into(),
                ));
            }
            // No value lives in the State region: any buffer serves as its name.
            None => &self.weights,
        };
        let bridge_buf = bridge;
        let bridge = match &bridge_buf {
            Some(b) => b,
            None if self.bridge_in.is_empty() && self.bridge_out.is_empty() => &self.weights,
            None => {
                return Err(Error::Device(
                    "a plan passing values between GPUs runs only with its bridge".into(),
                ));
            }
        };
        let arena = g
            .create_buffer(self.arena_size.max(4), MemoryUse::Device, "arena")
            .map_err(dev_err)?;
        let import = g
            .create_buffer(self.import_size.max(4), MemoryUse::Upload, "imports")
            .map_err(dev_err)?;
        let readback = g
            .create_buffer(self.readback_size.max(4), MemoryUse::Readback, "readback")
            .map_err(dev_err)?;
        for &c in self.faults.keys() {
            self.clear_faults(c, &readback)?;
        }
        let counters = zeroed_counters(g, on)?;
        let mut counter_at = 0u64;
        let mut tables = Vec::new();
        let mut lists = BTreeMap::new();
        let mut dispatch_ops = BTreeMap::new();
        let mut arm = None;
        let mut chunks: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &(pos, c) in &on.ops {
            chunks.entry(c).or_default().push(pos);
        }
        for (c, positions) in chunks {
            let buf = |r: Region| match r {
                Region::Weights => &self.weights,
                Region::Import => &import,
                Region::Arena => &arena,
                Region::Readback => &readback,
                Region::State => state,
                Region::Shared(i) => &self.shared[i],
            };
            let mut steps: Vec<Step<'_>> = Vec::new();
            if let Some(values) = self.bridge_in.get(&c) {
                for &(v, at) in values {
                    let l = self.locs[&v];
                    if l.bytes > 0 {
                        steps.push(Step::Copy {
                            src: bridge,
                            src_offset: at,
                            dst: &arena,
                            dst_offset: l.offset,
                            bytes: l.bytes,
                        });
                    }
                }
                steps.push(Step::Barrier);
            }
            let mut ops_of_dispatches = Vec::new();
            let mut hazards = Hazards::default();
            for pos in positions {
                let node = spec.node(graph, spec.live[pos]);
                let Some(kernel) = &on.kernels[pos] else {
                    continue;
                };
                for d in &kernel.dispatches {
                    let mut addrs = Vec::new();
                    let mut reads = Vec::new();
                    let mut writes = Vec::new();
                    for r in d.buffers() {
                        let (addr, range, write) = match r {
                            BufRef::Input(i) => {
                                let v =
                                    node.inputs.get(*i).copied().flatten().ok_or_else(|| {
                                        Error::Device(format!(
                                            "{}: kernel reads absent input {i}",
                                            node.name
                                        ))
                                    })?;
                                let l = self.locs[&v];
                                (
                                    buf(l.region).address() + l.offset,
                                    (l.region, l.offset, l.bytes),
                                    false,
                                )
                            }
                            BufRef::Output(i) => {
                                let l = self.locs[&node.outputs[*i]];
                                (
                                    buf(l.region).address() + l.offset,
                                    (l.region, l.offset, l.bytes),
                                    true,
                                )
                            }
                            BufRef::Scratch(i) => {
                                let off = self.scratch[&pos][*i];
                                (
                                    arena.address() + off,
                                    (Region::Arena, off, kernel.scratch[*i]),
                                    true,
                                )
                            }
                            BufRef::Fault => {
                                // Not a hazard: kernels only set a record, atomically, and
                                // nothing reads it before the chunk ends.
                                let off = self.fault_record(c, pos).expect("placed");
                                addrs.push(readback.address() + off);
                                continue;
                            }
                            BufRef::Counters(n) => {
                                // A dispatch's own, not a hazard: no other dispatch sees them.
                                addrs.push(counters.address() + counter_at);
                                counter_at += 4 * *n as u64;
                                continue;
                            }
                            BufRef::Table(words) => {
                                let bytes: &[u8] = bytemuck::cast_slice(words);
                                let t = g
                                    .create_buffer(
                                        bytes.len().max(4) as u64,
                                        MemoryUse::Upload,
                                        "table",
                                    )
                                    .map_err(dev_err)?;
                                t.write(0, bytes).map_err(dev_err)?;
                                let a = t.address();
                                tables.push(t);
                                addrs.push(a);
                                continue;
                            }
                        };
                        addrs.push(addr);
                        if write {
                            writes.push(range)
                        } else {
                            reads.push(range)
                        }
                    }
                    if hazards.conflicts(&reads, &writes) {
                        steps.push(Step::Barrier);
                        hazards = Hazards::default();
                    }
                    hazards.add(reads, writes);
                    ops_of_dispatches.push((pos, d.kernel().name()));
                    steps.push(Step::Dispatch {
                        kernel: d.kernel(),
                        addrs,
                        params: d.params().to_vec(),
                        groups: d.groups,
                    });
                }
            }
            // Values already in readback memory need no copy; the list's final barrier makes
            // them visible to the host.
            let copies: Vec<(ValueId, u64, &GpuBuffer)> = self
                .exports
                .get(&c)
                .into_iter()
                .flatten()
                .filter(|(v, _)| self.locs[v].region != Region::Readback)
                .map(|&(v, off)| (v, off, &readback))
                .chain(
                    self.bridge_out
                        .get(&c)
                        .into_iter()
                        .flatten()
                        .map(|&(v, off)| (v, off, bridge)),
                )
                .collect();
            if !copies.is_empty() {
                steps.push(Step::Barrier);
                for (v, off, dst) in copies {
                    let l = self.locs[&v];
                    if l.bytes > 0 {
                        steps.push(Step::Copy {
                            src: buf(l.region),
                            src_offset: l.offset,
                            dst,
                            dst_offset: off,
                            bytes: l.bytes,
                        });
                    }
                }
            }
            let dispatches = steps
                .iter()
                .filter(|s| matches!(s, Step::Dispatch { .. }))
                .count();
            let copies = steps
                .iter()
                .any(|s| !matches!(s, Step::Dispatch { .. } | Step::Barrier));
            let list = if timed {
                dispatch_ops.insert(c, ops_of_dispatches);
                Arc::new(g.record_timed(&steps).map_err(dev_err)?)
            } else if armable == Some(c) && !copies && dispatches <= ARM_MAX_DISPATCHES {
                // Two recordings, armed in turn (ArmSlot), the second writing into a readback
                // buffer of its own; the first also serves `lists`.
                let first = Arc::new(g.record_gated(&steps).map_err(dev_err)?);
                let readback2 = g
                    .create_buffer(self.readback_size.max(4), MemoryUse::Readback, "readback")
                    .map_err(dev_err)?;
                self.clear_faults(c, &readback2)?;
                let moved = relocate(&steps, &readback, &readback2);
                let second = Arc::new(g.record_gated(&moved).map_err(dev_err)?);
                let fault = self
                    .faults
                    .get(&c)
                    .map(|(at, ops)| (*at, ops.len() as u64 * FAULT_RECORD_BYTES));
                arm = Some(Arc::new(ArmSlot::new(
                    c,
                    [Arc::clone(&first), second],
                    readback2,
                    fault,
                )));
                first
            } else {
                Arc::new(g.record(&steps).map_err(dev_err)?)
            };
            lists.insert(c, list);
        }
        Ok(GpuContext {
            arm,
            lists,
            dispatch_ops,
            import,
            readback,
            _bridge: bridge_buf,
            _arena: arena,
            _tables: tables,
            _counters: counters,
        })
    }
}

/// Most dispatches a chunk may have to be armed: a disarmed
/// list runs in full, so a disarm may cost at most this many dependent dispatches of GPU time
/// (about 3 µs each on an H100), and the fixed cost arming saves matters only for short runs.
pub const ARM_MAX_DISPATCHES: usize = 64;

/// Steps with every dispatch address inside `from` moved to the same offset in `to`.
fn relocate<'a>(steps: &[Step<'a>], from: &GpuBuffer, to: &GpuBuffer) -> Vec<Step<'a>> {
    let range = from.address()..from.address() + from.size();
    steps
        .iter()
        .map(|s| match s {
            Step::Dispatch {
                kernel,
                addrs,
                params,
                groups,
            } => Step::Dispatch {
                kernel: *kernel,
                addrs: addrs
                    .iter()
                    .map(|&a| {
                        if range.contains(&a) {
                            to.address() + (a - from.address())
                        } else {
                            a
                        }
                    })
                    .collect(),
                params: params.clone(),
                groups: *groups,
            },
            other => other.clone(),
        })
        .collect()
}

/// A context's chunk queued ahead of each run behind the GPU's gate ([`Gpu::arm`]) and
/// released once the run's inputs are written, which takes the submission's latency off the
/// run's critical path (device/vulkan/gate.rs). Only a GPU that runs a single, short chunk of
/// the plan, with no predecessors, arms it: its inputs all come from the host, and nothing
/// else on that GPU reads what it writes.
///
/// The chunk is recorded twice, each recording with its own readback buffer, and each run,
/// once it has started one recording, arms the other for the next run, queued behind itself.
/// Anything else submitted to the GPU meanwhile disarms it: it then runs at once on stale
/// inputs, writing only this context's arena and its own readback buffer, which nobody reads
/// before the next run submits that recording again; so a disarm costs one run of GPU time and
/// nothing else.
pub struct ArmSlot {
    chunk: usize,
    lists: [Arc<CommandList>; 2],
    /// The second recording's readback buffer (the first uses the context's).
    readback: GpuBuffer,
    /// The chunk's fault records in each readback buffer: (offset, bytes).
    fault: Option<(u64, u64)>,
    state: Mutex<SlotState>,
}

struct SlotState {
    /// The recording the next run takes.
    next: usize,
    /// That recording, when it is armed.
    armed: Option<Armed>,
}

impl ArmSlot {
    fn new(
        chunk: usize,
        lists: [Arc<CommandList>; 2],
        readback: GpuBuffer,
        fault: Option<(u64, u64)>,
    ) -> ArmSlot {
        let armed = arm(&lists[0], 0);
        ArmSlot {
            chunk,
            lists,
            readback,
            fault,
            state: Mutex::new(SlotState { next: 0, armed }),
        }
    }

    /// The plan chunk this slot queues.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Starts the chunk for a run whose inputs are written: fires the armed recording, or
    /// submits it when it is not armed (or was disarmed), then arms the other recording behind
    /// it for the next run. Returns the timeline value this run's completion signals and the
    /// recording that runs (see [`GpuContext::readback_of`]). `readback` is the context's
    /// readback buffer (recording 0's).
    pub fn start(&self, readback: &GpuBuffer) -> Result<(u64, usize)> {
        let mut state = self.state.lock().expect("arm slot lock");
        let i = state.next;
        let (fired, disarmed) = match state.armed.take() {
            Some(armed) => {
                let value = armed.value();
                (armed.fire().map_err(dev_err)?, Some(value))
            }
            None => (None, None),
        };
        let list = &self.lists[i];
        let value = match fired {
            Some(v) => v,
            None => {
                if let (Some(stale), Some((at, bytes))) = (disarmed, self.fault) {
                    // A disarmed recording ran, or runs, on the last run's inputs and may
                    // have recorded their fault again: once it is done (the submission below
                    // would wait for it too), this run starts from clear records.
                    let g = list.gpu();
                    if !g
                        .wait(stale, super::completion::DEADLINE)
                        .map_err(dev_err)?
                    {
                        return Err(Error::Device(format!(
                            "{} did not finish a disarmed chunk",
                            g.info().name
                        )));
                    }
                    let rb = if i == 1 { &self.readback } else { readback };
                    rb.write(at, &vec![0u8; bytes as usize]).map_err(dev_err)?;
                }
                list.gpu().submit(list).map_err(dev_err)?
            }
        };
        state.next = i ^ 1;
        state.armed = arm(&self.lists[i ^ 1], value);
        Ok((value, i))
    }
}

/// Arms `list` behind the submission that signals `after`; a failure only means the next run
/// submits it as usual.
fn arm(list: &Arc<CommandList>, after: u64) -> Option<Armed> {
    let gpu = list.gpu();
    gpu.arm(list, after).unwrap_or_else(|e| {
        tracing::debug!("cannot arm a chunk on {}: {e}", gpu.info().name);
        None
    })
}

/// The buffers a context uses that others own or share.
pub struct Outside<'a> {
    /// The caller's state buffer, for a plan with bound values (exec/bound.rs).
    pub state: Option<&'a GpuBuffer>,
    /// This context's import of the host block its GPUs share (exec/bridge.rs), for a plan
    /// that passes values between them.
    pub bridge: Option<GpuBuffer>,
}

/// One context's buffers and recorded chunks: a run holds it exclusively.
pub struct GpuContext {
    /// Declared first so that it is dropped (released and waited for) before the lists.
    pub arm: Option<Arc<ArmSlot>>,
    pub lists: BTreeMap<usize, Arc<CommandList>>,
    /// In a timed context, per chunk: the op (live position) and kernel of each dispatch,
    /// in order.
    pub dispatch_ops: BTreeMap<usize, Vec<(usize, &'static str)>>,
    pub import: GpuBuffer,
    pub readback: GpuBuffer,
    _bridge: Option<GpuBuffer>,
    _arena: GpuBuffer,
    _tables: Vec<GpuBuffer>,
    _counters: GpuBuffer,
}

impl GpuContext {
    /// Where recording `copy` of chunk `c` leaves its exports: copy 1 of an armed chunk has a
    /// readback buffer of its own; everything else uses the context's.
    pub fn readback_of(&self, c: usize, copy: usize) -> &GpuBuffer {
        match &self.arm {
            Some(slot) if slot.chunk == c && copy == 1 => &slot.readback,
            _ => &self.readback,
        }
    }
}

/// Byte ranges read and written since the last barrier: a dispatch needs a barrier before it
/// only when it reads what was written, or writes what was read or written.
#[derive(Default)]
struct Hazards {
    reads: Vec<(Region, u64, u64)>,
    writes: Vec<(Region, u64, u64)>,
}

fn overlap(a: &(Region, u64, u64), b: &(Region, u64, u64)) -> bool {
    a.0 == b.0 && a.1 < b.1 + b.2.max(1) && b.1 < a.1 + a.2.max(1)
}

impl Hazards {
    fn conflicts(&self, reads: &[(Region, u64, u64)], writes: &[(Region, u64, u64)]) -> bool {
        reads
            .iter()
            .any(|r| self.writes.iter().any(|w| overlap(r, w)))
            || writes
                .iter()
                .any(|w| self.writes.iter().chain(&self.reads).any(|x| overlap(w, x)))
    }
    fn add(&mut self, reads: Vec<(Region, u64, u64)>, writes: Vec<(Region, u64, u64)>) {
        self.reads.extend(reads);
        self.writes.extend(writes);
    }
}
