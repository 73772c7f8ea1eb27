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
//! `K` is the driver's deployment key, `V` its value (a tensor: cloned per node that reads
//! it, so it should be cheap to clone).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use crate::{Message, pb};

use super::deployment::{DeployOut, Deployment, DeploymentPlan, LoadState, Settled};
use super::run::{Begun, Failure, Next, PlanError, Run, RunError, RunOutput, Verdict};
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
    /// Nodes that failed while this model used them: left out of its plans until they come
    /// back (membership may not have declared them dead yet).
    avoid: BTreeSet<String>,
}

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
            actions: VecDeque::new(),
        }
    }

    pub fn add_model(&mut self, model: u64) {
        self.models.entry(model).or_insert_with(|| Model {
            cache: Vec::new(),
            avoid: BTreeSet::new(),
        });
    }

    pub fn has_model(&self, model: u64) -> bool {
        self.models.contains_key(&model)
    }

    /// The client unloads a model: its cached deployments are retired everywhere. Runs
    /// waiting for a deployment fail; runs in flight go on with theirs.
    pub fn remove_model(&mut self, model: u64) -> Result<(), RunError> {
        let m = self.models.remove(&model).ok_or(RunError::NoModel(model))?;
        for (_, load_id) in m.cache {
            self.retire(load_id, None, "unloaded by its client");
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
            self.retire(load_id, None, "unloaded by its client");
        }
        Ok(())
    }

    /// Makes sure a deployment exists for `key` (a submission whose input types are fixed
    /// plans at once, so a model that does not fit fails then).
    pub fn prepare(&mut self, model: u64, key: K) -> Result<Prepared, RunError> {
        let m = self.models.get(&model).ok_or(RunError::NoModel(model))?;
        if let Some(&(_, load_id)) = m.cache.iter().find(|(k, _)| *k == key) {
            return Ok(Prepared::Live(load_id));
        }
        Ok(Prepared::Pending(self.slot_for(model, key)))
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
        let plan = self.slot_for(model, key);
        if let Some(s) = self.slots.get_mut(&plan) {
            s.waiters.push(run);
        }
    }

    /// The driver planned: the deployment starts loading. Returns whether it did: false when
    /// the plan is no longer wanted (answered before, or its slot failed), or was refused
    /// (`DeployFailed`), so the driver can drop what it made for it at once.
    pub fn planned(&mut self, plan: PlanId, dp: DeploymentPlan<V>) -> bool {
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
        let d = Deployment::start(dp, &mut out);
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

    /// A `RunFailed` from `from` (a participant's report, or this node's own abort coming
    /// back: it matches no attempt any more and changes nothing).
    pub fn run_failed(&mut self, from: &str, r: &pb::RunFailed) {
        self.fail(r.model_id, r.run_id, Failure::attribute(from, r));
    }

    /// An attempt could not be started on `node`: a remote node is the culprit (the run may
    /// be retried without it); this node's own refusal is a plain failure.
    pub fn start_failed(&mut self, load_id: u64, run_id: u64, node: &str, reason: &str) {
        let f = if node == self.me {
            Failure::Other(reason.to_string())
        } else {
            Failure::Node {
                node: node.to_string(),
                reason: format!("cannot start the run there: {reason}"),
            }
        };
        self.fail(load_id, run_id, f);
    }

    /// A member died or left: the deployments that use it are retired (a loading one fails),
    /// then the attempts in flight on it fail, naming it.
    pub fn member_down(&mut self, node: &str, state: &str, now: Instant) {
        let using: Vec<u64> = self
            .deployments
            .iter()
            .filter(|(_, d)| d.uses(node))
            .map(|(&l, _)| l)
            .collect();
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
        let doomed: Vec<(u64, u64)> = self
            .attempts
            .iter()
            .filter(|(_, run)| {
                self.runs
                    .get(run)
                    .and_then(|r| r.attempt.as_ref())
                    .is_some_and(|a| a.nodes.contains(node))
            })
            .map(|(&k, _)| k)
            .collect();
        for (load_id, run_id) in doomed {
            let f = Failure::Node {
                node: node.to_string(),
                reason: format!("the node is {state}"),
            };
            self.fail(load_id, run_id, f);
        }
    }

    /// A member is (again) alive: models may use it again.
    pub fn member_up(&mut self, node: &str) {
        for m in self.models.values_mut() {
            m.avoid.remove(node);
        }
    }

    /// The earliest run deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.runs
            .values()
            .filter_map(|r| r.attempt.as_ref()?.deadline)
            .min()
    }

    /// Fails the attempts past their deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        let late: Vec<(u64, u64)> = self
            .runs
            .values()
            .filter_map(|r| r.attempt.as_ref())
            .filter(|a| a.deadline.is_some_and(|d| d <= now))
            .map(|a| (a.load_id, a.run_id))
            .collect();
        let within = secs(self.config.run_deadline);
        for (load_id, run_id) in late {
            self.fail(
                load_id,
                run_id,
                Failure::Other(format!("no result within {within}")),
            );
        }
    }

    pub fn poll_action(&mut self) -> Option<Action<K, V>> {
        self.actions.pop_front()
    }

    /// Nodes the model's plans leave out.
    pub fn avoided(&self, model: u64) -> Option<&BTreeSet<String>> {
        self.models.get(&model).map(|m| &m.avoid)
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

    /// The slot making a deployment of `model` for `key`: the existing one, or a new one
    /// with a `Plan` asked of the driver.
    fn slot_for(&mut self, model: u64, key: K) -> PlanId {
        if let Some((&id, _)) = self
            .slots
            .iter()
            .find(|(_, s)| s.model == model && s.key == key)
        {
            return id;
        }
        let id = PlanId(self.next_plan);
        self.next_plan += 1;
        let avoid = self
            .models
            .get(&model)
            .map(|m| m.avoid.clone())
            .unwrap_or_default();
        self.slots.insert(
            id,
            Slot {
                model,
                key: key.clone(),
                load_id: None,
                waiters: Vec::new(),
            },
        );
        self.actions.push_back(Action::Plan {
            plan: id,
            model,
            key,
            avoid,
        });
        id
    }

    fn slot_failed(&mut self, plan: PlanId, error: RunError) {
        let Some(s) = self.slots.remove(&plan) else {
            return;
        };
        self.actions.push_back(Action::DeployFailed {
            plan,
            model: s.model,
            error: error.clone(),
        });
        let avoid = self
            .models
            .get(&s.model)
            .map(|m| m.avoid.clone())
            .unwrap_or_default();
        for run in s.waiters {
            if let Some(r) = self.runs.get(&run) {
                let e = r.unavailable(error.clone(), &avoid);
                self.finish(run, Err(e));
            }
        }
    }

    fn settled(&mut self, load_id: u64, s: Settled, now: Instant) {
        let Some((&plan, _)) = self.slots.iter().find(|(_, s)| s.load_id == Some(load_id)) else {
            return;
        };
        let state = self.deployments.get(&load_id).map(Deployment::state);
        match s {
            Settled::Failed { node, reason } => {
                self.deployments.remove(&load_id);
                self.slot_failed(plan, RunError::NodeFailed { node, reason });
            }
            Settled::Live if state != Some(LoadState::Live) => {
                // Retired while it loaded: its model was unloaded.
                self.deployments.remove(&load_id);
                let model = self.slots[&plan].model;
                self.slot_failed(plan, RunError::NoModel(model));
            }
            Settled::Live => {
                let slot = self.slots.remove(&plan).expect("found above");
                let m = self
                    .models
                    .get_mut(&slot.model)
                    .expect("checked when planned");
                m.cache.insert(0, (slot.key, load_id));
                let evicted: Vec<u64> = m
                    .cache
                    .drain(self.config.max_deployments.clamp(1, m.cache.len())..)
                    .map(|(_, l)| l)
                    .collect();
                for l in evicted {
                    self.collect(l);
                }
                self.actions.push_back(Action::Deployed {
                    plan,
                    model: slot.model,
                    load_id,
                });
                for run in slot.waiters {
                    self.begin(run, load_id, now);
                }
            }
        }
    }

    /// Starts an attempt of `run` on the live deployment `load_id`.
    fn begin(&mut self, run: RunId, load_id: u64, now: Instant) {
        let (Some(r), Some(d)) = (self.runs.get_mut(&run), self.deployments.get(&load_id)) else {
            return;
        };
        let run_id = self.next_wire_run;
        self.next_wire_run += 1;
        let deadline = after(now, self.config.run_deadline);
        match r.begin(d.plan(), run_id, deadline) {
            Begun::Complete(outputs) => {
                let retried = r.retried();
                self.finish(
                    run,
                    Ok(RunOutput {
                        outputs,
                        retried,
                        load_id,
                    }),
                );
            }
            Begun::Invalid(why) => self.finish(run, Err(RunError::RunFailed(why))),
            Begun::Started(starts) => {
                self.attempts.insert((load_id, run_id), run);
                for (node, inputs) in starts {
                    self.actions.push_back(Action::StartRun {
                        node,
                        load_id,
                        run_id,
                        inputs,
                    });
                }
            }
        }
    }

    /// An attempt failed: the others are told, the plan may be retired, and the run retried
    /// or ended.
    fn fail(&mut self, load_id: u64, run_id: u64, f: Failure) {
        let Some(run) = self.attempts.remove(&(load_id, run_id)) else {
            return;
        };
        let Some(r) = self.runs.get_mut(&run) else {
            return;
        };
        let model = r.model;
        let Some(Verdict {
            load_id,
            aborts,
            avoid,
            retire,
            next,
        }) = r.fail(f)
        else {
            return;
        };
        for (to, m) in aborts {
            self.actions.push_back(Action::Send {
                to,
                message: Message::RunFailed(m),
            });
        }
        if let (Some(node), Some(m)) = (avoid, self.models.get_mut(&model)) {
            m.avoid.insert(node);
        }
        match retire {
            Some((dead, why)) => self.retire(load_id, dead.as_deref(), &why),
            None => self.collect(load_id),
        }
        match next {
            Next::Done(e) => self.finish(run, Err(e)),
            Next::Retry if !self.models.contains_key(&model) => {
                self.finish(run, Err(RunError::NoModel(model)));
            }
            Next::Retry => self.actions.push_back(Action::Resolve { run, model }),
        }
    }

    /// Forgets a deployment and unloads it from its nodes but `dead`.
    fn retire(&mut self, load_id: u64, dead: Option<&str>, why: &str) {
        for m in self.models.values_mut() {
            m.cache.retain(|&(_, l)| l != load_id);
        }
        let Some(d) = self.deployments.get_mut(&load_id) else {
            return;
        };
        let loading = d.state() == LoadState::Loading;
        let mut out = Vec::new();
        d.retire(dead, why, &mut out);
        self.emit(load_id, out);
        // A loading one stays until it settles, to unload what did load.
        if !loading {
            self.deployments.remove(&load_id);
        }
    }

    /// Stops tracking a live deployment that no model caches and no attempt uses. It stays
    /// loaded on its nodes: a plan evicted from a full cache was never unloaded.
    fn collect(&mut self, load_id: u64) {
        let cached = self
            .models
            .values()
            .any(|m| m.cache.iter().any(|&(_, l)| l == load_id));
        let used = self
            .attempts
            .range((load_id, 0)..=(load_id, u64::MAX))
            .next()
            .is_some();
        let live = self
            .deployments
            .get(&load_id)
            .is_some_and(|d| d.state() == LoadState::Live);
        if live && !cached && !used {
            self.deployments.remove(&load_id);
        }
    }

    /// Ends a run, once.
    fn finish(&mut self, run: RunId, result: Result<RunOutput<V>, RunError>) {
        let Some(r) = self.runs.remove(&run) else {
            return;
        };
        if let Some(a) = &r.attempt {
            self.attempts.remove(&(a.load_id, a.run_id));
        }
        self.actions.push_back(Action::RunDone { run, result });
    }

    fn emit(&mut self, load_id: u64, out: Vec<DeployOut>) {
        for o in out {
            self.actions.push_back(match o {
                DeployOut::SendFragment { node } => Action::SendFragment { load_id, node },
                DeployOut::Unload { node, reason } => Action::Send {
                    to: node,
                    message: Message::Unload(pb::Unload {
                        model_id: load_id,
                        reason,
                    }),
                },
            });
        }
    }
}
