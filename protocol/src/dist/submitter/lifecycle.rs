//! The life of runs and deployments inside the machine: the slots that plan a key once,
//! runs begun, failed, retried and finished, deployments retired and their unloads owed.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::{Message, pb};

use super::super::after;
use super::super::deployment::{DeployOut, Deployment, LoadState, Settled};
use super::super::run::{Attempt, Begun, Failure, Next, RunError, RunOutput, Verdict};
use super::{Action, MAX_OWED, PlanId, RunId, Slot, Submitter, unload};

impl<K: Clone + PartialEq, V: Clone> Submitter<K, V> {
    /// The slot making a deployment of `model` for `key`: the existing one, or a new one
    /// with a `Plan` asked of the driver.
    pub(super) fn slot_for(&mut self, model: u64, key: K, now: Instant) -> PlanId {
        if let Some((&id, _)) = self
            .slots
            .iter()
            .find(|(_, s)| s.model == model && s.key == key)
        {
            return id;
        }
        let id = PlanId(self.next_plan);
        self.next_plan += 1;
        let avoid_for = self.config.avoid_for;
        let avoid = self
            .models
            .get(&model)
            .map(|m| m.avoid(now, avoid_for))
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

    pub(super) fn slot_failed(&mut self, plan: PlanId, error: RunError) {
        let Some(s) = self.slots.remove(&plan) else {
            return;
        };
        self.actions.push_back(Action::DeployFailed {
            plan,
            model: s.model,
            error: error.clone(),
        });
        let avoid: BTreeSet<String> = self
            .models
            .get(&s.model)
            .map(|m| m.avoid.keys().cloned().collect())
            .unwrap_or_default();
        for run in s.waiters {
            if let Some(r) = self.runs.get(&run) {
                let e = r.unavailable(error.clone(), &avoid);
                self.finish(run, Err(e));
            }
        }
    }

    pub(super) fn settled(&mut self, load_id: u64, s: Settled, now: Instant) {
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
    pub(super) fn begin(&mut self, run: RunId, load_id: u64, now: Instant) {
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
                        run,
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
    pub(super) fn fail(&mut self, load_id: u64, run_id: u64, f: Failure, now: Instant) {
        let Some(run) = self.attempts.remove(&(load_id, run_id)) else {
            return;
        };
        let Some(r) = self.runs.get_mut(&run) else {
            return;
        };
        let model = r.model;
        let again = f.clone();
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
        // The other attempts on a plan being retired lose their parts with it: they fail
        // the same way (each retried once), rather than wait for a deadline.
        let others: Vec<(u64, u64)> = match retire {
            Some(_) => self
                .attempts
                .range((load_id, 0)..=(load_id, u64::MAX))
                .map(|(&k, _)| k)
                .collect(),
            None => Vec::new(),
        };
        for (to, m) in aborts {
            self.actions.push_back(Action::Send {
                to,
                message: Message::RunFailed(m),
            });
        }
        if let (Some(node), Some(m)) = (avoid, self.models.get_mut(&model)) {
            m.avoid.insert(node, now);
        }
        match retire {
            Some(why) => self.retire(load_id, None, &why),
            None => self.collect(load_id),
        }
        for (l, r) in others {
            self.fail(l, r, again.clone(), now);
        }
        match next {
            Next::Done(e) => self.finish(run, Err(e)),
            Next::Retry if !self.models.contains_key(&model) => {
                self.finish(run, Err(RunError::NoModel(model)));
            }
            Next::Retry => self.actions.push_back(Action::Resolve { run, model }),
        }
    }

    /// Tells every node of the run's attempt in flight to give it up.
    pub(super) fn abort_attempt(&mut self, run: RunId, why: &str) {
        let Some(a) = self.runs.get_mut(&run).and_then(|r| r.attempt.take()) else {
            return;
        };
        self.attempts.remove(&(a.load_id, a.run_id));
        for node in a.nodes {
            let m = pb::RunFailed {
                model_id: a.load_id,
                run_id: a.run_id,
                reason: why.to_string(),
                ..Default::default()
            };
            self.actions.push_back(Action::Send {
                to: node,
                message: Message::RunFailed(m),
            });
        }
    }

    /// The attempts in flight that `pick` selects.
    pub(super) fn attempts_where(&self, pick: impl Fn(&Attempt<V>) -> bool) -> Vec<(u64, u64)> {
        self.attempts
            .iter()
            .filter(|(_, run)| {
                self.runs
                    .get(run)
                    .and_then(|r| r.attempt.as_ref())
                    .is_some_and(&pick)
            })
            .map(|(&k, _)| k)
            .collect()
    }

    /// Forgets a deployment and unloads it from its nodes but `dead`, which is sent its
    /// unload if it comes back (declared dead falsely, it kept its part).
    pub(super) fn retire(&mut self, load_id: u64, dead: Option<&str>, why: &str) {
        for m in self.models.values_mut() {
            m.cache.retain(|&(_, l)| l != load_id);
        }
        let Some(d) = self.deployments.get_mut(&load_id) else {
            return;
        };
        let owe = dead.filter(|_| d.state() != LoadState::Retired);
        let loading = d.state() == LoadState::Loading;
        let mut out = Vec::new();
        d.retire(dead, why, &mut out);
        if let Some(dead) = owe {
            self.owe(dead, load_id, why.to_string());
        }
        self.emit(load_id, out);
        // A loading one stays until it settles, to unload what did load.
        if !loading {
            self.deployments.remove(&load_id);
        }
    }

    pub(super) fn owe(&mut self, node: &str, load_id: u64, why: String) {
        let owed = self.owed.entry(node.to_string()).or_default();
        if owed.len() == MAX_OWED {
            owed.pop_front();
        }
        owed.push_back((load_id, why));
    }

    /// The driver could not deliver the `Unload` of `load_id` to `to` (not acknowledged: cut
    /// off, a connection lost): it is sent again after [`Config::unload_retry`].
    pub fn unload_failed(&mut self, to: &str, load_id: u64, reason: &str, now: Instant) {
        self.resends.failed(to, load_id, reason, now, &self.config);
    }

    /// `to` acknowledged the `Unload` of `load_id`.
    pub fn unload_delivered(&mut self, to: &str, load_id: u64) {
        self.resends.delivered(to, load_id);
    }

    /// Retires a live deployment that no model caches and no attempt uses (a plan evicted
    /// from a full cache, once its last run ended).
    pub(super) fn collect(&mut self, load_id: u64) {
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
            self.retire(load_id, None, "evicted from its model's plan cache");
        }
    }

    /// Ends a run, once.
    pub(super) fn finish(&mut self, run: RunId, result: Result<RunOutput<V>, RunError>) {
        let Some(r) = self.runs.remove(&run) else {
            return;
        };
        if let Some(a) = &r.attempt {
            self.attempts.remove(&(a.load_id, a.run_id));
        }
        self.actions.push_back(Action::RunDone { run, result });
    }

    pub(super) fn emit(&mut self, load_id: u64, out: Vec<DeployOut>) {
        for o in out {
            self.actions.push_back(match o {
                DeployOut::SendFragment { node } => Action::SendFragment { load_id, node },
                DeployOut::Unload { node, reason } => unload(&node, load_id, reason),
            });
        }
    }
}
