//! One run of an [`Executable`]: chunks start when their counter of unfinished predecessors
//! reaches zero, and whoever finishes a chunk (the GPU's completion thread, or the thread
//! running a CPU chunk) decrements its successors' counters and starts those that reach zero.
//! A transfer from another machine will decrement the same counters when it arrives.
//!
//! On one machine the calling thread submits the first chunks, then runs the run's CPU chunks
//! as they become ready and otherwise waits for the last chunk; GPU chunks are submitted by
//! whichever thread made them ready, so no GPU waits for the caller to notice anything.
//!
//! On a cluster the same run state serves one node's fragment of a plan: values from other
//! nodes arrive through a [`RunLink`] and decrement the counters of the chunks that read
//! them, and [`RemoteHooks`] carry away what other nodes need when a chunk finishes. No
//! thread waits for such a run ([`start_detached`]): its CPU chunks run as they become ready
//! (one at a time per run), a short one on the network task that made it ready, the others on
//! rayon's pool, and whichever thread ends the run (the last
//! chunk's, a GPU's completion thread, or the one that delivers an abort) calls its `done`.
//! So a node's threads do not grow with the runs it has in flight, most of which are waiting
//! for another node's values.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
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
            state.wake();
        }
    }
}

/// A run's execution context: one per GPU, held by one run at a time.
pub(super) type Contexts = Arc<BTreeMap<usize, GpuContext>>;

/// What a detached run calls once, when it has ended: with its error, if it failed.
pub type Done = Box<dyn FnOnce(Result<()>) + Send>;

/// Who runs a run's CPU chunks and learns that it ended.
enum Driver {
    /// The thread that started the run: it runs the CPU chunks and waits for the end.
    Caller(Thread),
    /// No thread waits (see the module's comment).
    Detached(Detached),
}

struct Detached {
    /// A task of rayon's pool is running this run's ready CPU chunks.
    draining: AtomicBool,
    ended: AtomicBool,
    done: Mutex<Option<Done>>,
    /// The run itself, until it ends: while it waits for other nodes' values, nothing else
    /// holds it (a [`RunLink`] holds it weakly, so that a finished run is gone).
    keep: Mutex<Option<Arc<RunState>>>,
    /// Its context goes back to the executable's pool when it ends (not a sequence's own,
    /// tied to its state buffer).
    pooled: bool,
}

pub(super) struct RunState {
    exe: Arc<Executable>,
    hooks: Option<Arc<dyn RemoteHooks>>,
    ctx: Contexts,
    /// Every value of the graph produced or received on the host during this run, set once
    /// and dropped after its last reader here.
    host: Slots,
    counters: Vec<AtomicUsize>,
    /// GPU chunks submitted (or about to be) and not finished: after a failure the run may
    /// end at zero.
    in_flight: AtomicUsize,
    /// Local chunks not finished yet; the run is over at zero.
    remaining: AtomicUsize,
    /// CPU chunks ready to run, taken by the calling thread or the draining task.
    cpu_ready: SegQueue<usize>,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    driver: Driver,
    /// Counts the run in `status` while it lives (unless its executable is unmetered).
    _count: Option<super::busy::RunCount>,
}

impl RunState {
    fn value(&self, v: ValueId) -> Option<Tensor> {
        self.host.get(v).or_else(|| self.exe.spec.consts[v].clone())
    }

    fn fail(&self, e: Error) {
        // The error first: whoever sees `failed` and ends the run reads it.
        self.error.lock().expect("error lock").get_or_insert(e);
        self.failed.store(true, SeqCst);
    }

    /// Something happened that may let the run go on or end: the caller is woken, or a
    /// detached run that can end ends.
    fn wake(self: &Arc<Self>) {
        match &self.driver {
            Driver::Caller(t) => t.unpark(),
            Driver::Detached(_) => self.maybe_end(),
        }
    }

    /// Ends a detached run once every local chunk has finished, or once it failed and no
    /// work of it is running (chunks waiting for other nodes never start then): its context
    /// goes back to the pool and `done` hears the result, exactly once.
    fn maybe_end(self: &Arc<Self>) {
        let Driver::Detached(d) = &self.driver else {
            return;
        };
        let over = self.remaining.load(SeqCst) == 0
            || (self.failed.load(SeqCst)
                && self.in_flight.load(SeqCst) == 0
                && !d.draining.load(SeqCst)
                && self.cpu_ready.is_empty());
        if !over || d.ended.swap(true, SeqCst) {
            return;
        }
        let result = match self.error.lock().expect("error lock").take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        // No chunk of this run uses the context any more.
        if d.pooled {
            self.exe
                .pool
                .lock()
                .expect("pool")
                .push(Arc::clone(&self.ctx));
        }
        let done = d.done.lock().expect("done lock").take();
        if let Some(done) = done {
            done(result);
        }
        // The caller holds the run too: it is not dropped under its feet.
        drop(d.keep.lock().expect("keep lock").take());
    }

    /// Runs the ready CPU chunks of a detached run, unless something already is: short ones
    /// on this thread when it is the network task that made them ready (a pool thread's
    /// wake-up would cost more than they do), the rest, and any that a pool thread or a GPU's
    /// completion thread made ready, on rayon's pool.
    fn drain_soon(self: &Arc<Self>) {
        let Driver::Detached(d) = &self.driver else {
            return;
        };
        if d.draining.swap(true, SeqCst) {
            return;
        }
        if rayon::current_thread_index().is_some() || completion::on_completion_thread() {
            let me = Arc::clone(self);
            rayon::spawn(move || me.drain(false));
        } else {
            self.drain(true);
        }
    }

    /// Runs ready CPU chunks until none is left; `here`: on a thread not the pool's, which
    /// hands the pool the first chunk that is not short, and the rest with it.
    fn drain(self: &Arc<Self>, here: bool) {
        let Driver::Detached(d) = &self.driver else {
            return;
        };
        loop {
            while let Some(c) = self.cpu_ready.pop() {
                if here && !self.exe.short_chunk(c) {
                    // `draining` stays up: the pool's task drains from now on.
                    self.cpu_ready.push(c);
                    let me = Arc::clone(self);
                    rayon::spawn(move || me.drain(false));
                    return;
                }
                let result = if self.failed.load(SeqCst) {
                    Ok(())
                } else {
                    // A panic outside an op's kernel (which run_cpu_chunk catches) must not
                    // unwind through rayon, which would abort the process.
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_cpu_chunk(c)))
                        .unwrap_or_else(|p| {
                            Err(Error::Device(format!(
                                "a CPU chunk panicked: {}",
                                crate::priority::panic_text(&*p)
                            )))
                        })
                };
                self.finish(c, result);
            }
            d.draining.store(false, SeqCst);
            // A chunk made ready after the queue looked empty, and before the flag fell,
            // found the flag up and left it to this task.
            if self.cpu_ready.is_empty() || d.draining.swap(true, SeqCst) {
                break;
            }
        }
        self.maybe_end();
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
            if self.remaining.fetch_sub(1, SeqCst) == 1
                && let Driver::Caller(t) = &self.driver
            {
                t.unpark();
            }
        }
        self.maybe_end();
    }

    /// What other nodes need from a finished chunk leaves now. Outputs go first: an output a
    /// node keeps for a sequence's next step (distributed/kept.rs) is then kept before any
    /// value leaves for the nodes whose work the next step waits on.
    fn hand_over(&self, c: usize) {
        let Some(hooks) = &self.hooks else { return };
        let topo = &self.exe.topo;
        for &i in topo.outputs_after.get(&c).map(Vec::as_slice).unwrap_or(&[]) {
            let v = self.exe.graph.outputs[i].0;
            // A bound output stays in the state buffer, where it was written.
            if let Some(s) = &self.exe.state
                && s.slot_of_output(v).is_some()
            {
                continue;
            }
            match self.value(v) {
                Some(t) => hooks.output(i, &t),
                None => self.fail(Error::Device(format!(
                    "output '{}' was not produced by its chunk",
                    self.exe.graph.outputs[i].1.name
                ))),
            }
        }
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
    }

    /// Starts a ready chunk: a GPU chunk is submitted here and finished by its GPU's completion
    /// thread; a CPU chunk is queued for the calling thread. Chunks that cannot run go on
    /// `stack` to be finished.
    fn launch(self: &Arc<Self>, c: usize, stack: &mut Vec<(usize, Result<()>)>) {
        let d = self.exe.plan.chunks[c].device.index;
        // Counted before `failed` is read: a run that fails meanwhile then waits for this
        // chunk rather than handing its context on while the chunk is submitted.
        self.in_flight.fetch_add(1, SeqCst);
        if self.failed.load(SeqCst) {
            self.in_flight.fetch_sub(1, SeqCst);
            stack.push((c, Ok(())));
            return;
        }
        match &self.exe.devices[d] {
            Device::Cpu | Device::CpuFallback => {
                self.cpu_ready.push(c);
                self.in_flight.fetch_sub(1, SeqCst);
                match &self.driver {
                    Driver::Caller(t) => t.unpark(),
                    Driver::Detached(_) => self.drain_soon(),
                }
            }
            Device::Gpu(g) => match self.submit(c, d, g) {
                Ok((ticket, copy)) => {
                    tracing::trace!("chunk {c}: submitted to {}", g.info().name);
                    let state = Arc::clone(self);
                    let busy = self.exe.busy(d);
                    completion::on_complete(
                        g,
                        ticket,
                        Box::new(move |done| {
                            tracing::trace!("chunk {c}: completed");
                            drop(busy);
                            let done = done.and_then(|()| state.read_exports(c, d, copy));
                            state.finish(c, done);
                            state.in_flight.fetch_sub(1, SeqCst);
                            state.wake();
                        }),
                    );
                }
                Err(e) => {
                    self.in_flight.fetch_sub(1, SeqCst);
                    stack.push((c, Err(e)));
                }
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
        let exports = read_exports(&self.exe, &self.ctx[&d], d, c, copy)?;
        tracing::trace!("chunk {c}: results read back");
        for (v, t) in exports {
            // Set once: each value has one producing chunk per run.
            self.host.set(v, t);
        }
        Ok(())
    }

    fn run_cpu_chunk(&self, c: usize) -> Result<()> {
        let exe = &self.exe;
        let _busy = exe.busy(exe.plan.chunks[c].device.index);
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
                node.op.run_cpu(&args, &exe.cpu_out_types[p])
            }));
            let outs = match ran {
                Ok(outs) => outs.map_err(|e| crate::graph::op_err(&node.name, &node.op_type, e))?,
                Err(panic) => {
                    return Err(Error::Node {
                        node: node.name.clone(),
                        op_type: node.op_type.clone(),
                        message: format!("panicked: {}", crate::priority::panic_text(&*panic)),
                    });
                }
            };
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
    if let Some(ops) = gctx.dispatch_ops.get(&c) {
        record_gpu_times(exe, gctx, c, ops)?;
    }
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

/// Adds a completed timed chunk's dispatch times to the profile, summed per op and per
/// kernel.
fn record_gpu_times(
    exe: &Executable,
    gctx: &GpuContext,
    c: usize,
    ops: &[(usize, &'static str)],
) -> Result<()> {
    let Some(times) = gctx.lists[&c].dispatch_times().map_err(dev_err)? else {
        return Ok(());
    };
    let mut per_op: Vec<(usize, u64)> = Vec::new();
    let mut per_kernel: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for (&(pos, kernel), ns) in ops.iter().zip(times) {
        match per_op.last_mut() {
            Some((p, t)) if *p == pos => *t += ns,
            _ => per_op.push((pos, ns)),
        }
        let k = per_kernel.entry(kernel.to_string()).or_default();
        k.0 += 1;
        k.1 += ns;
    }
    exe.profile.record(&per_op);
    exe.profile.record_kernels(per_kernel);
    Ok(())
}

/// The one local chunk and its GPU, when this node's whole share of the plan is a single GPU
/// chunk that waits for nothing but graph inputs: a model on one GPU, the usual case.
pub(super) fn direct_chunk(exe: &Executable) -> Option<(usize, usize, &Arc<Gpu>)> {
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
    ctx: &Contexts,
    inputs: &[(ValueId, Tensor)],
    direct: (usize, usize, &Arc<Gpu>),
) -> Result<Vec<Tensor>> {
    // Without bound values every output comes back: none is `None`.
    Ok(run_direct_bound(exe, ctx, inputs, direct, None)?
        .into_iter()
        .flatten()
        .collect())
}

/// [`run_direct`] for a plan whose bound values (`state`) stay in the state buffer of `ctx`:
/// their outputs come back as `None`.
pub(super) fn run_direct_bound(
    exe: &Executable,
    ctx: &Contexts,
    inputs: &[(ValueId, Tensor)],
    direct: (usize, usize, &Arc<Gpu>),
    state: Option<&super::bound::StateLayout>,
) -> Result<Vec<Option<Tensor>>> {
    let exports = direct_exports(exe, ctx, inputs, direct)?;
    exe.graph
        .outputs
        .iter()
        .map(|(v, def)| {
            if state.is_some_and(|s| s.slot_of_output(*v).is_some()) {
                return Ok(None);
            }
            direct_output(exe, &exports, inputs, *v)
                .map(Some)
                .ok_or_else(|| Error::Device(format!("output '{}' was not produced", def.name)))
        })
        .collect()
}

/// Output `v` of a direct run: exported, or a graph input or constant passed through.
fn direct_output(
    exe: &Executable,
    exports: &[(ValueId, Tensor)],
    inputs: &[(ValueId, Tensor)],
    v: ValueId,
) -> Option<Tensor> {
    exports
        .iter()
        .chain(inputs)
        .find(|(e, _)| *e == v)
        .map(|(_, t)| t)
        .or(exe.spec.consts[v].as_ref())
        .cloned()
}

/// Writes the inputs of a [`direct_chunk`], runs it and waits, and reads its exports back.
fn direct_exports(
    exe: &Executable,
    ctx: &Contexts,
    inputs: &[(ValueId, Tensor)],
    (c, d, g): (usize, usize, &Arc<Gpu>),
) -> Result<Vec<(ValueId, Tensor)>> {
    let gctx = &ctx[&d];
    let _count = exe.metered().then(super::busy::RunCount::start);
    let _busy = exe.busy(d);
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
    read_exports(exe, gctx, d, c, copy)
}

/// A run's state before anything starts: its inputs set, every counter at its start.
fn new_state(
    exe: &Arc<Executable>,
    ctx: Contexts,
    inputs: Vec<(ValueId, Tensor)>,
    hooks: Option<Arc<dyn RemoteHooks>>,
    driver: Driver,
) -> Arc<RunState> {
    let topo = &exe.topo;
    let host = Slots::new(&exe.release);
    for (v, t) in inputs {
        host.set(v, t);
    }
    Arc::new(RunState {
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
        driver,
        _count: exe.metered().then(super::busy::RunCount::start),
    })
}

/// Launches the chunks that wait for nothing.
fn launch_first(state: &Arc<RunState>) {
    let topo = &state.exe.topo;
    let mut stack = Vec::new();
    for c in (0..state.exe.plan.chunks.len()).filter(|&c| topo.is_local(c) && topo.initial[c] == 0)
    {
        state.launch(c, &mut stack);
    }
    for (c, result) in stack {
        state.finish(c, result);
    }
}

/// Starts `exe`'s local chunks once, a fragment of a plan over several nodes, in the execution
/// context `ctx`, and returns at once: no thread waits for the run. `done` is called once it
/// has ended, after `ctx` went back to `exe`'s pool (see the module's comment).
pub(super) fn start_detached(
    exe: &Arc<Executable>,
    ctx: Contexts,
    inputs: Vec<(ValueId, Tensor)>,
    hooks: Arc<dyn RemoteHooks>,
    register: impl FnOnce(RunLink),
    done: Done,
    pooled: bool,
) {
    let driver = Driver::Detached(Detached {
        draining: AtomicBool::new(false),
        ended: AtomicBool::new(false),
        done: Mutex::new(Some(done)),
        keep: Mutex::new(None),
        pooled,
    });
    let state = new_state(exe, ctx, inputs, Some(hooks), driver);
    if let Driver::Detached(d) = &state.driver {
        *d.keep.lock().expect("keep lock") = Some(Arc::clone(&state));
    }
    register(RunLink(Arc::downgrade(&state)));
    launch_first(&state);
    // A fragment with no local chunk (its ops all elsewhere) is over already.
    state.maybe_end();
}

/// Runs `exe`'s local chunks once in the execution context `ctx`, which comes back with the
/// outputs, on the calling thread (see the module's comment).
pub(super) fn run(
    exe: &Arc<Executable>,
    ctx: Contexts,
    inputs: Vec<(ValueId, Tensor)>,
) -> (Contexts, Result<Vec<Tensor>>) {
    if let Some(direct) = direct_chunk(exe) {
        let result = run_direct(exe, &ctx, &inputs, direct);
        return (ctx, result);
    }
    let driver = Driver::Caller(std::thread::current());
    let state = new_state(exe, ctx, inputs, None, driver);
    launch_first(&state);

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
