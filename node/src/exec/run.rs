//! One run of an [`Executable`]: chunks start when their counter of unfinished predecessors
//! reaches zero, and whoever finishes a chunk (the GPU's completion thread, or the thread
//! running a CPU chunk) decrements its successors' counters and starts those that reach zero.
//! A transfer from another machine will decrement the same counters when it arrives.
//!
//! The calling thread submits the first chunks, then runs the run's CPU chunks as they become
//! ready and otherwise waits for the last chunk; GPU chunks are submitted by whichever thread
//! made them ready, so no GPU waits for the caller to notice anything.
//!
//! On a cluster the same run state serves one node's fragment of a plan: values from other
//! nodes arrive through a [`RunLink`] and decrement the counters of the chunks that read
//! them, and [`RemoteHooks`] carry away what other nodes need when a chunk finishes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam::queue::SegQueue;

use super::gpu::{GpuContext, dev_err};
use super::release::Slots;
use super::{Device, Executable, completion};
use crate::device::vulkan::Gpu;
use crate::error::{Error, Result};
use crate::graph::ValueId;
use crate::ops::ValueType;
use crate::tensor::Tensor;

/// Where a node's finished values go when other nodes need them. Called on the thread that
/// finished the chunk (a GPU's completion thread, or the run's own): must not block.
pub trait RemoteHooks: Send + Sync {
    /// `value` was produced here and is read on `nodes`.
    fn send(&self, value: ValueId, nodes: &[String], tensor: &Tensor);
    /// Graph output `index` was produced here.
    fn output(&self, index: usize, tensor: &Tensor);
}

/// A running fragment, as the network side sees it: values arrive through it, and a run
/// abandoned elsewhere is aborted through it. Holds the run weakly: a finished run is gone.
#[derive(Clone)]
pub struct RunLink(Weak<RunState>);

impl RunLink {
    /// Value `v` (a graph value id) arrived from another node. Returns false when the run is
    /// over or the value was already here.
    pub fn deliver(&self, v: ValueId, t: Tensor) -> bool {
        let Some(state) = self.0.upgrade() else {
            return false;
        };
        if v >= state.host.len() || !state.host.set(v, t) {
            return false;
        }
        let mut stack = Vec::new();
        if let Some(readers) = state.exe.topo.remote_in.get(&v) {
            for &c in readers {
                if state.counters[c].fetch_sub(1, Ordering::AcqRel) == 1 {
                    state.launch(c, &mut stack);
                }
            }
        }
        for (c, result) in stack {
            state.finish(c, result);
        }
        true
    }

    /// Gives the run up: chunks not started never will be, and the run returns `e`.
    pub fn abort(&self, e: Error) {
        if let Some(state) = self.0.upgrade() {
            state.fail(e);
            state.caller.unpark();
        }
    }
}

pub(super) struct RunState {
    exe: Arc<Executable>,
    hooks: Option<Arc<dyn RemoteHooks>>,
    /// GPU chunks submitted and not finished: after a failure the run may end at zero.
    ctx: BTreeMap<usize, GpuContext>,
    /// Every value of the graph produced or received on the host during this run, set once
    /// and dropped after its last reader here.
    host: Slots,
    counters: Vec<AtomicUsize>,
    in_flight: AtomicUsize,
    /// Local chunks not finished yet; the run is over at zero.
    remaining: AtomicUsize,
    /// CPU chunks ready to run, taken by the calling thread.
    cpu_ready: SegQueue<usize>,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    caller: Thread,
}

impl RunState {
    fn value(&self, v: ValueId) -> Option<Tensor> {
        self.host.get(v).or_else(|| self.exe.spec.consts[v].clone())
    }

    fn fail(&self, e: Error) {
        self.failed.store(true, Ordering::Release);
        let mut slot = self.error.lock().expect("error lock");
        slot.get_or_insert(e);
    }

    /// Marks chunks finished, iteratively: a finished chunk may make others ready, and after a
    /// failure those are finished unrun, so that every counter still reaches zero.
    fn finish(self: &Arc<Self>, c: usize, result: Result<()>) {
        let mut stack = vec![(c, result)];
        while let Some((c, result)) = stack.pop() {
            match result {
                Err(e) => self.fail(e),
                Ok(()) if !self.failed.load(Ordering::Acquire) => self.hand_over(c),
                Ok(()) => {}
            }
            for &s in &self.exe.plan.chunks[c].succs {
                if !self.exe.topo.is_local(s) {
                    continue;
                }
                if self.counters[s].fetch_sub(1, Ordering::AcqRel) == 1 {
                    self.launch(s, &mut stack);
                }
            }
            if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.caller.unpark();
            }
        }
    }

    /// What other nodes need from a finished chunk leaves now.
    fn hand_over(&self, c: usize) {
        let Some(hooks) = &self.hooks else { return };
        let topo = &self.exe.topo;
        for (v, nodes) in topo.sends.get(&c).map(Vec::as_slice).unwrap_or(&[]) {
            match self.value(*v) {
                Some(t) => {
                    hooks.send(*v, nodes, &t);
                    self.host.read(*v);
                }
                None => self.fail(Error::Device(format!(
                    "value '{}' was not produced by its chunk",
                    self.exe.graph.value_names[*v]
                ))),
            }
        }
        for &i in topo.outputs_after.get(&c).map(Vec::as_slice).unwrap_or(&[]) {
            let v = self.exe.graph.outputs[i].0;
            match self.value(v) {
                Some(t) => hooks.output(i, &t),
                None => self.fail(Error::Device(format!(
                    "output '{}' was not produced by its chunk",
                    self.exe.graph.outputs[i].1.name
                ))),
            }
        }
    }

    /// Starts a ready chunk: a GPU chunk is submitted here and finished by its GPU's completion
    /// thread; a CPU chunk is queued for the calling thread. Chunks that cannot run go on
    /// `stack` to be finished.
    fn launch(self: &Arc<Self>, c: usize, stack: &mut Vec<(usize, Result<()>)>) {
        if self.failed.load(Ordering::Acquire) {
            stack.push((c, Ok(())));
            return;
        }
        let d = self.exe.plan.chunks[c].device.index;
        match &self.exe.devices[d] {
            Device::Cpu | Device::CpuFallback => {
                self.cpu_ready.push(c);
                self.caller.unpark();
            }
            Device::Gpu(g) => match self.submit(c, d, g) {
                Ok((ticket, copy)) => {
                    self.in_flight.fetch_add(1, Ordering::AcqRel);
                    let state = Arc::clone(self);
                    completion::on_complete(
                        g,
                        ticket,
                        Box::new(move |done| {
                            let done = done.and_then(|()| state.read_exports(c, d, copy));
                            state.finish(c, done);
                            state.in_flight.fetch_sub(1, Ordering::AcqRel);
                            state.caller.unpark();
                        }),
                    );
                }
                Err(e) => stack.push((c, Err(e))),
            },
        }
    }

    /// Writes the chunk's inputs and starts it. Returns what [`start`] does.
    fn submit(&self, c: usize, d: usize, g: &Gpu) -> Result<(u64, usize)> {
        let gctx = &self.ctx[&d];
        let imports = self.exe.layouts[&d].0.imports.iter();
        write_imports(
            &self.exe,
            gctx,
            imports.filter(|(v, _)| self.exe.chunk_reads(c, *v)),
            |v| self.value(v),
        )?;
        start(gctx, c, g)
    }

    fn read_exports(&self, c: usize, d: usize, copy: usize) -> Result<()> {
        for (v, t) in read_exports(&self.exe, &self.ctx[&d], d, c, copy)? {
            // Set once: each value has one producing chunk per run.
            self.host.set(v, t);
        }
        Ok(())
    }

    fn run_cpu_chunk(&self, c: usize) -> Result<()> {
        let exe = &self.exe;
        // The node's inputs, held for its call (refilled per node).
        let mut held: Vec<Option<Tensor>> = Vec::new();
        let mut times = Vec::new();
        let profiling = exe.profile.is_on();
        for &p in &exe.plan.chunks[c].ops {
            let node = exe.spec.node(&exe.graph, exe.spec.live[p]);
            held.clear();
            held.extend(node.inputs.iter().map(|v| v.and_then(|v| self.value(v))));
            let args: Vec<Option<&Tensor>> = held.iter().map(Option::as_ref).collect();
            let start = profiling.then(Instant::now);
            // An op that panics fails the run naming it, like an op's error, instead of
            // unwinding through the run (on a cluster node, a tokio worker's thread).
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                node.op
                    .run_cpu(&args, &exe.cpu_out_types[p])
                    .map_err(|e| e.to_string())
            }));
            let outs = ran
                .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&*panic))))
                .map_err(|message| Error::Node {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    message,
                })?;
            if let Some(start) = start {
                times.push((p, start.elapsed().as_nanos() as u64));
            }
            // What leaves a CPU op is uploaded into buffers sized by the plan: a tensor of
            // another shape would not fit them.
            for (t, ty) in outs.iter().zip(&exe.cpu_out_types[p]) {
                if t.dtype() != ty.dtype || t.shape() != ty.shape.as_slice() {
                    return Err(Error::Node {
                        node: node.name.clone(),
                        op_type: node.op_type.clone(),
                        message: format!("its kernel made {t:?} where the plan has {ty}"),
                    });
                }
            }
            for (&o, t) in node.outputs.iter().zip(outs) {
                self.host.set(o, t);
            }
            drop(args);
            held.clear();
            for &v in exe.release.after(p) {
                self.host.read(v);
            }
        }
        if profiling {
            exe.profile.record(&times);
        }
        Ok(())
    }
}

/// A panic's message, when it has one.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "without a message".into())
}

/// Writes the given imports (value, offset in the import buffer) of a GPU context, taking each
/// value from `value`.
fn write_imports<'a, T: std::borrow::Borrow<Tensor>>(
    exe: &Executable,
    gctx: &GpuContext,
    imports: impl Iterator<Item = &'a (ValueId, u64)>,
    value: impl Fn(ValueId) -> Option<T>,
) -> Result<()> {
    for &(v, off) in imports {
        let t = value(v).ok_or_else(|| {
            Error::Device(format!(
                "value '{}' missing before upload",
                exe.graph.value_names[v]
            ))
        })?;
        gctx.import
            .write(off, t.borrow().bytes())
            .map_err(dev_err)?;
    }
    Ok(())
}

/// Starts GPU chunk `c` of a context whose inputs are written: fires it where it is armed
/// (exec/gpu.rs, `ArmSlot`), else submits it. Returns the timeline value of its completion
/// and which recording of the chunk runs, which says where its exports are.
fn start(gctx: &GpuContext, c: usize, g: &Gpu) -> Result<(u64, usize)> {
    if let Some(slot) = gctx.arm.as_ref().filter(|s| s.chunk() == c) {
        return slot.start(&gctx.readback);
    }
    let value = g.submit(&gctx.lists[&c]).map_err(dev_err)?;
    Ok((value, 0))
}

/// The values GPU chunk `c` exports, read back after recording `copy` of it completed.
fn read_exports(
    exe: &Executable,
    gctx: &GpuContext,
    d: usize,
    c: usize,
    copy: usize,
) -> Result<Vec<(ValueId, Tensor)>> {
    let layout = &exe.layouts[&d].0;
    // An index out of range that a kernel met (shaders/index.glsl) fails the run as the CPU
    // kernel would have, naming the node.
    if let Some((pos, fault)) = layout.take_fault(c, gctx.readback_of(c, copy))? {
        let node = exe.spec.node(&exe.graph, exe.spec.live[pos]);
        let types: Vec<Option<&ValueType>> = node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| exe.spec.types[v].as_ref()))
            .collect();
        return Err(Error::Node {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            message: node.op.index_fault(&types, &fault).to_string(),
        });
    }
    let Some(ex) = layout.exports.get(&c) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(ex.len());
    for &(v, off) in ex {
        let ty = exe.spec.types[v].as_ref().expect("typed");
        let mut bytes = vec![0u8; ty.bytes()];
        gctx.readback_of(c, copy)
            .read(off, &mut bytes)
            .map_err(dev_err)?;
        out.push((
            v,
            Tensor::from_bytes(ty.dtype, ty.shape.clone(), bytes.into())?,
        ));
    }
    Ok(out)
}

/// The one local chunk and its GPU, when this node's whole share of the plan is a single GPU
/// chunk that waits for nothing but graph inputs: a model on one GPU, the usual case.
fn direct_chunk(exe: &Executable) -> Option<(usize, usize, &Arc<Gpu>)> {
    if exe.topo.local_chunks != 1 {
        return None;
    }
    let c = (0..exe.plan.chunks.len()).find(|&c| exe.topo.is_local(c))?;
    let d = exe.plan.chunks[c].device.index;
    match &exe.devices[d] {
        Device::Gpu(g) if exe.topo.initial[c] == 0 => Some((c, d, g)),
        _ => None,
    }
}

/// Runs a [`direct_chunk`] on the calling thread: it writes the inputs, starts the chunk, waits
/// for it and reads the outputs itself. The general path hands the completion to the GPU's
/// completion thread and back, a thread wake-up and a few allocations on every run, which is
/// a measurable part of a small model's run.
fn run_direct(
    exe: &Executable,
    ctx: &BTreeMap<usize, GpuContext>,
    inputs: &[(ValueId, Tensor)],
    (c, d, g): (usize, usize, &Arc<Gpu>),
) -> Result<Vec<Tensor>> {
    let gctx = &ctx[&d];
    let value = |v: ValueId| {
        inputs
            .iter()
            .find(|(i, _)| *i == v)
            .map(|(_, t)| t)
            .or(exe.spec.consts[v].as_ref())
    };
    // Every import of a GPU with a single chunk is read by that chunk.
    write_imports(exe, gctx, exe.layouts[&d].0.imports.iter(), value)?;
    let (ticket, copy) = start(gctx, c, g)?;
    if !g
        .wait_spin(ticket, g.spin_default(), completion::DEADLINE)
        .map_err(dev_err)?
    {
        return Err(Error::Device(format!(
            "{} did not finish the run within {} s",
            g.info().name,
            completion::DEADLINE.as_secs()
        )));
    }
    let exports = read_exports(exe, gctx, d, c, copy)?;
    exe.graph
        .outputs
        .iter()
        .map(|(v, def)| {
            exports
                .iter()
                .find(|(e, _)| e == v)
                .map(|(_, t)| t)
                .or_else(|| value(*v))
                .cloned()
                .ok_or_else(|| Error::Device(format!("output '{}' was not produced", def.name)))
        })
        .collect()
}

/// Runs `exe`'s local chunks once in the execution context `ctx`, which comes back with the
/// outputs (all of them on a single machine; none for a fragment, whose outputs leave
/// through `hooks`).
pub(super) fn run(
    exe: &Arc<Executable>,
    ctx: BTreeMap<usize, GpuContext>,
    inputs: Vec<(ValueId, Tensor)>,
    hooks: Option<Arc<dyn RemoteHooks>>,
    register: impl FnOnce(RunLink),
) -> (BTreeMap<usize, GpuContext>, Result<Vec<Tensor>>) {
    if hooks.is_none()
        && let Some(direct) = direct_chunk(exe)
    {
        let result = run_direct(exe, &ctx, &inputs, direct);
        return (ctx, result);
    }
    let chunks = &exe.plan.chunks;
    let topo = &exe.topo;
    let host = Slots::new(&exe.release);
    for (v, t) in inputs {
        host.set(v, t);
    }
    let fragment = hooks.is_some();
    let state = Arc::new(RunState {
        exe: Arc::clone(exe),
        hooks,
        in_flight: AtomicUsize::new(0),
        ctx,
        host,
        counters: topo.initial.iter().map(|&n| AtomicUsize::new(n)).collect(),
        remaining: AtomicUsize::new(topo.local_chunks),
        cpu_ready: SegQueue::new(),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        caller: std::thread::current(),
    });

    register(RunLink(Arc::downgrade(&state)));
    let mut stack = Vec::new();
    for c in (0..chunks.len()).filter(|&c| topo.is_local(c) && topo.initial[c] == 0) {
        state.launch(c, &mut stack);
    }
    for (c, result) in stack {
        state.finish(c, result);
    }

    // Poll briefly before sleeping when a real GPU is involved: its completion thread's
    // wake-up would otherwise add the kernel's scheduling latency to every run.
    let spin = exe
        .devices
        .iter()
        .filter_map(|d| match d {
            Device::Gpu(g) => Some(g.spin_default()),
            _ => None,
        })
        .max()
        .unwrap_or(Duration::ZERO);
    let mut idle_since = Instant::now();
    loop {
        if let Some(c) = state.cpu_ready.pop() {
            let result = if state.failed.load(Ordering::Acquire) {
                Ok(())
            } else {
                state.run_cpu_chunk(c)
            };
            state.finish(c, result);
            idle_since = Instant::now();
            continue;
        }
        if state.remaining.load(Ordering::Acquire) == 0 {
            break;
        }
        // A failed or aborted run: chunks waiting for other nodes will never start; once no
        // GPU work of ours is pending, nothing more will happen.
        if state.failed.load(Ordering::Acquire)
            && state.in_flight.load(Ordering::Acquire) == 0
            && state.cpu_ready.is_empty()
        {
            break;
        }
        if idle_since.elapsed() < spin {
            std::hint::spin_loop();
        } else {
            // Woken by `finish` or `launch` (an unpark before the park is not lost).
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }

    // Every chunk has finished, so no GPU work uses the context; a completion thread may
    // still be returning from the callback that finished the last chunk, holding a reference.
    let mut state = state;
    let state = loop {
        match Arc::try_unwrap(state) {
            Ok(s) => break s,
            Err(s) => {
                state = s;
                std::thread::yield_now();
            }
        }
    };
    if let Some(e) = state.error.into_inner().expect("error lock") {
        return (state.ctx, Err(e));
    }
    if fragment {
        return (state.ctx, Ok(Vec::new()));
    }
    let outputs = exe
        .graph
        .outputs
        .iter()
        .map(|(v, def)| {
            state
                .host
                .get(*v)
                .or_else(|| exe.spec.consts[*v].clone())
                .ok_or_else(|| Error::Device(format!("output '{}' was not produced", def.name)))
        })
        .collect();
    (state.ctx, outputs)
}
