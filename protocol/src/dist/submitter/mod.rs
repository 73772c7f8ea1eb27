//! The submitting node's side: models submitted here, their deployments (one per key: the
//! input types and the input values the plan depends on), and the runs clients asked for.
//!
//! Planning needs the graph and the planner, so the driver does it when asked
//! ([`Action::Plan`]) and answers with [`Submitter::planned`] or [`Submitter::plan_failed`];
//! so does the key of a run's inputs ([`Action::Resolve`], answered with
//! [`Submitter::resolve`]). Runs with the same key wait for one plan: two first runs never
//! deploy twice. Everything else is decided here: which nodes get which message, when a run
//! is complete, failed, or retried, and which plans are unloaded.
//!
//! Every run ends: with its outputs, with a failure (a participant's report, reaching here
//! directly or through another participant; an output given up; a verdict on a node of its
//! plan; a newer life of such a node; this node learning it had been declared dead; its
//! model unloaded), retried once, or at the deadline. A loading plan has a deadline too.
//!
//! A model may be leased to an owner (the client connection that loaded it): once the
//! owner is gone, the model is unloaded after [`Config::lease_grace`]. Unloads a node could
//! not be sent because it was down are sent again if it comes back (falsely declared dead,
//! it kept its parts), and an unload the driver could not deliver to a live node is sent
//! again (`unload_failed`, [`super::unloads`]).
//!
//! `K` is the driver's deployment key, `V` its value (a tensor: cloned per node that reads
//! it, so it should be cheap to clone).
//!
//! Here: the machine's inputs and queries; `lifecycle.rs`: what they set going (slots,
//! attempts, retries, retirements and owed unloads).

mod lifecycle;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use crate::{Message, pb};

use super::deployment::{Deployment, DeploymentPlan, LoadState};
use super::run::{Failure, PlanError, Run, RunError, RunOutput};
use super::unloads::Resends;
use super::{Config, after, secs};

/// A client's run, as the submitter knows it (not the run id on the wire: each attempt has
/// its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(pub u64);

/// A plan asked of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanId(pub u64);

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<K, V> {
    /// Compute the key of the run's inputs (`Submitter::inputs`) and answer with `resolve`.
    Resolve { run: RunId, model: u64 },
    /// Plan `model` for `key` over the cluster without the nodes in `avoid`, and answer with
    /// `planned` or `plan_failed`.
    Plan {
        plan: PlanId,
        model: u64,
        key: K,
        avoid: BTreeSet<String>,
    },
    /// Send `node` its fragment of `load_id` with its weights (on this node: load it
    /// locally), and answer with `load_result`.
    SendFragment { load_id: u64, node: String },
    /// A control message: `Unload`, or `RunFailed` telling a participant to give a run up.
    /// To this node itself: hand it to the local participant.
    Send { to: String, message: Message },
    /// Start run `run_id` of `load_id` on `node` with the graph inputs it reads (on this node:
    /// the local participant). A start that fails is reported with `start_failed`.
    StartRun {
        /// The client's run this attempt is of.
        run: RunId,
        node: String,
        load_id: u64,
        run_id: u64,
        inputs: Vec<(usize, V)>,
    },
    /// The deployment asked for by `plan` is live (a submission waiting on it can answer).
    Deployed {
        plan: PlanId,
        model: u64,
        load_id: u64,
    },
    /// The deployment asked for by `plan` depends on input values its key lacks: none is
    /// made now, the runs waiting for it resolve their key again, and a submission waiting on
    /// it is live without a plan (its runs plan with their values).
    Deferred { plan: PlanId, model: u64 },
    /// The deployment asked for by `plan` could not be made.
    DeployFailed {
        plan: PlanId,
        model: u64,
        error: RunError,
    },
    /// A run ended.
    RunDone {
        run: RunId,
        result: Result<RunOutput<V>, RunError>,
    },
    /// The machine removed a model on its own (its owner went away): the driver forgets it.
    Removed { model: u64, why: String },
}

/// What `prepare` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    Live(u64),
    /// Wait for `Deployed` or `DeployFailed` with this plan.
    Pending(PlanId),
}

struct Model<K> {
    /// Live deployments by key, most recent first.
    cache: Vec<(K, u64)>,
    /// Nodes that failed while this model used them, and when: left out of its plans until
    /// they come back, or for [`Config::avoid_for`] (membership may not have declared them
    /// dead yet, or they were only unreachable for a while).
    avoid: BTreeMap<String, Instant>,
    /// The owner the model is leased to, and when it is unloaded once the owner is gone.
    owner: Option<u64>,
    unload_at: Option<Instant>,
}

impl<K> Model<K> {
    fn avoid(&self, now: Instant, avoid_for: std::time::Duration) -> BTreeSet<String> {
        self.avoid
            .iter()
            .filter(|&(_, &t)| now.saturating_duration_since(t) < avoid_for)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Unloads kept for a node that was down when its plan was retired, at most this many.
const MAX_OWED: usize = 256;

/// Why a plan is unloaded by [`Submitter::evict_idle`]: its `Unload` asks the participants to
/// keep the weights it held a while, for the plan taking its place.
pub const REPLACED: &str = "replaced by a plan for other input shapes";

/// A deployment being planned (no load id yet) or loaded, and the runs waiting for it.
struct Slot<K> {
    model: u64,
    key: K,
    load_id: Option<u64>,
    waiters: Vec<RunId>,
}

pub struct Submitter<K, V> {
    me: String,
    config: Config,
    models: BTreeMap<u64, Model<K>>,
    slots: BTreeMap<PlanId, Slot<K>>,
    /// Loading, cached, or used by an attempt in flight.
    deployments: BTreeMap<u64, Deployment<V>>,
    runs: BTreeMap<RunId, Run<V>>,
    /// Attempts in flight: (load id, wire run id) to the client's run.
    attempts: BTreeMap<(u64, u64), RunId>,
    next_wire_run: u64,
    next_run: u64,
    next_plan: u64,
    /// Unloads not sent to a node because it was down: sent if it comes back.
    owed: BTreeMap<String, VecDeque<(u64, String)>>,
    /// Unloads a live node did not acknowledge, to be sent again.
    resends: Resends,
    actions: VecDeque<Action<K, V>>,
}

impl<K: Clone + PartialEq, V: Clone> Submitter<K, V> {
    pub fn new(me: String, config: Config) -> Submitter<K, V> {
        Submitter {
            me,
            config,
            models: BTreeMap::new(),
            slots: BTreeMap::new(),
            deployments: BTreeMap::new(),
            runs: BTreeMap::new(),
            attempts: BTreeMap::new(),
            next_wire_run: 1,
            next_run: 1,
            next_plan: 1,
            owed: BTreeMap::new(),
            resends: Resends::default(),
            actions: VecDeque::new(),
        }
    }

    pub fn add_model(&mut self, model: u64) {
        self.models.entry(model).or_insert_with(|| Model {
            cache: Vec::new(),
            avoid: BTreeMap::new(),
            owner: None,
            unload_at: None,
        });
    }

    /// Leases a model to `owner`: it is unloaded once the owner is gone (`owner_gone`).
    pub fn lease(&mut self, model: u64, owner: u64) -> Result<(), RunError> {
        let m = self
            .models
            .get_mut(&model)
            .ok_or(RunError::NoModel(model))?;
        m.owner = Some(owner);
        Ok(())
    }

    /// The owner's connection is gone: its models are unloaded after the grace period.
    pub fn owner_gone(&mut self, owner: u64, now: Instant) {
        let at = after(now, self.config.lease_grace);
        for m in self.models.values_mut().filter(|m| m.owner == Some(owner)) {
            if m.unload_at.is_none() {
                m.unload_at = at.or(Some(now));
            }
        }
    }

    /// A model's owner, and when it will be unloaded if its owner is gone.
    pub fn lease_of(&self, model: u64) -> Option<(Option<u64>, Option<Instant>)> {
        self.models.get(&model).map(|m| (m.owner, m.unload_at))
    }

    /// Bytes a model's cached and loading plans reserve, per node (for `status`): a
    /// participant reserves its part's memory when it accepts the fragment, before the load
    /// settles.
    pub fn reserved(&self, model: u64) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for load_id in self.load_ids(model) {
            if let Some(d) = self.deployments.get(&load_id) {
                for (node, &b) in &d.plan().reserves {
                    *out.entry(node.clone()).or_insert(0) += b;
                }
            }
        }
        out
    }

    /// A model's cached and loading plans.
    pub fn load_ids(&self, model: u64) -> Vec<u64> {
        let Some(m) = self.models.get(&model) else {
            return Vec::new();
        };
        let loading = self
            .slots
            .values()
            .filter(|s| s.model == model)
            .filter_map(|s| s.load_id);
        m.cache.iter().map(|&(_, l)| l).chain(loading).collect()
    }

    /// Retires the model's cached plans that no run uses, to make room for a new one; their
    /// load ids.
    pub fn evict_idle(&mut self, model: u64) -> Vec<u64> {
        let Some(m) = self.models.get(&model) else {
            return Vec::new();
        };
        let idle: Vec<u64> = m
            .cache
            .iter()
            .map(|&(_, l)| l)
            .filter(|&l| !self.attempts.keys().any(|&(a, _)| a == l))
            .collect();
        for &l in &idle {
            self.retire(l, None, REPLACED);
        }
        idle
    }

    /// Whether plan `load_id` is still known: loading, cached, or used by a run. A plan
    /// retired while it loads stays until the load settles (then what did load is unloaded).
    pub fn has_deployment(&self, load_id: u64) -> bool {
        self.deployments.contains_key(&load_id)
    }

    pub fn has_model(&self, model: u64) -> bool {
        self.models.contains_key(&model)
    }

    /// The client unloads a model: its deployments are retired everywhere, and its runs, in
    /// flight or waiting for a deployment, fail (their parts are being unloaded).
    pub fn remove_model(&mut self, model: u64) -> Result<(), RunError> {
        self.drop_model(model, "unloaded by its client")
    }

    fn drop_model(&mut self, model: u64, why: &str) -> Result<(), RunError> {
        let m = self.models.remove(&model).ok_or(RunError::NoModel(model))?;
        let in_flight: Vec<(u64, u64)> = self
            .attempts
            .iter()
            .filter(|&(_, run)| self.runs.get(run).is_some_and(|r| r.model == model))
            .map(|(&k, _)| k)
            .collect();
        for (load_id, run_id) in in_flight {
            if let Some(run) = self.attempts.remove(&(load_id, run_id)) {
                self.abort_attempt(run, &format!("the model was {why}"));
                self.finish(run, Err(RunError::NoModel(model)));
            }
        }
        for (_, load_id) in m.cache {
            self.retire(load_id, None, why);
        }
        let waiting: Vec<RunId> = self
            .slots
            .values_mut()
            .filter(|s| s.model == model)
            .flat_map(|s| std::mem::take(&mut s.waiters))
            .collect();
        for run in waiting {
            self.finish(run, Err(RunError::NoModel(model)));
        }
        let loading: Vec<u64> = self
            .slots
            .values()
            .filter(|s| s.model == model)
            .filter_map(|s| s.load_id)
            .collect();
        for load_id in loading {
            self.retire(load_id, None, why);
        }
        // Plans used only by the runs failed above.
        let orphans: Vec<u64> = self
            .deployments
            .iter()
            .filter(|(_, d)| d.state() == LoadState::Live)
            .map(|(&l, _)| l)
            .collect();
        for load_id in orphans {
            self.collect(load_id);
        }
        Ok(())
    }

    /// Makes sure a deployment exists for `key` (a submission whose input types are fixed
    /// plans at once, so a model that does not fit fails then).
    pub fn prepare(&mut self, model: u64, key: K, now: Instant) -> Result<Prepared, RunError> {
        let m = self.models.get(&model).ok_or(RunError::NoModel(model))?;
        if let Some(&(_, load_id)) = m.cache.iter().find(|(k, _)| *k == key) {
            return Ok(Prepared::Live(load_id));
        }
        Ok(Prepared::Pending(self.slot_for(model, key, now)))
    }

    /// A client's run of `model` on `inputs`; it ends with `Action::RunDone`.
    pub fn run(&mut self, model: u64, inputs: Vec<V>) -> Result<RunId, RunError> {
        if !self.models.contains_key(&model) {
            return Err(RunError::NoModel(model));
        }
        let id = RunId(self.next_run);
        self.next_run += 1;
        self.runs.insert(id, Run::new(model, inputs));
        self.actions.push_back(Action::Resolve { run: id, model });
        Ok(id)
    }

    /// A step of a sequence: [`Submitter::run`], except that the outputs in `kept` stay on
    /// the nodes that make them (they do not come back, and the run is complete without
    /// them), and that a failed attempt is not retried: the sequence's state may be half
    /// updated, which only its owner can recover from.
    pub fn run_step(
        &mut self,
        model: u64,
        inputs: Vec<V>,
        kept: BTreeSet<usize>,
    ) -> Result<RunId, RunError> {
        let id = self.run(model, inputs)?;
        if let Some(r) = self.runs.get_mut(&id) {
            r.kept = kept;
            r.retry = false;
        }
        Ok(id)
    }

    /// The inputs of a run, for the driver's key.
    pub fn inputs(&self, run: RunId) -> Option<&[V]> {
        self.runs.get(&run).map(|r| r.inputs.as_slice())
    }

    /// The key of a run's inputs: the run starts on the cached deployment, waits for the one
    /// being made, or asks for a plan.
    pub fn resolve(&mut self, run: RunId, key: K, now: Instant) {
        let Some(r) = self.runs.get(&run) else { return };
        let waiting = self.slots.values().any(|s| s.waiters.contains(&run));
        if r.attempt.is_some() || waiting {
            return;
        }
        let model = r.model;
        let Some(m) = self.models.get(&model) else {
            self.finish(run, Err(RunError::NoModel(model)));
            return;
        };
        if let Some(&(_, load_id)) = m.cache.iter().find(|(k, _)| *k == key) {
            self.begin(run, load_id, now);
            return;
        }
        let plan = self.slot_for(model, key, now);
        if let Some(s) = self.slots.get_mut(&plan) {
            s.waiters.push(run);
        }
    }

    /// The driver planned: the deployment starts loading. Returns whether it did: false when
    /// the plan is no longer wanted (answered before, or its slot failed), or was refused
    /// (`DeployFailed`), so the driver can drop what it made for it at once.
    pub fn planned(&mut self, plan: PlanId, dp: DeploymentPlan<V>, now: Instant) -> bool {
        let Some(slot) = self.slots.get(&plan) else {
            return false;
        };
        if slot.load_id.is_some() {
            // Answered twice: the first plan is loading already.
            return false;
        }
        let model = slot.model;
        let error = if !self.models.contains_key(&model) {
            Some(RunError::NoModel(model))
        } else if self.deployments.contains_key(&dp.load_id) {
            Some(RunError::Plan(format!(
                "load id {:016x} is in use",
                dp.load_id
            )))
        } else {
            None
        };
        if let Some(error) = error {
            self.slot_failed(plan, error);
            return false;
        }
        let load_id = dp.load_id;
        let mut out = Vec::new();
        let d = Deployment::start(dp, now, &mut out);
        self.deployments.insert(load_id, d);
        if let Some(s) = self.slots.get_mut(&plan) {
            s.load_id = Some(load_id);
        }
        self.emit(load_id, out);
        true
    }

    /// The driver could not plan. Runs waiting for the plan fail, or resolve their key again
    /// when the plan turned out to depend on input values.
    pub fn plan_failed(&mut self, plan: PlanId, e: PlanError) {
        if e == PlanError::NeedsValues {
            if let Some(s) = self.slots.remove(&plan) {
                self.actions.push_back(Action::Deferred {
                    plan,
                    model: s.model,
                });
                for run in s.waiters {
                    self.actions.push_back(Action::Resolve {
                        run,
                        model: s.model,
                    });
                }
            }
            return;
        }
        self.slot_failed(plan, e.into());
    }

    /// A node answered its load.
    pub fn load_result(
        &mut self,
        load_id: u64,
        node: &str,
        result: Result<(), String>,
        now: Instant,
    ) {
        let Some(d) = self.deployments.get_mut(&load_id) else {
            return;
        };
        let mut out = Vec::new();
        let settled = d.load_result(node, result, &mut out);
        self.emit(load_id, out);
        if let Some(s) = settled {
            self.settled(load_id, s, now);
        }
    }

    /// Output `index` of an attempt arrived.
    pub fn output(&mut self, load_id: u64, run_id: u64, index: usize, v: V) {
        let Some(&run) = self.attempts.get(&(load_id, run_id)) else {
            return;
        };
        let Some(r) = self.runs.get_mut(&run) else {
            return;
        };
        if let Some(outputs) = r.output(index, v) {
            self.attempts.remove(&(load_id, run_id));
            let retried = r.retried();
            self.finish(
                run,
                Ok(RunOutput {
                    outputs,
                    retried,
                    load_id,
                }),
            );
            self.collect(load_id);
        }
    }

    /// A `RunFailed` from `from` (a participant's report, passed on by another participant
    /// or not, or this node's own abort coming back: it matches no attempt any more and
    /// changes nothing).
    pub fn run_failed(&mut self, from: &str, r: &pb::RunFailed, now: Instant) {
        self.fail(r.model_id, r.run_id, Failure::attribute(from, r), now);
    }

    /// Output `index` of an attempt will never arrive from `from` (its partial tensor was
    /// given up): the attempt fails naming `from`, unless that output is in already.
    pub fn output_lost(
        &mut self,
        load_id: u64,
        run_id: u64,
        index: usize,
        from: &str,
        why: &str,
        now: Instant,
    ) {
        let Some(run) = self.attempts.get(&(load_id, run_id)) else {
            return;
        };
        let missing = self
            .runs
            .get(run)
            .and_then(|r| r.attempt.as_ref())
            .is_some_and(|a| a.missing(index));
        if missing {
            let f = Failure::Node {
                node: from.to_string(),
                reason: format!("output {index} from it was lost: {why}"),
            };
            self.fail(load_id, run_id, f, now);
        }
    }

    /// An attempt could not be started on `node`: a remote node is the culprit (the run may
    /// be retried without it); this node's own refusal is a plain failure.
    pub fn start_failed(
        &mut self,
        load_id: u64,
        run_id: u64,
        node: &str,
        reason: &str,
        now: Instant,
    ) {
        let f = if node == self.me {
            // Not a node to re-plan without, but named: a client must learn where it failed.
            Failure::Other(format!("on node {}: {reason}", self.me))
        } else {
            Failure::Node {
                node: node.to_string(),
                reason: format!("cannot start the run there: {reason}"),
            }
        };
        self.fail(load_id, run_id, f, now);
    }

    /// Life `generation` of a member died or left (0: whichever life): the deployments made
    /// with that life or an older one are retired (a loading one fails), then the attempts
    /// in flight on it fail, naming it.
    pub fn member_down(&mut self, node: &str, generation: u64, state: &str, now: Instant) {
        for (load_id, reason) in self.resends.take_node(node) {
            self.owe(node, load_id, reason);
        }
        let using: Vec<u64> = self
            .deployments
            .iter()
            .filter(|(_, d)| d.uses(node, generation))
            .map(|(&l, _)| l)
            .collect();
        // A model that lost a plan to this node names it when the next plan, without it,
        // does not fit (a node that left is no failure of a run, but it is why).
        for m in self.models.values_mut() {
            if m.cache.iter().any(|(_, l)| using.contains(l)) {
                m.avoid.insert(node.to_string(), now);
            }
        }
        for load_id in using {
            let d = self.deployments.get_mut(&load_id).expect("listed above");
            if d.state() == LoadState::Loading {
                let mut out = Vec::new();
                let settled = d.member_down(node, state, &mut out);
                self.emit(load_id, out);
                if let Some(s) = settled {
                    self.settled(load_id, s, now);
                }
            } else {
                self.retire(load_id, Some(node), &format!("node {node} is {state}"));
            }
        }
        let doomed = self.attempts_where(|a| a.ended_by_death(node, generation));
        for (load_id, run_id) in doomed {
            let f = Failure::Node {
                node: node.to_string(),
                reason: format!("the node is {state}"),
            };
            self.fail(load_id, run_id, f, now);
        }
    }

    /// Life `generation` of a member is (again) alive: models may use it again; plans made
    /// with an older life of it are retired and their attempts retried (that life's part
    /// is gone); unloads it missed while down are sent.
    pub fn member_up(&mut self, node: &str, generation: u64, now: Instant) {
        for m in self.models.values_mut() {
            m.avoid.remove(node);
        }
        if let Some(owed) = self.owed.remove(node) {
            for (load_id, reason) in owed {
                self.actions.push_back(unload(node, load_id, reason));
            }
        }
        let stale: Vec<u64> = self
            .deployments
            .iter()
            .filter(|(_, d)| d.stale(node, generation))
            .map(|(&l, _)| l)
            .collect();
        for load_id in stale {
            self.retire(load_id, None, &format!("node {node} restarted"));
        }
        let doomed = self.attempts_where(|a| a.ended_by_return(node, generation));
        for (load_id, run_id) in doomed {
            let f = Failure::Lost {
                node: node.to_string(),
                reason: "it restarted".into(),
            };
            self.fail(load_id, run_id, f, now);
        }
    }

    /// This node learned it had been declared dead (it rejoined under a new life): every
    /// other node dropped its part of this node's plans and aborted their runs. The plans
    /// that use another node are retired, and the attempts in flight on them retried.
    pub fn rejoined(&mut self, now: Instant) {
        let me = self.me.clone();
        let shared: Vec<u64> = self
            .deployments
            .iter()
            .filter(|(_, d)| d.plan().nodes.iter().any(|n| *n != me))
            .map(|(&l, _)| l)
            .collect();
        let why = format!("node {me} was declared dead");
        for load_id in shared {
            self.retire(load_id, None, &why);
        }
        let doomed = self.attempts_where(|a| a.nodes.iter().any(|n| *n != me));
        for (load_id, run_id) in doomed {
            let f = Failure::Lost {
                node: me.clone(),
                reason: "it was declared dead and the other nodes dropped its runs".into(),
            };
            self.fail(load_id, run_id, f, now);
        }
    }

    /// The node is stopping: every run fails with `why`, and nothing new starts.
    pub fn shutdown(&mut self, why: &str) {
        let runs: Vec<RunId> = self.runs.keys().copied().collect();
        for run in runs {
            self.abort_attempt(run, why);
            self.finish(run, Err(RunError::RunFailed(why.to_string())));
        }
        self.attempts.clear();
    }

    /// The earliest run deadline, load deadline, lease expiry or unload to send again.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let runs = self
            .runs
            .values()
            .filter_map(|r| r.attempt.as_ref()?.deadline);
        let loads = self
            .deployments
            .values()
            .filter(|d| d.state() == LoadState::Loading)
            .filter_map(|d| after(d.since(), self.config.load_deadline));
        let leases = self.models.values().filter_map(|m| m.unload_at);
        let resends = self.resends.poll_timeout();
        runs.chain(loads).chain(leases).chain(resends).min()
    }

    /// Fails the attempts and the loads past their deadline, and unloads the models whose
    /// owner has been gone for the grace period.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (to, load_id, reason) in self.resends.due(now) {
            self.actions.push_back(unload(&to, load_id, reason));
        }
        let late: Vec<(u64, u64)> = self
            .runs
            .values()
            .filter_map(|r| r.attempt.as_ref())
            .filter(|a| a.deadline.is_some_and(|d| d <= now))
            .map(|a| (a.load_id, a.run_id))
            .collect();
        let within = secs(self.config.run_deadline);
        for (load_id, run_id) in late {
            let f = Failure::Other(format!("no result within {within}"));
            self.fail(load_id, run_id, f, now);
        }
        let slow: Vec<u64> = self
            .deployments
            .iter()
            .filter(|(_, d)| d.state() == LoadState::Loading)
            .filter(|(_, d)| after(d.since(), self.config.load_deadline).is_some_and(|t| t <= now))
            .map(|(&l, _)| l)
            .collect();
        let why = format!("no answer within {}", secs(self.config.load_deadline));
        for load_id in slow {
            let d = self.deployments.get_mut(&load_id).expect("listed above");
            let mut out = Vec::new();
            let settled = d.load_timed_out(&why, &mut out);
            self.emit(load_id, out);
            if let Some(s) = settled {
                self.settled(load_id, s, now);
            }
        }
        let expired: Vec<u64> = self
            .models
            .iter()
            .filter(|(_, m)| m.unload_at.is_some_and(|t| t <= now))
            .map(|(&id, _)| id)
            .collect();
        for model in expired {
            let why = "unloaded: its client went away".to_string();
            if self
                .drop_model(model, "unloaded after its client went away")
                .is_ok()
            {
                self.actions.push_back(Action::Removed { model, why });
            }
        }
    }

    pub fn poll_action(&mut self) -> Option<Action<K, V>> {
        self.actions.pop_front()
    }

    /// Nodes the model's plans leave out now.
    pub fn avoided(&self, model: u64, now: Instant) -> Option<BTreeSet<String>> {
        let avoid_for = self.config.avoid_for;
        self.models.get(&model).map(|m| m.avoid(now, avoid_for))
    }

    /// Cached deployments of a model (load ids, most recent first).
    pub fn cached(&self, model: u64) -> Vec<u64> {
        self.models
            .get(&model)
            .map(|m| m.cache.iter().map(|&(_, l)| l).collect())
            .unwrap_or_default()
    }

    pub fn deployment(&self, load_id: u64) -> Option<&Deployment<V>> {
        self.deployments.get(&load_id)
    }

    /// Runs not yet ended.
    pub fn runs_in_flight(&self) -> usize {
        self.runs.len()
    }
}

fn unload<K, V>(to: &str, load_id: u64, reason: String) -> Action<K, V> {
    Action::Send {
        to: to.to_string(),
        message: Message::Unload(pb::Unload {
            model_id: load_id,
            keep_weights: reason == REPLACED,
            reason,
        }),
    }
}
