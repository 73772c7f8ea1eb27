//! A node's part in other nodes' models: the fragments it holds, and the runs of them in
//! flight.
//!
//! Loading checks a fragment before anything is allocated: the plan recomputed from the
//! fragment's snapshot and cost graph must hash as the submitter's did, this node's devices
//! must be the ones the snapshot lists, and the memory the plan charges here must fit next to
//! what other loaded fragments reserved. A run starts when the submitter's Run arrives with
//! the inputs this node reads; values from other nodes may arrive before it and wait.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::runtime::Handle;
use vkml_planner::LinkCosts;
use vkml_protocol::pb;

use super::link::Link;
use super::{DistError, fragment, wire};
use crate::error::Error;
use crate::exec::{Device, Executable, RemoteHooks, RunLink};
use crate::graph::ValueId;
use crate::tensor::Tensor;
use crate::tuning::Tuning;

/// How long values for a run that has not started may wait, and how long an aborted run is
/// remembered (so its stragglers are dropped, not kept).
const EARLY_TTL: Duration = Duration::from_secs(60);

struct Fragment {
    exe: Arc<Executable>,
    submitter: String,
    /// Every node of the plan: the death of any one ends this fragment.
    nodes: BTreeSet<String>,
    /// (local device index, bytes) reserved.
    reserved: Vec<(usize, u64)>,
}

enum RunEntry {
    /// Values that arrived before the run's start.
    Early(Vec<(ValueId, Tensor)>, Instant),
    Running(RunLink),
    Aborted(Instant),
}

#[derive(Default)]
struct State {
    reserved: Vec<u64>,
    fragments: BTreeMap<u64, Arc<Fragment>>,
    runs: BTreeMap<(u64, u64), RunEntry>,
}

pub struct Participant {
    me: String,
    devices: Vec<Device>,
    /// This node's devices as it advertises them (the snapshot must agree).
    inventory: Vec<pb::Device>,
    link: Arc<Link>,
    rt: Handle,
    state: Mutex<State>,
    /// This node's plan settings: a fragment planned with others is refused.
    tuning: Tuning,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
        let state = State {
            reserved: vec![0; devices.len()],
            ..Default::default()
        };
        Participant {
            me,
            devices,
            inventory,
            link,
            rt,
            state: Mutex::new(state),
            tuning,
        }
    }

    pub fn name(&self) -> &str {
        &self.me
    }

    /// Checks and loads a fragment (blocking: builds pipelines and allocates device memory).
    pub fn load(
        &self,
        f: &pb::Fragment,
        weights: BTreeMap<ValueId, Tensor>,
    ) -> Result<(), DistError> {
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
        let reserve: Vec<(usize, u64)> = plan
            .memory
            .iter()
            .filter(|(d, _)| d.node == self.me)
            .map(|(d, &b)| (d.index, b))
            .collect();
        {
            let mut st = lock(&self.state);
            for &(d, b) in &reserve {
                let budget = self.inventory[d].memory_budget;
                if st.reserved[d].saturating_add(b) > budget {
                    return Err(DistError::Placement(format!(
                        "{} has no room for its part: {} needs {b} bytes, {} of {budget} are \
                         reserved by other models",
                        self.me, self.inventory[d].name, st.reserved[d]
                    )));
                }
            }
            for &(d, b) in &reserve {
                st.reserved[d] += b;
            }
        }
        let nodes: BTreeSet<String> = plan.placement.iter().map(|d| d.node.clone()).collect();
        let built = Executable::with_plan(
            graph,
            spec,
            self.devices.clone(),
            plan,
            kernels,
            &self.me,
            self.tuning.arm,
        );
        let mut st = lock(&self.state);
        let exe = match built {
            Ok(e) => e,
            Err(e) => {
                for &(d, b) in &reserve {
                    st.reserved[d] -= b;
                }
                return Err(e.into());
            }
        };
        tracing::info!(
            "loaded model {:016x} from {}: {} ops here",
            f.model_id,
            f.submitter,
            exe.summary().ops_per_device.values().sum::<usize>()
        );
        let old = st.fragments.insert(
            f.model_id,
            Arc::new(Fragment {
                exe: Arc::new(exe),
                submitter: f.submitter.clone(),
                nodes,
                reserved: reserve,
            }),
        );
        if let Some(old) = old {
            release(&mut st, &old);
        }
        Ok(())
    }

    /// Graph inputs (indices) this node's part of a model reads.
    pub fn needed_inputs(&self, model: u64) -> Option<Vec<usize>> {
        lock(&self.state)
            .fragments
            .get(&model)
            .map(|f| f.exe.needed_inputs().to_vec())
    }

    /// Starts a run of a loaded fragment on a blocking thread. Failures are reported to the
    /// submitter (or to `local_done` when this node is the submitter).
    pub fn start_run(
        self: &Arc<Self>,
        model: u64,
        run: u64,
        inputs: Vec<(usize, Tensor)>,
    ) -> Result<(), DistError> {
        let frag = lock(&self.state)
            .fragments
            .get(&model)
            .cloned()
            .ok_or(DistError::NoModel(model))?;
        let me = Arc::clone(self);
        self.rt.spawn_blocking(move || {
            let hooks = Arc::new(Hooks {
                link: me.link.clone(),
                rt: me.rt.clone(),
                model,
                run,
                submitter: frag.submitter.clone(),
            });
            let result = frag.exe.run_fragment(inputs, hooks, |link| {
                let early = {
                    let mut st = lock(&me.state);
                    match st
                        .runs
                        .insert((model, run), RunEntry::Running(link.clone()))
                    {
                        Some(RunEntry::Early(v, _)) => v,
                        Some(RunEntry::Aborted(t)) => {
                            st.runs.insert((model, run), RunEntry::Aborted(t));
                            link.abort(Error::Device("the run was abandoned".into()));
                            Vec::new()
                        }
                        _ => Vec::new(),
                    }
                };
                for (v, t) in early {
                    link.deliver(v, t);
                }
            });
            let aborted = {
                let mut st = lock(&me.state);
                matches!(st.runs.remove(&(model, run)), Some(RunEntry::Aborted(_)))
            };
            if let Err(e) = result
                && !aborted
            {
                tracing::warn!("run {run} of model {model:016x} failed here: {e}");
                me.link
                    .report_failure(&frag.submitter, model, run, &e.to_string());
            }
        });
        Ok(())
    }

    /// A value another node produced for a run of ours.
    pub fn arrive(&self, model: u64, run: u64, value: ValueId, t: Tensor) {
        let link = {
            let mut st = lock(&self.state);
            if !st.fragments.contains_key(&model) {
                tracing::debug!("a value for unknown model {model:016x}; dropped");
                return;
            }
            match st
                .runs
                .entry((model, run))
                .or_insert_with(|| RunEntry::Early(Vec::new(), Instant::now()))
            {
                RunEntry::Early(v, _) => {
                    v.push((value, t));
                    return;
                }
                RunEntry::Aborted(_) => return,
                RunEntry::Running(link) => link.clone(),
            }
        };
        link.deliver(value, t);
    }

    /// The submitter gave the run up (another node failed): stop waiting.
    pub fn abort(&self, model: u64, run: u64, reason: &str) {
        let old = lock(&self.state)
            .runs
            .insert((model, run), RunEntry::Aborted(Instant::now()));
        if let Some(RunEntry::Running(link)) = old {
            link.abort(Error::Device(format!("run abandoned: {reason}")));
        }
    }

    /// Forgets a model; its runs in flight end with `why`.
    pub fn unload(&self, model: u64, why: &str) {
        let mut st = lock(&self.state);
        if let Some(f) = st.fragments.remove(&model) {
            release(&mut st, &f);
            abort_runs(&mut st, model, &format!("the model was unloaded: {why}"));
            tracing::info!("unloaded model {model:016x}: {why}");
        }
    }

    /// A member died or left: every fragment whose plan involves it is over (its submitter
    /// re-plans without it), and its runs end now with an error naming it.
    pub fn member_down(&self, node: &str) {
        let mut st = lock(&self.state);
        let doomed: Vec<u64> = st
            .fragments
            .iter()
            .filter(|(_, f)| f.nodes.contains(node) || f.submitter == node)
            .map(|(&m, _)| m)
            .collect();
        for m in doomed {
            if let Some(f) = st.fragments.remove(&m) {
                release(&mut st, &f);
            }
            abort_runs(&mut st, m, &format!("node {node} failed"));
            tracing::warn!("dropped model {m:016x}: node {node} is gone");
        }
    }

    /// Forgets values that waited too long for their run, and old aborts.
    pub fn sweep(&self) {
        let mut st = lock(&self.state);
        st.runs.retain(|_, e| match e {
            RunEntry::Early(_, t) | RunEntry::Aborted(t) => t.elapsed() < EARLY_TTL,
            RunEntry::Running(_) => true,
        });
    }

    /// Models loaded here (load ids), for tests and status.
    pub fn loaded(&self) -> Vec<u64> {
        lock(&self.state).fragments.keys().copied().collect()
    }
}

fn release(st: &mut State, f: &Fragment) {
    for &(d, b) in &f.reserved {
        st.reserved[d] = st.reserved[d].saturating_sub(b);
    }
}

fn abort_runs(st: &mut State, model: u64, why: &str) {
    for ((m, _), e) in st.runs.iter_mut() {
        if *m != model {
            continue;
        }
        if let RunEntry::Running(link) = e {
            link.abort(Error::Device(why.to_string()));
        }
        *e = RunEntry::Aborted(Instant::now());
    }
}

/// Where a run's finished values go: other participants, and the submitter.
struct Hooks {
    link: Arc<Link>,
    rt: Handle,
    model: u64,
    run: u64,
    submitter: String,
}

impl RemoteHooks for Hooks {
    fn send(&self, value: ValueId, nodes: &[String], t: &Tensor) {
        for node in nodes {
            let h = wire::header(t, pb::TensorRole::Edge, self.model, self.run, value as u64);
            let link = self.link.clone();
            let (node, payload, submitter) =
                (node.clone(), t.bytes().clone(), self.submitter.clone());
            let (model, run) = (self.model, self.run);
            self.rt.spawn(async move {
                if let Err(e) = link.send_tensor(&node, h, payload).await {
                    let why = format!("cannot send a value to {node}: {e}");
                    tracing::warn!("{why}");
                    link.report_failure_from(&submitter, model, run, &why, &node);
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
        let link = self.link.clone();
        let (payload, submitter) = (Bytes::clone(t.bytes()), self.submitter.clone());
        let (model, run) = (self.model, self.run);
        self.rt.spawn(async move {
            if let Err(e) = link.send_tensor(&submitter, h, payload).await {
                tracing::warn!(
                    "cannot send output {index} of run {run} (model {model:016x}) to {submitter}: {e}"
                );
            }
        });
    }
}
