//! Execution: a plan turned into chunks with dependency counters. GPU chunks are command lists
//! recorded once per execution context and replayed; CPU chunks call the reference kernels.
//! A chunk that finishes decrements its successors' counters; those that reach zero start.

mod arena;
pub mod bound;
mod bridge;
pub mod busy;
mod completion;
mod gpu;
mod plan;
pub mod probe;
mod profile;
mod release;
mod run;
pub mod shared;
mod topology;
mod upload;
mod work;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub use plan::{
    Device, Kernels, LOCAL_NODE, cost_graph, cpu_memory, inventory, inventory_measured,
};
pub use profile::{KernelTime, NodeTime};
pub use run::{Done, RemoteHooks, RunLink};
use topology::Topology;
use vkml_planner::{Plan, PlanError};

use crate::device::vulkan::GpuBuffer;
use crate::error::{Error, Result};
use crate::graph::{Graph, Specialized, ValueId};
use crate::ops::{GpuKernel, ValueType};
use crate::tensor::Tensor;
use crate::tuning::Tuning;
use gpu::{GpuLayout, GpuOps};

/// One GPU's layout, its ops as (plan position, chunk), the values it exports, and the
/// kernels it runs (by plan position; its own choice among preferred ones).
type GpuShare = (
    GpuLayout,
    Vec<(usize, usize)>,
    Vec<ValueId>,
    Vec<Option<GpuKernel>>,
);

/// Most arithmetic work a GPU chunk may do to be armed ahead of its runs (exec/gpu.rs,
/// `ArmSlot`): a disarmed run is done in full, so this bounds what a disarm can waste (about
/// 30 µs on an H100), and the fixed cost arming saves matters only for small runs.
const ARM_MAX_FLOPS: u64 = 1 << 30;

/// How a plan's runs are launched: the part of the `Tuning` the executor itself reads.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// A short single-GPU chunk may be queued ahead of its inputs (`Tuning::arm`).
    pub arm: bool,
    /// Values between this process's GPUs go through shared host memory (`Tuning::bridge`).
    pub bridge: bool,
}

/// A model specialised to input shapes, planned and ready to run many times.
pub struct Executable {
    graph: Arc<Graph>,
    spec: Specialized,
    devices: Vec<Device>,
    plan: Plan,
    /// The plan's chunks as this node sees them: which are its own, what each waits for.
    topo: Topology,
    /// When a run may drop each value it holds on the host.
    release: release::Release,
    /// Per GPU device index (in `devices`): its layout and the ops it runs.
    layouts: BTreeMap<usize, GpuShare>,
    /// Idle execution contexts; a run takes one, or makes one when all are busy.
    pool: Mutex<Vec<run::Contexts>>,
    summary: PlanSummary,
    /// Per live op run on this node's CPU: its output types, worked out once rather than
    /// cloned on every run (empty for the others).
    cpu_out_types: Vec<Vec<ValueType>>,
    /// Per-node times of its CPU ops, when profiling is on.
    profile: profile::Profile,
    /// Whether a short single-GPU chunk may be queued ahead of its inputs (`Tuning::arm`).
    arm: bool,
    /// The values passed between this process's GPUs through shared host memory.
    bridge: bridge::Bridge,
    /// Per device (as `devices`): the meter its chunks charge (see busy.rs); none for the
    /// device probe's executables, whose runs are not the node's load.
    meters: Vec<Option<Arc<busy::BusyMeter>>>,
    /// Where bound values stay between runs, when the plan keeps them on its GPU.
    state: Option<bound::StateLayout>,
    /// Per chunk: whether it is short enough to run on the thread that makes it ready, when
    /// that is not one of the CPU pool's (run.rs, `drain_soon`).
    short: Vec<bool>,
}

/// Most work (arithmetic plus bytes written) a CPU chunk may do on the network task that makes
/// it ready: a few hundred microseconds on one core at most. Waking a pool thread for a chunk
/// costs tens of microseconds, more than a small model's whole chunk (BENCHMARKS.md, session
/// 25), while a long chunk must not hold up the task's other work.
const SHORT_CHUNK_WORK: u64 = 4 << 20;

/// An execution context tied to one state buffer ([`Executable::bound_context`]).
#[derive(Clone)]
pub struct BoundContext(run::Contexts);

/// The execution contexts recorded against one state buffer, one per plan that ran with it
/// (a prompt's and the single tokens', usually), most recently used first; the least
/// recently used goes past [`BoundContexts::KEPT`], and a plan that is gone takes its
/// context with it.
#[derive(Default)]
pub struct BoundContexts(Vec<(std::sync::Weak<Executable>, BoundContext)>);

impl BoundContexts {
    pub const KEPT: usize = 4;

    /// `exe`'s context for `state`, made the first time.
    pub fn for_plan(&mut self, exe: &Arc<Executable>, state: &GpuBuffer) -> Result<&BoundContext> {
        self.0.retain(|(e, _)| e.strong_count() > 0);
        let at = self
            .0
            .iter()
            .position(|(e, _)| std::ptr::eq(e.as_ptr(), Arc::as_ptr(exe)));
        let entry = match at {
            Some(i) => self.0.remove(i),
            None => (Arc::downgrade(exe), exe.bound_context(state)?),
        };
        self.0.insert(0, entry);
        self.0.truncate(Self::KEPT);
        Ok(&self.0[0].1)
    }
}

/// The state layout for `pairs` when the whole plan is one GPU chunk of this node and the
/// pairs can share buffers; otherwise none, and why is logged.
fn bound_state(
    graph: &Graph,
    spec: &Specialized,
    devices: &[Device],
    plan: &Plan,
    pairs: &[(ValueId, ValueId)],
) -> Option<bound::StateLayout> {
    if pairs.is_empty() {
        return None;
    }
    let first = plan.chunks.first()?;
    let why = if plan.chunks.len() != 1 {
        Err(format!("the plan has {} chunks", plan.chunks.len()))
    } else if !matches!(devices.get(first.device.index), Some(Device::Gpu(_))) {
        Err("the plan runs on the CPU".to_string())
    } else {
        let ops: Vec<usize> = (0..spec.live.len()).collect();
        bound::layout(graph, spec, first.device.index, &ops, pairs)
    };
    match why {
        Ok(s) => Some(s),
        Err(why) => {
            tracing::debug!("bound values go through the host between runs: {why}");
            None
        }
    }
}

/// The state layout for the `pairs` (input, output) of a fragment that can stay on one GPU of
/// node `local`: each output made there by a kernel, and it and its input read only there
/// (a cut edge would need them on the host). Pairs that cannot are left
/// out: they go through the host between runs. When they fall on several GPUs, the one with
/// the most keeps its pairs.
fn fragment_state(
    graph: &Graph,
    spec: &Specialized,
    devices: &[Device],
    plan: &Plan,
    local: &str,
    pairs: &[(ValueId, ValueId)],
) -> Option<bound::StateLayout> {
    let mut readers: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
    let mut maker: BTreeMap<ValueId, usize> = BTreeMap::new();
    for (p, &n) in spec.live.iter().enumerate() {
        let node = spec.node(graph, n);
        for &v in node.inputs.iter().flatten() {
            readers.entry(v).or_default().push(p);
        }
        for &o in &node.outputs {
            maker.insert(o, p);
        }
    }
    let mut by_device: BTreeMap<usize, Vec<(ValueId, ValueId)>> = BTreeMap::new();
    for &(input, output) in pairs {
        let Some(&p) = maker.get(&output) else {
            continue;
        };
        let d = &plan.placement[p];
        let on_gpu = matches!(devices.get(d.index), Some(Device::Gpu(_)));
        let here = |q: &usize| plan.placement[*q] == *d;
        let input_here = readers.get(&input).is_some_and(|r| r.iter().all(here));
        let output_here = readers.get(&output).is_none_or(|r| r.iter().all(here));
        if d.node != local {
            continue;
        }
        let why = if !on_gpu {
            "it is made on the CPU"
        } else if !input_here {
            "its input is read on another device or node"
        } else if !output_here {
            "it is read on another device or node"
        } else {
            by_device.entry(d.index).or_default().push((input, output));
            continue;
        };
        tracing::debug!(
            "'{}' goes through the host between steps: {why}",
            graph.value_names[output]
        );
    }
    let (&device, chosen) = by_device.iter().max_by_key(|(_, v)| v.len())?;
    let ops: Vec<usize> = (0..spec.live.len())
        .filter(|&p| plan.placement[p].node == local && plan.placement[p].index == device)
        .collect();
    match bound::layout(graph, spec, device, &ops, chosen) {
        Ok(s) => Some(s),
        Err(why) => {
            tracing::debug!("a sequence's values go through the host between steps: {why}");
            None
        }
    }
}

/// Where the ops of one plan ran: op count per device name, and the edges between devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSummary {
    pub ops_per_device: BTreeMap<String, usize>,
    pub transfers: usize,
    pub chunks: usize,
}

fn plan_error(e: PlanError) -> Error {
    Error::Placement(e.to_string())
}

/// Every value the ops at plan positions `ops` read or make has a size, no larger than the
/// largest of `devices`' budgets: checked before anything is allocated, because a fragment's
/// types come from another node, not from this node's specialisation.
fn check_sizes(
    graph: &Graph,
    spec: &Specialized,
    devices: &[Device],
    ops: impl Iterator<Item = usize>,
) -> Result<()> {
    let budget = devices
        .iter()
        .map(|d| match d {
            Device::Gpu(g) => g.info().memory_budget,
            Device::Cpu | Device::CpuFallback => cpu_memory(),
        })
        .max()
        .unwrap_or(0);
    for p in ops {
        let node = spec.node(graph, spec.live[p]);
        for &v in node.inputs.iter().flatten().chain(&node.outputs) {
            if let Some(ty) = &spec.types[v] {
                graph.check_size(node, v, ty, budget)?;
            }
        }
    }
    Ok(())
}

impl Executable {
    pub fn new(
        graph: Arc<Graph>,
        spec: Specialized,
        devices: Vec<Device>,
        memory_limit: Option<u64>,
        tuning: &Tuning,
    ) -> Result<Executable> {
        Executable::new_bound(graph, spec, devices, memory_limit, tuning, &[])
    }

    /// [`Executable::new`] for runs whose graph outputs `pairs` (input, output) feed back as
    /// inputs: when the plan is one GPU chunk and each pair can share a buffer (exec/bound.rs),
    /// they stay in a state buffer between runs ([`Executable::state_layout`] says so, and
    /// runs go through [`Executable::run_bound`]); otherwise the plan is [`Executable::new`]'s.
    pub fn new_bound(
        graph: Arc<Graph>,
        spec: Specialized,
        devices: Vec<Device>,
        memory_limit: Option<u64>,
        tuning: &Tuning,
        pairs: &[(ValueId, ValueId)],
    ) -> Result<Executable> {
        Executable::new_sharing(graph, spec, devices, memory_limit, tuning, pairs, None)
    }

    /// [`Executable::new_bound`] for one of several plans of a model (one per set of input
    /// shapes) that share the GPU copies of its initializers in `pool` under `owner`: the
    /// copies there are used and charged nothing, the others uploaded and added to the pool.
    pub fn new_sharing(
        graph: Arc<Graph>,
        spec: Specialized,
        devices: Vec<Device>,
        memory_limit: Option<u64>,
        tuning: &Tuning,
        pairs: &[(ValueId, ValueId)],
        pool: Option<(&shared::SharedWeights, &shared::WeightOwner)>,
    ) -> Result<Executable> {
        let (cost, kernels) = plan::cost_graph(&graph, &spec, &tuning.kernels);
        let mut snapshot = plan::inventory(&devices, memory_limit);
        let sharing = pool.map(|(pool, owner)| {
            let values = (0..graph.value_names.len())
                .filter(|&v| graph.is_initializer(v))
                .collect();
            let gpus = (0..devices.len()).filter(|&d| matches!(devices[d], Device::Gpu(_)));
            shared::Sharing::claim(pool, owner, values, gpus)
        });
        if let Some(s) = &sharing {
            snapshot.resident = s
                .claimed
                .iter()
                .map(|(&d, copies)| {
                    let dref = vkml_planner::DeviceRef {
                        node: LOCAL_NODE.to_string(),
                        index: d,
                    };
                    (dref, copies.keys().copied().collect())
                })
                .collect();
        }
        let links = bridge::local_links(&devices);
        let plan = vkml_planner::plan(&cost, &snapshot, &links).map_err(plan_error)?;
        let state = bound_state(&graph, &spec, &devices, &plan, pairs);
        let exe = Executable::build(
            graph,
            spec,
            devices,
            plan,
            kernels,
            LOCAL_NODE,
            tuning.launch(),
            state,
            sharing.as_ref(),
        )?;
        if let Some((pool, owner)) = pool {
            // Nothing is reserved on one machine: the planner's budgets are the whole check.
            for (d, (buffer, values)) in exe.fresh_shared() {
                pool.register(owner, d, buffer, &values, 0);
            }
        }
        Ok(exe)
    }

    /// The part of `plan` placed on node `local` (whose devices are `devices`, in the order
    /// the plan's snapshot lists them): the whole plan on a single machine, one fragment of
    /// it on a cluster, where the other nodes' chunks feed this one's through [`RunLink`].
    /// `pairs` (input, output) are the bindings of the sequences the plan runs: those this
    /// node can keep on a GPU stay in a state buffer of the sequence's between runs
    /// ([`Executable::state_layout`], [`Executable::start_fragment_bound`]). The weights in
    /// `sharing` are shared with the model's other plans on this node (exec/shared.rs).
    #[allow(clippy::too_many_arguments)]
    pub fn with_plan(
        graph: Arc<Graph>,
        spec: Specialized,
        devices: Vec<Device>,
        plan: Plan,
        kernels: Kernels,
        local: &str,
        launch: Launch,
        pairs: &[(ValueId, ValueId)],
        sharing: Option<&shared::Sharing>,
    ) -> Result<Executable> {
        let state = fragment_state(&graph, &spec, &devices, &plan, local, pairs);
        Executable::build(
            graph, spec, devices, plan, kernels, local, launch, state, sharing,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        graph: Arc<Graph>,
        spec: Specialized,
        devices: Vec<Device>,
        plan: Plan,
        kernels: Kernels,
        local: &str,
        launch: Launch,
        state: Option<bound::StateLayout>,
        sharing: Option<&shared::Sharing>,
    ) -> Result<Executable> {
        let mine = |p: usize| plan.placement[p].node == local;
        check_sizes(
            &graph,
            &spec,
            &devices,
            (0..spec.live.len()).filter(|&p| mine(p)),
        )?;
        let topo = Topology::new(&graph, &spec, &plan, local);
        let dev_of = |c: usize| plan.chunks[c].device.index;
        if let Some(d) = plan
            .placement
            .iter()
            .find(|d| d.node == local && d.index >= devices.len())
        {
            return Err(Error::Placement(format!(
                "the plan puts ops on device {d}, which this node does not have"
            )));
        }

        let mut ops_per_device = BTreeMap::new();
        for d in plan.placement.iter().filter(|d| d.node == local) {
            *ops_per_device.entry(devices[d.index].name()).or_insert(0) += 1;
        }
        let summary = PlanSummary {
            ops_per_device,
            transfers: plan.transfers.len(),
            chunks: plan.chunks.len(),
        };
        tracing::debug!(?summary, hash = plan.hash, "planned");

        let bridge = bridge::Bridge::new(&graph, &plan, &topo, &devices, launch.bridge);
        let mut layouts = BTreeMap::new();
        for (d, dev) in devices.iter().enumerate() {
            let Device::Gpu(g) = dev else { continue };
            let ops: Vec<(usize, usize)> = (0..spec.live.len())
                .filter(|&p| mine(p) && plan.placement[p].index == d)
                .map(|p| (p, plan.op_chunk[p]))
                .collect();
            if ops.is_empty() {
                continue;
            }
            let mut exported: Vec<ValueId> = Vec::new();
            for t in &plan.transfers {
                if topo.is_local(t.from_chunk)
                    && dev_of(t.from_chunk) == d
                    && !exported.contains(&t.value)
                {
                    exported.push(t.value);
                }
            }
            let bound_here = |o: ValueId| {
                state
                    .as_ref()
                    .is_some_and(|s| s.slot_of_output(o).is_some())
            };
            for &(p, _) in &ops {
                for &o in &spec.node(&graph, spec.live[p]).outputs {
                    if graph.outputs.iter().any(|(v, _)| *v == o)
                        && !exported.contains(&o)
                        && !bound_here(o)
                    {
                        exported.push(o);
                    }
                }
            }
            let mine = kernels.for_gpu(g.info().shader_features);
            let on = GpuOps {
                ops: ops.clone(),
                exported: exported.clone(),
                kernels: &mine,
                state: state.as_ref().filter(|s| s.device == d),
                shared: sharing.map(|s| (s, d)),
                bridge: &bridge.offsets,
            };
            let layout = GpuLayout::new(g.clone(), &graph, &spec, &on)?;
            layouts.insert(d, (layout, ops, exported, mine));
        }
        let on_cpu = |p: usize| {
            mine(p)
                && matches!(
                    devices[plan.placement[p].index],
                    Device::Cpu | Device::CpuFallback
                )
        };
        let cpu_out_types = (0..spec.live.len())
            .map(|p| {
                if !on_cpu(p) {
                    return Ok(Vec::new());
                }
                let node = spec.node(&graph, spec.live[p]);
                node.outputs
                    .iter()
                    .map(|&o| {
                        spec.types[o].clone().ok_or_else(|| Error::Node {
                            node: node.name.clone(),
                            op_type: node.op_type.clone(),
                            message: format!(
                                "output '{}' has no type after specialisation",
                                graph.value_names[o]
                            ),
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        realign_cpu_weights(&graph, &spec, (0..spec.live.len()).filter(|&p| on_cpu(p)));
        let release = release::Release::new(&graph, &spec, &plan, &topo, &devices);
        let meters = devices
            .iter()
            .map(|d| Some(busy::meter(&d.name())))
            .collect();
        let short = (0..plan.chunks.len())
            .map(|c| work::chunk_work(&graph, &spec, &plan, c) <= SHORT_CHUNK_WORK)
            .collect();
        let exe = Executable {
            graph,
            spec,
            devices,
            plan,
            topo,
            release,
            layouts,
            pool: Mutex::new(Vec::new()),
            summary,
            cpu_out_types,
            profile: profile::Profile::default(),
            arm: launch.arm,
            bridge,
            meters,
            state,
            short,
        };
        // One context up front, so the first run pays no recording (a bound plan's contexts
        // belong to the state buffers they are made for).
        if exe.state.is_none() {
            let ctx = exe.new_context(None)?;
            exe.pool.lock().expect("pool").push(ctx);
        }
        Ok(exe)
    }

    /// The devices (indices) the plan puts ops on, and how many values it passes between
    /// GPUs through shared host memory (tests).
    #[cfg(test)]
    pub(crate) fn devices_and_bridged(&self) -> (std::collections::BTreeSet<usize>, usize) {
        let used = self.plan.placement.iter().map(|d| d.index).collect();
        (used, self.bridge.offsets.len())
    }

    /// Its runs are left out of the load `status` reports (runs and busy time): the device
    /// probe's.
    pub(crate) fn unmetered(mut self) -> Executable {
        self.meters.iter_mut().for_each(|m| *m = None);
        self
    }

    /// Whether its runs count in the load `status` reports.
    fn metered(&self) -> bool {
        self.meters.iter().any(Option::is_some)
    }

    /// The busy meter of device `d`, held until the guard drops (none when unmetered).
    fn busy(&self, d: usize) -> Option<busy::BusyGuard> {
        self.meters[d].as_ref().map(busy::BusyMeter::guard)
    }

    /// Times every op this node runs from now on (see exec/profile.rs): CPU ops by the
    /// clock, GPU ops by timestamps in their command buffers (contexts recorded from now on
    /// are timed; the pooled ones, untimed, are dropped).
    pub fn enable_profiling(&self) {
        self.profile.enable();
        self.pool.lock().expect("pool").clear();
    }

    /// The times of the ops profiled so far, in plan order.
    pub fn profile(&self) -> Vec<NodeTime> {
        self.profile.report(|p| {
            let node = self.spec.node(&self.graph, self.spec.live[p]);
            let gpu = matches!(
                self.devices.get(self.plan.placement[p].index),
                Some(Device::Gpu(_))
            );
            (node.name.clone(), node.op_type.clone(), gpu)
        })
    }

    /// The GPU kernels profiled so far, each one's median time in a run, largest first.
    pub fn kernel_profile(&self) -> Vec<KernelTime> {
        self.profile.kernel_report()
    }

    /// The ops this node runs of the plan: (node name, op type).
    pub fn local_ops(&self, local: &str) -> Vec<(String, String)> {
        self.spec
            .live
            .iter()
            .enumerate()
            .filter(|&(p, _)| self.plan.placement[p].node == local)
            .map(|(_, &i)| {
                let n = self.spec.node(&self.graph, i);
                (n.name.clone(), n.op_type.clone())
            })
            .collect()
    }

    pub fn summary(&self) -> &PlanSummary {
        &self.summary
    }

    /// The buffers of shared weights this executable uploaded, per GPU (device index): the
    /// caller registers them for the model's next plans (exec/shared.rs).
    pub fn fresh_shared(&self) -> Vec<(usize, shared::Uploaded)> {
        self.layouts
            .iter()
            .filter_map(|(&d, (l, ..))| Some((d, l.fresh.clone()?)))
            .collect()
    }

    pub fn output_types(&self) -> Vec<ValueType> {
        self.graph
            .outputs
            .iter()
            .map(|(v, _)| self.spec.types[*v].clone().expect("typed"))
            .collect()
    }

    fn new_context(&self, state: Option<&GpuBuffer>) -> Result<run::Contexts> {
        let mut m = BTreeMap::new();
        let mut bridges = self.bridge.import(&self.devices)?;
        for (d, (layout, ops, exported, kernels)) in &self.layouts {
            let on = GpuOps {
                ops: ops.clone(),
                exported: exported.clone(),
                kernels,
                state: self.state.as_ref().filter(|s| s.device == *d),
                // Only the layout reads it, and the layout is made.
                shared: None,
                bridge: &self.bridge.offsets,
            };
            let timed = self.profile.is_on();
            // A state buffer's runs follow one another: nothing to queue ahead; a timed
            // list is never armed.
            let armable = if on.state.is_some() || timed {
                None
            } else {
                self.armable(ops)
            };
            let state = state.filter(|_| on.state.is_some());
            m.insert(
                *d,
                layout.context(
                    &self.graph,
                    &self.spec,
                    &on,
                    armable,
                    gpu::Outside {
                        state,
                        bridge: bridges.remove(d),
                    },
                    timed,
                )?,
            );
        }
        Ok(Arc::new(m))
    }

    /// Where this plan keeps bound values between runs: none when it was not made with
    /// [`Executable::new_bound`], or its pairs could not stay on a GPU (then it runs as any).
    pub fn state_layout(&self) -> Option<&bound::StateLayout> {
        self.state.as_ref()
    }

    /// The GPU that holds the state buffer.
    pub fn state_gpu(&self) -> Option<&Arc<crate::device::vulkan::Gpu>> {
        match &self.devices[self.state.as_ref()?.device] {
            Device::Gpu(g) => Some(g),
            _ => None,
        }
    }

    /// An execution context that reads and writes the bound values in `state` (a buffer
    /// made for [`Executable::state_layout`], or one compatible with it).
    pub fn bound_context(&self, state: &GpuBuffer) -> Result<BoundContext> {
        if self.state.is_none() {
            return Err(Error::Device("this plan keeps no bound values".into()));
        }
        Ok(BoundContext(self.new_context(Some(state))?))
    }

    /// Runs once in a [`Executable::bound_context`]: `inputs` are the graph inputs that are
    /// not bound (graph input index, tensor); the outputs come back in graph order, `None`
    /// for the bound ones, which stay in the state buffer.
    pub fn run_bound(
        self: &Arc<Self>,
        ctx: &BoundContext,
        inputs: Vec<(usize, Tensor)>,
    ) -> Result<Vec<Option<Tensor>>> {
        let state = self
            .state
            .as_ref()
            .ok_or_else(|| Error::Device("this plan keeps no bound values".into()))?;
        let direct = run::direct_chunk(self)
            .ok_or_else(|| Error::Device("a bound plan must be one GPU chunk".into()))?;
        let inputs: Vec<(ValueId, Tensor)> = inputs
            .into_iter()
            .filter_map(|(i, t)| self.graph.inputs.get(i).map(|(v, _)| (*v, t)))
            .collect();
        run::run_direct_bound(self, &ctx.0, &inputs, direct, Some(state))
    }

    /// The chunk a GPU may queue ahead of each run (exec/gpu.rs, `ArmSlot`): its only chunk,
    /// when that chunk waits for nothing but graph inputs and does at most [`ARM_MAX_FLOPS`]
    /// of work. Not when the session's tuning turns arming off.
    fn armable(&self, ops: &[(usize, usize)]) -> Option<usize> {
        if !self.arm {
            return None;
        }
        let (_, c) = *ops.first()?;
        let single = ops.iter().all(|&(_, other)| other == c);
        let small = || {
            let flops: u64 = ops.iter().map(|&(p, _)| self.flops(p)).sum();
            flops <= ARM_MAX_FLOPS
        };
        (single && self.topo.is_local(c) && self.topo.initial[c] == 0 && small()).then_some(c)
    }

    /// Whether CPU chunk `c` may run on the thread that made it ready.
    pub(super) fn short_chunk(&self, c: usize) -> bool {
        self.short.get(c).copied().unwrap_or(false)
    }

    /// The arithmetic work of the op at plan position `p`.
    fn flops(&self, p: usize) -> u64 {
        work::op_flops(&self.graph, &self.spec, p)
    }

    /// Runs once with inputs in the graph's input order. Concurrent runs each take an
    /// execution context of their own from the pool (or make one).
    pub fn run(self: &Arc<Self>, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if self.state.is_some() {
            return Err(Error::Device(
                "a plan with bound values runs through run_bound".into(),
            ));
        }
        let inputs = self
            .graph
            .inputs
            .iter()
            .map(|(v, _)| *v)
            .zip(inputs)
            .collect();
        self.run_with(inputs)
    }

    /// Starts this node's fragment once and returns: `inputs` are the graph inputs its chunks
    /// read (graph input index, tensor); values from other nodes come through the
    /// [`RunLink`] handed to `register` before anything starts, and what other nodes need
    /// leaves through `hooks`. No thread waits for the run: `done` is called once every
    /// local chunk has finished, or once the run failed or was aborted and nothing of it
    /// runs any more. An error here (no execution context could be made) means nothing
    /// started and `done` is never called.
    pub fn start_fragment(
        self: &Arc<Self>,
        inputs: Vec<(usize, Tensor)>,
        hooks: Arc<dyn RemoteHooks>,
        register: impl FnOnce(RunLink),
        done: Done,
    ) -> Result<()> {
        if self.state.is_some() {
            return Err(Error::Device(
                "a fragment with bound values runs through start_fragment_bound".into(),
            ));
        }
        let inputs = self.input_values(inputs);
        let ctx = self.context()?;
        run::start_detached(self, ctx, inputs, hooks, register, done, true);
        Ok(())
    }

    /// [`Executable::start_fragment`] in a [`Executable::bound_context`]: the bound values
    /// in the context's state buffer are read and written in place, and the bound outputs
    /// are not handed to `hooks`. The context is the caller's again once `done` is called.
    pub fn start_fragment_bound(
        self: &Arc<Self>,
        ctx: &BoundContext,
        inputs: Vec<(usize, Tensor)>,
        hooks: Arc<dyn RemoteHooks>,
        register: impl FnOnce(RunLink),
        done: Done,
    ) -> Result<()> {
        if self.state.is_none() {
            return Err(Error::Device("this plan keeps no bound values".into()));
        }
        let inputs = self.input_values(inputs);
        let ctx = Arc::clone(&ctx.0);
        run::start_detached(self, ctx, inputs, hooks, register, done, false);
        Ok(())
    }

    /// Graph inputs by index, as values.
    fn input_values(&self, inputs: Vec<(usize, Tensor)>) -> Vec<(ValueId, Tensor)> {
        inputs
            .into_iter()
            .filter_map(|(i, t)| self.graph.inputs.get(i).map(|(v, _)| (*v, t)))
            .collect()
    }

    fn run_with(self: &Arc<Self>, inputs: Vec<(ValueId, Tensor)>) -> Result<Vec<Tensor>> {
        let ctx = self.context()?;
        let (ctx, result) = run::run(self, ctx, inputs);
        self.pool.lock().expect("pool").push(ctx);
        result
    }

    /// An execution context from the pool, or a new one.
    fn context(&self) -> Result<run::Contexts> {
        let ctx = self.pool.lock().expect("pool").pop();
        match ctx {
            Some(c) => Ok(c),
            None => self.new_context(None),
        }
    }

    /// Graph inputs (indices) that this node's chunks read.
    pub fn needed_inputs(&self) -> &[usize] {
        &self.topo.needed_inputs
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    pub fn spec(&self) -> &Specialized {
        &self.spec
    }

    fn chunk_reads(&self, c: usize, v: ValueId) -> bool {
        self.plan.chunks[c].ops.iter().any(|&p| {
            self.spec
                .node(&self.graph, self.spec.live[p])
                .inputs
                .contains(&Some(v))
        })
    }
}

/// The constants read by this node's CPU ops (`cpu_ops`, indices into `spec.live`), each
/// given now the aligned copy its first view would make where its bytes are misaligned in the
/// model file, and the mapped pages it was copied from dropped: those pages would otherwise
/// stay resident beside the copy for the session's life (ResNet-50's peak RSS rose by about
/// the size of its misaligned weights with copies made by the views alone).
fn realign_cpu_weights(graph: &Graph, spec: &Specialized, cpu_ops: impl Iterator<Item = usize>) {
    for p in cpu_ops {
        for v in spec.node(graph, spec.live[p]).inputs.iter().flatten() {
            if let Some(t) = &spec.consts[*v]
                && t.realign()
            {
                crate::onnx::release_pages(t.bytes());
            }
        }
    }
}
