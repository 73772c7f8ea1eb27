//! A node's part in other nodes' models: the fragments it holds with the memory they reserve,
//! and the table of their runs.
//!
//! A run's entry goes through three states. Values from other nodes may arrive before the
//! submitter's `Run` (different streams from different nodes): they wait as `Early`. Once the
//! run's executable can take values (`run_ready`), the entry is `Running` and values go
//! straight to it. A run given up (by the submitter, an unload, a dead node) is `Aborted`
//! and remembered for [`Config::early_ttl`](super::Config::early_ttl), so that values still
//! on their way are dropped instead of starting an `Early` entry that nothing would consume.
//!
//! The machine holds each fragment's payload `F` (the driver's executable) and each value `V`
//! only while it waits; it never runs anything.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use crate::{Message, pb};

use super::{Config, after};

/// One local device as loading sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceBudget {
    pub name: String,
    /// Bytes the plans of all loaded fragments together may charge it.
    pub budget: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParticipantError {
    #[error(
        "{node} has no room for its part: {device} needs {needs} bytes, {reserved} of {budget} are reserved by other models"
    )]
    NoRoom {
        node: String,
        device: String,
        needs: u64,
        reserved: u64,
        budget: u64,
    },
    #[error("the plan charges device {0} of this node, which has no such device")]
    NoDevice(usize),
    #[error("no model with id {0:016x} is loaded on this node (unloaded, or the node restarted)")]
    NoModel(u64),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum ParticipantAction<V> {
    /// Send a control message (a `RunFailed` report to a run's submitter).
    Send { to: String, message: Message },
    /// Hand a value to the run's executable (`RunLink::deliver`).
    Deliver {
        model: u64,
        run: u64,
        value: u64,
        data: V,
    },
    /// Stop the run's executable (`RunLink::abort`): chunks not started never start.
    AbortRun {
        model: u64,
        run: u64,
        reason: String,
    },
    /// A fragment was forgotten and its reservation released (for the log).
    Unloaded {
        model: u64,
        reason: String,
        released: Vec<(usize, u64)>,
    },
}

/// A load in progress: its memory is reserved, its executable not yet built.
#[derive(Debug, PartialEq, Eq)]
pub struct LoadTicket {
    id: u64,
    reserve: Vec<(usize, u64)>,
}

/// A run started here: what its end must know even if its fragment is gone by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTicket {
    pub model: u64,
    pub run: u64,
    pub submitter: String,
}

/// A loaded fragment's facts (the payload aside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragmentInfo {
    pub submitter: String,
    /// Every node of the plan: the death of any one ends this fragment.
    pub nodes: BTreeSet<String>,
}

struct Fragment<F> {
    info: FragmentInfo,
    reserved: Vec<(usize, u64)>,
    payload: F,
}

enum Entry<V> {
    Early(Vec<(u64, V)>, Instant),
    Running,
    Aborted(Instant),
}

/// What became of an arriving value (the driver logs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    Delivered,
    Early,
    /// The run was aborted here: a straggler.
    Aborted,
    /// No fragment of that model is loaded here.
    UnknownModel,
}

pub struct Participant<F, V> {
    me: String,
    config: Config,
    devices: Vec<DeviceBudget>,
    reserved: Vec<u64>,
    next_load: u64,
    fragments: BTreeMap<u64, Fragment<F>>,
    runs: BTreeMap<(u64, u64), Entry<V>>,
    actions: VecDeque<ParticipantAction<V>>,
}

impl<F, V> Participant<F, V> {
    pub fn new(me: String, devices: Vec<DeviceBudget>, config: Config) -> Participant<F, V> {
        Participant {
            me,
            config,
            reserved: vec![0; devices.len()],
            devices,
            next_load: 1,
            fragments: BTreeMap::new(),
            runs: BTreeMap::new(),
            actions: VecDeque::new(),
        }
    }

    /// Reserves what a plan charges this node's devices, before anything is built: all or
    /// nothing, against what other loaded (or loading) fragments reserved.
    pub fn reserve(&mut self, charges: &[(usize, u64)]) -> Result<LoadTicket, ParticipantError> {
        for &(d, b) in charges {
            let dev = self.devices.get(d).ok_or(ParticipantError::NoDevice(d))?;
            if self.reserved[d].saturating_add(b) > dev.budget {
                return Err(ParticipantError::NoRoom {
                    node: self.me.clone(),
                    device: dev.name.clone(),
                    needs: b,
                    reserved: self.reserved[d],
                    budget: dev.budget,
                });
            }
        }
        for &(d, b) in charges {
            self.reserved[d] += b;
        }
        let id = self.next_load;
        self.next_load += 1;
        Ok(LoadTicket {
            id,
            reserve: charges.to_vec(),
        })
    }

    /// The executable could not be built: the reservation goes back.
    pub fn load_failed(&mut self, ticket: LoadTicket) {
        self.release(&ticket.reserve);
    }

    /// The fragment is built: it is loaded under `model`. A fragment loaded before under the
    /// same id is replaced and its reservation released (its runs go on with the payload the
    /// driver already holds).
    pub fn loaded(&mut self, ticket: LoadTicket, model: u64, info: FragmentInfo, payload: F) {
        let f = Fragment {
            info,
            reserved: ticket.reserve,
            payload,
        };
        if let Some(old) = self.fragments.insert(model, f) {
            self.release(&old.reserved);
        }
    }

    pub fn fragment(&self, model: u64) -> Option<&F> {
        self.fragments.get(&model).map(|f| &f.payload)
    }

    pub fn info(&self, model: u64) -> Option<&FragmentInfo> {
        self.fragments.get(&model).map(|f| &f.info)
    }

    /// Models loaded here (load ids), for status and tests.
    pub fn loaded_models(&self) -> Vec<u64> {
        self.fragments.keys().copied().collect()
    }

    /// Bytes reserved per local device.
    pub fn reserved(&self) -> &[u64] {
        &self.reserved
    }

    /// Runs with an entry here (any state), for tests.
    pub fn entries(&self) -> usize {
        self.runs.len()
    }

    /// The submitter `from` asks for run `run` of `model`. When the model is not loaded and
    /// the ask came over the network, the submitter is told this node lost it (so it loads
    /// the model again); the local submitter gets the error to handle itself, as a plain
    /// failure.
    pub fn start_run(
        &mut self,
        from: &str,
        model: u64,
        run: u64,
    ) -> Result<RunTicket, ParticipantError> {
        match self.fragments.get(&model) {
            Some(f) => Ok(RunTicket {
                model,
                run,
                submitter: f.info.submitter.clone(),
            }),
            None => {
                if from != self.me {
                    let reason = format!(
                        "{} does not hold model {model:016x} (it restarted?)",
                        self.me
                    );
                    self.report(from, model, run, reason, self.me.clone(), true);
                }
                Err(ParticipantError::NoModel(model))
            }
        }
    }

    /// The run's executable can take values now: the early ones are delivered. A run aborted
    /// in between stays aborted and is stopped at once.
    pub fn run_ready(&mut self, t: &RunTicket) {
        let key = (t.model, t.run);
        match self.runs.insert(key, Entry::Running) {
            Some(Entry::Early(values, _)) => {
                for (value, data) in values {
                    self.actions.push_back(ParticipantAction::Deliver {
                        model: t.model,
                        run: t.run,
                        value,
                        data,
                    });
                }
            }
            Some(Entry::Aborted(at)) => {
                self.runs.insert(key, Entry::Aborted(at));
                self.actions.push_back(ParticipantAction::AbortRun {
                    model: t.model,
                    run: t.run,
                    reason: "the run was abandoned".into(),
                });
            }
            Some(Entry::Running) | None => {}
        }
    }

    /// The run's executable returned. Its entry goes; an error is reported to the submitter,
    /// unless the run had been aborted here (the submitter knows already).
    pub fn run_finished(&mut self, t: &RunTicket, result: Result<(), String>) {
        let aborted = matches!(self.runs.remove(&(t.model, t.run)), Some(Entry::Aborted(_)));
        if let Err(reason) = result
            && !aborted
        {
            self.report(&t.submitter, t.model, t.run, reason, self.me.clone(), false);
        }
    }

    /// A value another node produced for a run of ours.
    pub fn arrive(&mut self, model: u64, run: u64, value: u64, data: V, now: Instant) -> Arrival {
        if !self.fragments.contains_key(&model) {
            return Arrival::UnknownModel;
        }
        let e = self
            .runs
            .entry((model, run))
            .or_insert_with(|| Entry::Early(Vec::new(), now));
        match e {
            Entry::Early(values, _) => {
                values.push((value, data));
                Arrival::Early
            }
            Entry::Aborted(_) => Arrival::Aborted,
            Entry::Running => {
                self.actions.push_back(ParticipantAction::Deliver {
                    model,
                    run,
                    value,
                    data,
                });
                Arrival::Delivered
            }
        }
    }

    /// The submitter gave the run up (another node failed): stop waiting. Remembered even for
    /// a model not loaded here, so its stragglers are dropped.
    pub fn abort(&mut self, model: u64, run: u64, reason: &str, now: Instant) {
        if let Some(Entry::Running) = self.runs.insert((model, run), Entry::Aborted(now)) {
            self.actions.push_back(ParticipantAction::AbortRun {
                model,
                run,
                reason: format!("run abandoned: {reason}"),
            });
        }
    }

    /// Forgets a model; its runs in flight end with `why`.
    pub fn unload(&mut self, model: u64, why: &str, now: Instant) {
        if let Some(f) = self.fragments.remove(&model) {
            self.drop_fragment(model, f, why.to_string());
            self.abort_runs(model, &format!("the model was unloaded: {why}"), now);
        }
    }

    /// A member died or left: every fragment whose plan involves it, or whose submitter it
    /// is, is over (its submitter re-plans without it), and its runs end now.
    pub fn member_down(&mut self, node: &str, now: Instant) {
        let doomed: Vec<u64> = self
            .fragments
            .iter()
            .filter(|(_, f)| f.info.nodes.contains(node) || f.info.submitter == node)
            .map(|(&m, _)| m)
            .collect();
        for m in doomed {
            let f = self.fragments.remove(&m).expect("listed above");
            self.drop_fragment(m, f, format!("node {node} is gone"));
            self.abort_runs(m, &format!("node {node} failed"), now);
        }
    }

    /// A value of run `run` could not be sent to `to`: the submitter is told, naming `to`
    /// (it may retry without it).
    pub fn value_send_failed(
        &mut self,
        submitter: &str,
        model: u64,
        run: u64,
        to: &str,
        why: &str,
    ) {
        let reason = format!("cannot send a value to {to}: {why}");
        self.report(submitter, model, run, reason, to.to_string(), false);
    }

    /// When the next early or aborted entry expires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.runs
            .values()
            .filter_map(|e| match e {
                Entry::Early(_, t) | Entry::Aborted(t) => after(*t, self.config.early_ttl),
                Entry::Running => None,
            })
            .min()
    }

    /// Forgets values that waited too long for their run, and old aborts.
    pub fn handle_timeout(&mut self, now: Instant) {
        let ttl = self.config.early_ttl;
        self.runs.retain(|_, e| match e {
            Entry::Early(_, t) | Entry::Aborted(t) => now.saturating_duration_since(*t) < ttl,
            Entry::Running => true,
        });
    }

    pub fn poll_action(&mut self) -> Option<ParticipantAction<V>> {
        self.actions.pop_front()
    }

    fn release(&mut self, charges: &[(usize, u64)]) {
        for &(d, b) in charges {
            // Saturating only as a guard: each charge is added once by `reserve` and released
            // once, by the owner that removed it from the table.
            self.reserved[d] = self.reserved[d].saturating_sub(b);
        }
    }

    fn drop_fragment(&mut self, model: u64, f: Fragment<F>, reason: String) {
        self.release(&f.reserved);
        self.actions.push_back(ParticipantAction::Unloaded {
            model,
            reason,
            released: f.reserved,
        });
    }

    fn abort_runs(&mut self, model: u64, why: &str, now: Instant) {
        for (&(m, run), e) in self.runs.range_mut((model, 0)..=(model, u64::MAX)) {
            if let Entry::Running = e {
                self.actions.push_back(ParticipantAction::AbortRun {
                    model: m,
                    run,
                    reason: why.to_string(),
                });
            }
            *e = Entry::Aborted(now);
        }
    }

    fn report(
        &mut self,
        to: &str,
        model: u64,
        run: u64,
        reason: String,
        culprit: String,
        lost: bool,
    ) {
        let message = Message::RunFailed(pb::RunFailed {
            model_id: model,
            run_id: run,
            reason,
            culprit,
            model_lost: lost,
        });
        self.actions.push_back(ParticipantAction::Send {
            to: to.to_string(),
            message,
        });
    }
}
