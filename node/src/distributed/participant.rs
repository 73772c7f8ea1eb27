//! A node's part in other nodes' models: the driver of `vkml_protocol::dist::participant`,
//! which keeps the loaded fragments with their reservations and the run table (values that
//! arrive early, runs under way, runs given up).
//!
//! What stays here is what needs the graph and the devices: a fragment is checked before
//! anything is allocated (the plan recomputed from its snapshot and cost graph must hash as
//! the submitter's did, this node's devices must be the ones the snapshot lists, its ops must
//! cost what the submitter computed), then built into an executable once the machine has
//! reserved what the plan charges this node. Runs execute on blocking threads; their values
//! reach them through the `RunLink` each registers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::runtime::Handle;
use vkml_planner::{LinkCosts, Plan, Snapshot};
use vkml_protocol::dist::Config;
use vkml_protocol::dist::participant::{
    self as core, Arrival, DeviceBudget, FragmentInfo, ParticipantAction, RunTicket,
};
use vkml_protocol::{Message, pb};

use super::alarm::Alarm;
use super::kept::{GpuStep, Kept, SeqKey};
use super::link::Link;
use super::shared_charges::{self, Charges, Planned};
use super::{DistError, fragment, lock, wire};
use crate::error::Error;
use crate::exec::shared::{SharedWeights, WeightOwner};
use crate::exec::{Device, Done, Executable, Kernels, RemoteHooks, RunLink};
use crate::graph::{Graph, Specialized, ValueId};
use crate::tensor::Tensor;
use crate::tuning::Tuning;

/// How long the weights of a plan that made way for another plan of its model stay once no
/// plan uses them: long enough for a generation loop to come back to its prompt's plan.
pub const KEEP_SHARED: Duration = Duration::from_secs(60);

/// The machine, and the handles of the runs it has made ready, under one lock.
struct State {
    core: core::Participant<Arc<Executable>, Tensor>,
    /// What `Deliver` and `AbortRun` act on: set when a run registers, gone when it returns.
    links: BTreeMap<(u64, u64), RunLink>,
    /// The reservations per device last gossiped.
    published: Vec<u64>,
    /// Whose weights each loaded plan (load id) shares.
    owners: BTreeMap<u64, WeightOwner>,
}

/// A fragment that passed its checks: the plan, and the graph and kernels to build it from.
struct Checked {
    plan: Plan,
    snapshot: Snapshot,
    graph: Arc<Graph>,
    spec: Specialized,
    kernels: Kernels,
}

/// An action to carry out once the lock is released.
enum Todo {
    Send { to: String, message: Message },
    Deliver(RunLink, ValueId, Tensor),
    Abort(RunLink, String),
    Unloaded { model: u64, reason: String },
}

pub struct Participant {
    me: String,
    devices: Vec<Device>,
    /// This node's devices as it advertises them (the snapshot must agree).
    inventory: Vec<pb::Device>,
    link: Arc<Link>,
    rt: Handle,
    state: Mutex<State>,
    alarm: Alarm,
    /// This node's plan settings: a fragment planned with others is refused.
    tuning: Tuning,
    /// Fault injection: runs of a part holding the op of this node name panic.
    panic_op: Option<String>,
    /// What this node keeps for its submitters' sequences.
    kept: Kept,
    /// The weights the plans of each model share on this node's GPUs.
    shared: SharedWeights,
    /// Bytes of weights loads found there instead of uploading them.
    reused: AtomicU64,
}

/// What a step of a sequence asks of this node's part: the submitter's directions (a `Run`'s
/// `sequence`, `take` and `keep`).
#[derive(Debug, Clone, Default)]
pub struct Step {
    pub sequence: u64,
    /// Graph inputs taken from what this node keeps for the sequence.
    pub take: Vec<usize>,
    /// (graph output, graph input): outputs kept here as inputs of the next step.
    pub keep: Vec<(usize, usize)>,
}

impl Step {
    /// The directions a submitter's `Run` carries, if it is a step of a sequence.
    pub fn of_run(r: &pb::Run) -> Option<Step> {
        (r.sequence != 0).then(|| Step {
            sequence: r.sequence,
            take: r.take.iter().map(|&i| i as usize).collect(),
            keep: wire::pairs(&r.keep),
        })
    }
}

impl Participant {
    pub fn new(
        me: String,
        devices: Vec<Device>,
        inventory: Vec<pb::Device>,
        link: Arc<Link>,
        rt: Handle,
        tuning: Tuning,
        config: Config,
    ) -> Participant {
        let budgets = inventory
            .iter()
            .map(|d| DeviceBudget {
                name: d.name.clone(),
                budget: d.memory_budget,
            })
            .collect();
        let published = vec![0; inventory.len()];
        let kept = Kept::new(config.sequence_idle);
        let state = State {
            core: core::Participant::new(me.clone(), budgets, config),
            links: BTreeMap::new(),
            published,
            owners: BTreeMap::new(),
        };
        Participant {
            me,
            devices,
            inventory,
            panic_op: link.panic_op(),
            link,
            rt,
            state: Mutex::new(state),
            alarm: Alarm::default(),
            tuning,
            kept,
            shared: SharedWeights::default(),
            reused: AtomicU64::new(0),
        }
    }

    pub fn name(&self) -> &str {
        &self.me
    }

    pub(super) fn alarm(&self) -> &Alarm {
        &self.alarm
    }

    /// Checks and loads a fragment (blocking: builds pipelines and allocates device memory).
    pub fn load(
        &self,
        f: &pb::Fragment,
        weights: BTreeMap<ValueId, Tensor>,
    ) -> Result<(), DistError> {
        let Checked {
            plan,
            snapshot,
            graph,
            spec,
            kernels,
        } = self.check(f, weights)?;
        let planned = Planned {
            plan: &plan,
            snapshot: &snapshot,
            graph: &graph,
            spec: &spec,
        };
        let Charges {
            own,
            shared,
            sharing,
        } = shared_charges::charges(&self.me, f, &planned, &self.devices, &self.shared);
        let ticket = self.reserve(&own, &shared)?;
        if let Some((_, s)) = &sharing {
            let found: u64 = s
                .claimed
                .values()
                .flat_map(|c| c.keys())
                .filter_map(|&v| planned.spec.types[v].as_ref())
                .map(|t| t.bytes() as u64)
                .sum();
            self.reused.fetch_add(found, Ordering::Relaxed);
        }
        let info = FragmentInfo {
            submitter: f.submitter.clone(),
            nodes: plan.placement.iter().map(|d| d.node.clone()).collect(),
            lives: f
                .lives
                .iter()
                .map(|l| (l.node.clone(), l.generation))
                .collect(),
        };
        // The bindings of the sequences the plan runs, as (input, output) values.
        let pairs: Vec<(ValueId, ValueId)> = f
            .bound
            .iter()
            .filter_map(|b| {
                let input = graph.inputs.get(b.input as usize)?.0;
                let output = graph.outputs.get(b.output as usize)?.0;
                Some((input, output))
            })
            .collect();
        let built = Executable::with_plan(
            graph,
            spec,
            self.devices.clone(),
            plan,
            kernels,
            &self.me,
            self.tuning.launch(),
            &pairs,
            sharing.as_ref().map(|(_, s)| s),
        );
        let exe = match built {
            Ok(e) => e,
            Err(e) => {
                self.call(|st, _| st.core.load_failed(ticket));
                return Err(e.into());
            }
        };
        tracing::info!(
            "loaded model {:016x} from {}: {} ops here",
            f.model_id,
            f.submitter,
            exe.summary().ops_per_device.values().sum::<usize>()
        );
        let exe = Arc::new(exe);
        let owner = sharing.map(|(o, _)| o);
        if let Some(owner) = &owner {
            self.register_shared(owner, &exe, ticket.shared());
        }
        self.call(|st, _| {
            if let Some(owner) = owner {
                st.owners.insert(f.model_id, owner);
            }
            st.core.loaded(ticket, f.model_id, info, exe)
        });
        Ok(())
    }

    /// Reserves a load's own charges and the shared weights it uploads; where they do not fit,
    /// again once the shared weights no plan uses (kept for plans to come) are let go.
    fn reserve(
        &self,
        own: &[(usize, u64)],
        shared: &[(usize, u64)],
    ) -> Result<core::LoadTicket, DistError> {
        self.call(|st, _| match st.core.reserve_sharing(own, shared) {
            Err(core::ParticipantError::NoRoom { .. }) => {
                let freed = self.shared.sweep(None);
                st.core.release_shared(&freed);
                st.core.reserve_sharing(own, shared)
            }
            r => r,
        })
        .map_err(DistError::from)
    }

    /// Hands the shared weights `exe` uploaded to the registry, with what was reserved for
    /// them on each device (`charges`).
    fn register_shared(&self, owner: &WeightOwner, exe: &Executable, charges: &[(usize, u64)]) {
        let mut left: BTreeMap<usize, u64> = charges.iter().copied().collect();
        for (d, (buffer, values)) in exe.fresh_shared() {
            let charge = left.remove(&d).unwrap_or(0);
            self.shared.register(owner, d, buffer, &values, charge);
        }
        // A charge with no buffer (none was needed after all) goes back at once.
        let unused: Vec<(usize, u64)> = left.into_iter().collect();
        if !unused.is_empty() {
            self.call(|st, _| st.core.release_shared(&unused));
        }
    }

    /// What the submitter sent, checked against what this node computes from it.
    fn check(
        &self,
        f: &pb::Fragment,
        weights: BTreeMap<ValueId, Tensor>,
    ) -> Result<Checked, DistError> {
        let snapshot = fragment::snapshot_from_wire(
            f.snapshot
                .as_ref()
                .ok_or_else(|| DistError::Protocol("fragment without a snapshot".into()))?,
        );
        let cost = fragment::cost_from_wire(
            f.cost
                .as_ref()
                .ok_or_else(|| DistError::Protocol("fragment without a cost graph".into()))?,
        )?;
        let mine = snapshot.nodes.get(&self.me).ok_or_else(|| {
            DistError::Placement(format!(
                "the plan's snapshot does not list node {}",
                self.me
            ))
        })?;
        let advertised: Vec<_> = self
            .inventory
            .iter()
            .map(crate::cluster::inventory::to_planner)
            .collect();
        if mine.len() != advertised.len()
            || mine.iter().zip(&advertised).any(|(a, b)| a.name != b.name)
        {
            return Err(DistError::Placement(format!(
                "the plan's snapshot lists other devices for {} than it has",
                self.me
            )));
        }
        if f.tuning_fingerprint != self.tuning.fingerprint() {
            return Err(DistError::Placement(format!(
                "{} plans with other settings than the submitter {}: here {}, there {} (give \
                 every node the same VKML_* settings)",
                self.me,
                f.submitter,
                self.tuning.plan_settings(),
                f.plan_settings
            )));
        }
        let plan = vkml_planner::plan(&cost, &snapshot, &LinkCosts::default())
            .map_err(|e| DistError::Placement(e.to_string()))?;
        if plan.hash != f.plan_hash {
            return Err(DistError::Placement(format!(
                "plan hash mismatch: {} computed {:016x} from the same snapshot and graph, \
                 the submitter {:016x} (do the nodes run the same vkml version?)",
                self.me, plan.hash, f.plan_hash
            )));
        }
        let (graph, spec) = fragment::rebuild(f, weights)?;
        if plan.placement.len() != spec.live.len() {
            return Err(DistError::Protocol(
                "the fragment's ops do not match its cost graph".into(),
            ));
        }
        let (local_cost, kernels) = crate::exec::cost_graph(&graph, &spec, &self.tuning.kernels);
        for (p, d) in plan.placement.iter().enumerate() {
            let (a, b) = (&local_cost.ops[p], &cost.ops[p]);
            if d.node == self.me
                && (a.flops != b.flops || a.gpu != b.gpu || a.gpu_needs != b.gpu_needs)
            {
                return Err(DistError::Placement(format!(
                    "op '{}' costs differently here than on the submitter (do the nodes run \
                     the same vkml version?)",
                    b.name
                )));
            }
        }
        Ok(Checked {
            plan,
            snapshot,
            graph,
            spec,
            kernels,
        })
    }

    /// Starts run `run` of a loaded fragment, as `from` (its submitter) asked, and returns:
    /// no thread waits for the run (`Executable::start_fragment`), which reports to the
    /// machine when it ends. A fragment not held here is reported to a remote submitter by
    /// the machine; the error is for this node's own submitter.
    pub fn start_run(
        self: &Arc<Self>,
        from: &str,
        model: u64,
        run: u64,
        mut inputs: Vec<(usize, Tensor)>,
        step: Option<Step>,
    ) -> Result<(), DistError> {
        let (ticket, exe) = self.call(|st, _| {
            let t = st.core.start_run(from, model, run)?;
            let exe = st.core.fragment(model).cloned();
            Ok::<_, core::ParticipantError>((t, exe))
        })?;
        let exe = exe.ok_or(DistError::NoModel(model))?;
        let seq: Option<SeqKey> = step.as_ref().map(|s| (from.to_string(), s.sequence));
        let on_gpu = match (&step, &seq) {
            (Some(s), Some(key)) => match self.step_values(key, s, &exe, &mut inputs) {
                Ok(g) => g,
                Err(why) => {
                    self.kept.end(key);
                    self.call(|st, now| st.core.run_finished(&ticket, Err(why), now));
                    return Ok(());
                }
            },
            _ => None,
        };
        // Trace events of a run's life on each node: with RUST_LOG=vkml::distributed=trace,
        // their timestamps break a split run down hop by hop.
        tracing::trace!("run {run}: part starting ({} inputs)", inputs.len());
        let hooks = Arc::new(Hooks {
            participant: self.clone(),
            ticket: ticket.clone(),
            keep: match (&step, &seq) {
                (Some(s), Some(key)) => Some((key.clone(), s.keep.iter().copied().collect())),
                _ => None,
            },
        });
        let (me, t) = (Arc::clone(self), ticket.clone());
        // The state buffer outlives the step, whose kernels write it, even if the sequence
        // ends meanwhile.
        let state = on_gpu.as_ref().map(|g| (g.ctx.clone(), g.buffer.clone()));
        let held = state.as_ref().map(|(_, b)| b.clone());
        let done: Done = Box::new(move |result| {
            tracing::trace!("run {run}: part ended");
            drop(held);
            // A step that failed may have kept some outputs and not others.
            if let (Err(_), Some(key)) = (&result, &seq) {
                me.kept.end(key);
            }
            me.call(|st, now| {
                st.links.remove(&(model, run));
                st.core
                    .run_finished(&t, result.map_err(|e| e.to_string()), now);
            });
        });
        let injected = self
            .panic_op
            .as_ref()
            .and_then(|name| exe.local_ops(&self.me).into_iter().find(|(n, _)| n == name));
        let me = Arc::clone(self);
        // A panic while the run starts must not take the caller (and the run's peers) down:
        // it fails the run, naming this node, like any error. Panics in an op's kernel are
        // caught where the kernel runs.
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some((name, op)) = &injected {
                panic!("node '{name}' ({op}): a panic injected by VKML_FAULTS");
            }
            let register = |link| {
                me.call(|st, now| {
                    st.links.insert((model, run), link);
                    st.core.run_ready(&ticket, now);
                })
            };
            match &state {
                Some((ctx, _)) => exe.start_fragment_bound(ctx, inputs, hooks, register, done),
                None => exe.start_fragment(inputs, hooks, register, done),
            }
        }));
        let failed = match started {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!("the run panicked: {}", crate::priority::panic_text(&*panic)),
        };
        self.call(|st, now| {
            st.links.remove(&(model, run));
            st.core.run_finished(&ticket, Err(failed), now);
        });
        Ok(())
    }

    /// Puts the values a step of sequence `key` reads from what this node keeps in place: in
    /// the sequence's GPU state buffer for those `exe` keeps there (returned: the step runs in
    /// its context), among `inputs` for the others. The error says which value is missing.
    fn step_values(
        &self,
        key: &SeqKey,
        step: &Step,
        exe: &Arc<Executable>,
        inputs: &mut Vec<(usize, Tensor)>,
    ) -> Result<Option<GpuStep>, String> {
        let on_gpu = match exe.state_layout() {
            Some(_) => Some(
                self.kept
                    .on_gpu(key, exe, inputs, Instant::now())
                    .map_err(|e| format!("sequence {:016x} on {}: {e}", key.1, self.me))?,
            ),
            None => None,
        };
        let on_host: Vec<usize> = step
            .take
            .iter()
            .copied()
            .filter(|i| on_gpu.as_ref().is_none_or(|g| !g.inputs.contains(i)))
            .collect();
        let values = self.kept.take(key, &on_host, Instant::now()).map_err(|i| {
            let name = exe
                .graph()
                .inputs
                .get(i)
                .map_or("?", |(_, d)| d.name.as_str());
            format!(
                "sequence {:016x}: the value of '{name}' is not kept on {} (the sequence ended, \
                 was idle too long, or a step of it failed): begin it again",
                step.sequence, self.me
            )
        })?;
        inputs.extend(values);
        Ok(on_gpu)
    }

    /// A value another node produced for a run of ours.
    pub fn arrive(&self, model: u64, run: u64, value: ValueId, t: Tensor) {
        tracing::trace!("run {run}: value {value} arrived");
        let arrival = self.call(|st, now| st.core.arrive(model, run, value as u64, t, now));
        match arrival {
            Arrival::UnknownModel => {
                tracing::debug!("a value for unknown model {model:016x}; dropped");
            }
            Arrival::Aborted => tracing::debug!("a value for abandoned run {run}; dropped"),
            Arrival::Delivered | Arrival::Early => {}
        }
    }

    /// A `RunFailed` from `from`: the submitter gave the run up, or a peer reports its
    /// failure (passed on to the submitter by the machine).
    pub fn run_failed(&self, from: &str, r: &pb::RunFailed) {
        self.call(|st, now| st.core.run_failed(from, r, now));
    }

    /// Forgets a model; its runs in flight end with `why`.
    /// Unloads plan `model` (`why`); `keep_weights`: it makes way for another plan of its
    /// model, which may share the weights it held: they stay [`KEEP_SHARED`] once no plan
    /// uses them.
    pub fn unload(&self, model: u64, why: &str, keep_weights: bool) {
        self.call(|st, now| {
            if let Some(owner) = st.owners.get(&model).filter(|_| keep_weights) {
                self.shared.keep(owner, now + KEEP_SHARED);
            }
            st.core.unload(model, why, now)
        });
    }

    /// Life `generation` of a member died or left: every fragment made with it is over.
    pub fn member_down(&self, node: &str, generation: u64) {
        self.call(|st, now| st.core.member_down(node, generation, now));
    }

    /// Life `generation` of a member is up: fragments made with an older life are over.
    pub fn member_up(&self, node: &str, generation: u64) {
        self.call(|st, now| st.core.member_up(node, generation, now));
    }

    /// This node learned it had been declared dead: its shared fragments are dropped.
    pub fn rejoined(&self) {
        self.call(|st, now| st.core.rejoined(now));
    }

    /// A value for run `run` of `model` from `from` was given up before it was whole.
    pub fn value_lost(&self, model: u64, run: u64, from: &str, why: &str) {
        self.call(|st, now| st.core.value_lost(model, run, from, why, now));
    }

    /// The node is stopping: every run aborts.
    pub fn abort_all(&self, why: &str) {
        self.call(|st, now| st.core.abort_all(why, now));
    }

    /// Bytes of the weights the plans of a model share on this node's GPUs, and of those
    /// loads reused, for `status`.
    pub fn shared_usage(&self) -> (u64, u64) {
        (self.shared.bytes(), self.reused.load(Ordering::Relaxed))
    }

    /// The fragments held here, for `status`.
    pub fn status(&self) -> Vec<pb::FragmentStatus> {
        lock(&self.state)
            .core
            .status()
            .into_iter()
            .map(|f| pb::FragmentStatus {
                load_id: f.model,
                submitter: f.submitter,
                reserved_bytes: f.reserved,
            })
            .collect()
    }

    pub(super) fn handle_timeout(&self) {
        let swept = self.kept.sweep(Instant::now());
        if swept > 0 {
            tracing::info!("freed {swept} idle sequence(s)");
        }
        self.call(|st, now| st.core.handle_timeout(now));
    }

    /// Gives up the values this node keeps for inputs `inputs` of a sequence of `from`'s (a
    /// step of it runs where another node reads them).
    pub fn fetch(
        &self,
        from: &str,
        sequence: u64,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Tensor)>, DistError> {
        let key = (from.to_string(), sequence);
        self.kept.take(&key, inputs, Instant::now()).map_err(|i| {
            self.kept.end(&key);
            DistError::Reported(format!(
                "sequence {sequence:016x}: input {i} is not kept on {}",
                self.me
            ))
        })
    }

    /// Forgets what this node keeps for a sequence of `from`'s.
    pub fn end_sequence(&self, from: &str, sequence: u64) {
        if self.kept.end(&(from.to_string(), sequence)) {
            tracing::debug!("sequence {sequence:016x} of {from} ended");
        }
    }

    /// Sequences kept here, their bytes, and those of the bytes in GPU buffers.
    pub fn kept_usage(&self) -> (usize, u64, u64) {
        self.kept.usage()
    }

    /// Models loaded here (load ids), for tests and status.
    pub fn loaded(&self) -> Vec<u64> {
        lock(&self.state).core.loaded_models()
    }

    /// Calls the machine, then carries out what it asks, with the lock released.
    fn call<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let (r, todo, next, reserved) = {
            let mut st = lock(&self.state);
            let now = Instant::now();
            let r = f(&mut st, now);
            let todo = st.drain();
            // A plan gone may have been the last to use some shared weights.
            let freed = self.shared.sweep(Some(now));
            if !freed.is_empty() {
                st.core.release_shared(&freed);
            }
            let reserved = (st.core.reserved() != st.published.as_slice()).then(|| {
                st.published = st.core.reserved().to_vec();
                st.published.clone()
            });
            let next = [
                st.core.poll_timeout(),
                self.kept.next_expiry(),
                self.shared.next_expiry(),
            ]
            .into_iter()
            .flatten()
            .min();
            (r, todo, next, reserved)
        };
        self.alarm.set(next);
        if let Some(reserved) = reserved {
            self.link.publish_reserved(&reserved);
        }
        for t in todo {
            match t {
                Todo::Send { to, message } => {
                    if let Message::RunFailed(r) = &message {
                        tracing::warn!(
                            "run {} of model {:016x} failed: {}; telling {to}",
                            r.run_id,
                            r.model_id,
                            r.reason
                        );
                    }
                    match message {
                        // A report the submitter never gets leaves its run waiting for the
                        // deadline when no other node of the plan can pass it on (a plan of
                        // one node cut off from its submitter): sent until answered.
                        m @ Message::RunFailed(_) if to != self.me => {
                            self.link.post_until_answered(&to, m)
                        }
                        m => self.link.post(&to, m),
                    }
                }
                Todo::Deliver(link, value, t) => {
                    link.deliver(value, t);
                }
                Todo::Abort(link, reason) => link.abort(Error::Device(reason)),
                Todo::Unloaded { model, reason } => {
                    tracing::info!("unloaded model {model:016x}: {reason}");
                }
            }
        }
        r
    }
}

impl State {
    fn drain(&mut self) -> Vec<Todo> {
        let mut todo = Vec::new();
        while let Some(a) = self.core.poll_action() {
            let t = match a {
                ParticipantAction::Send { to, message } => Todo::Send { to, message },
                ParticipantAction::Deliver {
                    model,
                    run,
                    value,
                    data,
                } => match self.links.get(&(model, run)) {
                    Some(l) => Todo::Deliver(l.clone(), value as ValueId, data),
                    None => continue,
                },
                ParticipantAction::AbortRun { model, run, reason } => {
                    match self.links.get(&(model, run)) {
                        Some(l) => Todo::Abort(l.clone(), reason),
                        None => continue,
                    }
                }
                ParticipantAction::Unloaded { model, reason, .. } => {
                    self.owners.remove(&model);
                    Todo::Unloaded { model, reason }
                }
            };
            todo.push(t);
        }
        todo
    }
}

impl From<core::ParticipantError> for DistError {
    fn from(e: core::ParticipantError) -> DistError {
        match e {
            core::ParticipantError::NoModel(m) => DistError::NoModel(m),
            e @ core::ParticipantError::Dropped { .. } => DistError::Reported(e.to_string()),
            other => DistError::Placement(other.to_string()),
        }
    }
}

/// Where a run's finished values go: other participants, and the submitter.
struct Hooks {
    participant: Arc<Participant>,
    ticket: RunTicket,
    /// A step of a sequence: its key, and the outputs kept here (output -> input).
    keep: Option<(SeqKey, BTreeMap<usize, usize>)>,
}

impl Hooks {
    /// Sends one value; a failure fails the run everywhere (the machine decides whom to
    /// name).
    fn send_to(&self, to: &str, what: String, h: pb::TensorHeader, payload: Bytes) {
        let p = self.participant.clone();
        let (to, t) = (to.to_string(), self.ticket.clone());
        self.participant.rt.spawn(async move {
            let sent = p.link.send_tensor(&to, h, payload).await;
            tracing::trace!("run {}: {what} to {to} sent", t.run);
            if let Err(e) = sent {
                let why = e.to_string();
                tracing::warn!(
                    "cannot send {what} of run {} (model {:016x}) to {to}: {why}",
                    t.run,
                    t.model
                );
                p.call(|st, now| st.core.value_send_failed(&t, &to, &what, &why, now));
            }
        });
    }
}

impl RemoteHooks for Hooks {
    fn send(&self, value: ValueId, nodes: &[String], t: &Tensor) {
        let (model, run) = (self.ticket.model, self.ticket.run);
        tracing::trace!("run {run}: value {value} made, for {nodes:?}");
        for node in nodes {
            let h = wire::header(t, pb::TensorRole::Edge, model, run, value as u64);
            self.send_to(node, format!("value {value}"), h, t.bytes().clone());
        }
    }

    fn output(&self, index: usize, t: &Tensor) {
        if let Some((key, keep)) = &self.keep
            && let Some(&input) = keep.get(&index)
        {
            tracing::trace!(
                "run {}: output {index} kept as input {input}",
                self.ticket.run
            );
            self.participant
                .kept
                .keep(key, input, t.clone(), Instant::now());
            return;
        }
        let (model, run) = (self.ticket.model, self.ticket.run);
        let h = wire::header(t, pb::TensorRole::Output, model, run, index as u64);
        let to = self.ticket.submitter.clone();
        self.send_to(&to, format!("output {index}"), h, Bytes::clone(t.bytes()));
    }
}
