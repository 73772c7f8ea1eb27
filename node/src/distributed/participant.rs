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
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tokio::runtime::Handle;
use vkml_planner::{LinkCosts, Plan};
use vkml_protocol::dist::Config;
use vkml_protocol::dist::participant::{
    self as core, Arrival, DeviceBudget, FragmentInfo, ParticipantAction,
};
use vkml_protocol::{Message, pb};

use super::alarm::Alarm;
use super::link::Link;
use super::{DistError, fragment, lock, wire};
use crate::error::Error;
use crate::exec::{Device, Executable, Kernels, RemoteHooks, RunLink};
use crate::graph::{Graph, Specialized, ValueId};
use crate::tensor::Tensor;
use crate::tuning::Tuning;

/// The machine, and the handles of the runs it has made ready, under one lock.
struct State {
    core: core::Participant<Arc<Executable>, Tensor>,
    /// What `Deliver` and `AbortRun` act on: set when a run registers, gone when it returns.
    links: BTreeMap<(u64, u64), RunLink>,
}

/// A fragment that passed its checks: the plan, and the graph and kernels to build it from.
struct Checked {
    plan: Plan,
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
}

impl Participant {
    pub fn new(
        me: String,
        devices: Vec<Device>,
        inventory: Vec<pb::Device>,
        link: Arc<Link>,
        rt: Handle,
        tuning: Tuning,
    ) -> Participant {
        let budgets = inventory
            .iter()
            .map(|d| DeviceBudget {
                name: d.name.clone(),
                budget: d.memory_budget,
            })
            .collect();
        let state = State {
            core: core::Participant::new(me.clone(), budgets, Config::default()),
            links: BTreeMap::new(),
        };
        Participant {
            me,
            devices,
            inventory,
            link,
            rt,
            state: Mutex::new(state),
            alarm: Alarm::default(),
            tuning,
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
            graph,
            spec,
            kernels,
        } = self.check(f, weights)?;
        let reserve: Vec<(usize, u64)> = plan
            .memory
            .iter()
            .filter(|(d, _)| d.node == self.me)
            .map(|(d, &b)| (d.index, b))
            .collect();
        let ticket = self.call(|st, _| st.core.reserve(&reserve))?;
        let info = FragmentInfo {
            submitter: f.submitter.clone(),
            nodes: plan.placement.iter().map(|d| d.node.clone()).collect(),
        };
        let built = Executable::with_plan(
            graph,
            spec,
            self.devices.clone(),
            plan,
            kernels,
            &self.me,
            self.tuning.arm,
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
        self.call(|st, _| st.core.loaded(ticket, f.model_id, info, exe));
        Ok(())
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
            graph,
            spec,
            kernels,
        })
    }

    /// Starts run `run` of a loaded fragment on a blocking thread, as `from` (its submitter)
    /// asked. A fragment not held here is reported to a remote submitter by the machine; the
    /// error is for this node's own submitter.
    pub fn start_run(
        self: &Arc<Self>,
        from: &str,
        model: u64,
        run: u64,
        inputs: Vec<(usize, Tensor)>,
    ) -> Result<(), DistError> {
        let (ticket, exe) = self.call(|st, _| {
            let t = st.core.start_run(from, model, run)?;
            let exe = st.core.fragment(model).cloned();
            Ok::<_, core::ParticipantError>((t, exe))
        })?;
        let exe = exe.ok_or(DistError::NoModel(model))?;
        let me = Arc::clone(self);
        self.rt.spawn_blocking(move || {
            let hooks = Arc::new(Hooks {
                participant: me.clone(),
                model,
                run,
                submitter: ticket.submitter.clone(),
            });
            let result = exe.run_fragment(inputs, hooks, |link| {
                me.call(|st, _| {
                    st.links.insert((model, run), link);
                    st.core.run_ready(&ticket);
                });
            });
            let result = result.map_err(|e| e.to_string());
            me.call(|st, _| {
                st.links.remove(&(model, run));
                st.core.run_finished(&ticket, result);
            });
        });
        Ok(())
    }

    /// A value another node produced for a run of ours.
    pub fn arrive(&self, model: u64, run: u64, value: ValueId, t: Tensor) {
        let arrival = self.call(|st, now| st.core.arrive(model, run, value as u64, t, now));
        match arrival {
            Arrival::UnknownModel => {
                tracing::debug!("a value for unknown model {model:016x}; dropped");
            }
            Arrival::Aborted => tracing::debug!("a value for abandoned run {run}; dropped"),
            Arrival::Delivered | Arrival::Early => {}
        }
    }

    /// The submitter gave the run up (another node failed): stop waiting.
    pub fn abort(&self, model: u64, run: u64, reason: &str) {
        self.call(|st, now| st.core.abort(model, run, reason, now));
    }

    /// Forgets a model; its runs in flight end with `why`.
    pub fn unload(&self, model: u64, why: &str) {
        self.call(|st, now| st.core.unload(model, why, now));
    }

    /// A member died or left: every fragment whose plan involves it is over.
    pub fn member_down(&self, node: &str) {
        self.call(|st, now| st.core.member_down(node, now));
    }

    pub(super) fn handle_timeout(&self) {
        self.call(|st, now| st.core.handle_timeout(now));
    }

    /// Models loaded here (load ids), for tests and status.
    pub fn loaded(&self) -> Vec<u64> {
        lock(&self.state).core.loaded_models()
    }

    /// Calls the machine, then carries out what it asks, with the lock released.
    fn call<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let (r, todo, next) = {
            let mut st = lock(&self.state);
            let now = Instant::now();
            let r = f(&mut st, now);
            let todo = st.drain();
            (r, todo, st.core.poll_timeout())
        };
        self.alarm.set(next);
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
                    self.link.post(&to, message);
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
            other => DistError::Placement(other.to_string()),
        }
    }
}

/// Where a run's finished values go: other participants, and the submitter.
struct Hooks {
    participant: Arc<Participant>,
    model: u64,
    run: u64,
    submitter: String,
}

impl RemoteHooks for Hooks {
    fn send(&self, value: ValueId, nodes: &[String], t: &Tensor) {
        for node in nodes {
            let h = wire::header(t, pb::TensorRole::Edge, self.model, self.run, value as u64);
            let p = self.participant.clone();
            let (node, payload, submitter) =
                (node.clone(), t.bytes().clone(), self.submitter.clone());
            let (model, run) = (self.model, self.run);
            self.participant.rt.spawn(async move {
                if let Err(e) = p.link.send_tensor(&node, h, payload).await {
                    let why = e.to_string();
                    p.call(|st, _| {
                        st.core
                            .value_send_failed(&submitter, model, run, &node, &why)
                    });
                }
            });
        }
    }

    fn output(&self, index: usize, t: &Tensor) {
        let h = wire::header(
            t,
            pb::TensorRole::Output,
            self.model,
            self.run,
            index as u64,
        );
        let link = self.participant.link.clone();
        let (payload, submitter) = (Bytes::clone(t.bytes()), self.submitter.clone());
        let (model, run) = (self.model, self.run);
        self.participant.rt.spawn(async move {
            if let Err(e) = link.send_tensor(&submitter, h, payload).await {
                tracing::warn!(
                    "cannot send output {index} of run {run} (model {model:016x}) to {submitter}: {e}"
                );
            }
        });
    }
}
