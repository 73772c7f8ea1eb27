//! A node's part in other nodes' models: the fragments it holds with the memory they reserve,
//! and the table of their runs.
//!
//! A run's entry goes through three states. Values from other nodes may arrive before the
//! submitter's `Run` (different streams from different nodes): they wait as `Early`. Once the
//! run's executable can take values (`run_ready`), the entry is `Running` and values go
//! straight to it. A run given up (by the submitter, a peer's report, an unload, a dead
//! node, its own failure) is `Aborted` and remembered for
//! [`Config::early_ttl`](super::Config::early_ttl), also once its executable returned, so
//! that values still on their way are dropped instead of starting an `Early` entry that
//! nothing would consume.
//!
//! Every run here ends: its executable returns (done or failed), or it is aborted by the
//! events of any peer: the submitter giving it up, another participant's report of a failure
//! (a kernel error, a value or an output that could not be sent, a value whose stripes were
//! given up), a verdict on a node of its plan, an unload, this node learning it had been
//! declared dead, or, as a last resort, [`Config::run_deadline`](super::Config::run_deadline)
//! after it started. A failure seen here is sent to the run's submitter and to every other
//! node of its plan, and a node that hears of it from a peer other than the submitter passes
//! it on to the submitter once: a submitter the reporter cannot reach (a one-sided partition,
//! a false verdict) still learns of it through the others.
//!
//! Verdicts are about one life of a node (its membership generation). A fragment records the
//! life of every node of its plan and of its submitter: a death ends the fragments made with
//! that life or an older one, and a newer life coming up ends those made with an older one
//! (that node lost its part when it restarted).
//!
//! The machine holds each fragment's payload `F` (the driver's executable) and each value `V`
//! only while it waits; it never runs anything.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use crate::{Message, pb};

use super::{Config, after, died, returned, secs};

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
    /// The fragment was dropped a moment ago because another node of its plan went: the run
    /// is reported to its submitter naming that node, not this one.
    #[error("model {model:016x} was dropped on this node: {why}")]
    Dropped { model: u64, why: String },
}

/// Fragments dropped because of another node, remembered for the runs still asked of them.
const DROPPED_KEPT: usize = 256;

/// Why a fragment went, when another node was the cause: a run asked of it in the moment
/// before its submitter heard the news is failed naming that node.
#[derive(Debug, Clone)]
struct DroppedBy {
    node: String,
    why: String,
    blame: Blame,
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
    shared: Vec<(usize, u64)>,
}

impl LoadTicket {
    /// What the load reserved for weights it shares with other plans: the driver's to
    /// release ([`Participant::release_shared`]) when the last plan using them is gone.
    pub fn shared(&self) -> &[(usize, u64)] {
        &self.shared
    }
}

/// A run started here: what its end must know even if its fragment is gone by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTicket {
    pub model: u64,
    pub run: u64,
    pub submitter: String,
    /// Every node of the plan: told when the run fails here.
    pub nodes: BTreeSet<String>,
}

/// A loaded fragment's facts (the payload aside).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FragmentInfo {
    pub submitter: String,
    /// Every node of the plan: the death of any one ends this fragment.
    pub nodes: BTreeSet<String>,
    /// The life (membership generation) of each node of the plan and of the submitter when
    /// the plan was made. Absent or 0: unknown, which any verdict on that node matches.
    pub lives: BTreeMap<String, u64>,
}

impl FragmentInfo {
    fn involves(&self, node: &str) -> bool {
        self.nodes.contains(node) || self.submitter == node
    }

    fn life(&self, node: &str) -> u64 {
        self.lives.get(node).copied().unwrap_or(0)
    }

    /// Whether a verdict that life `generation` of `node` is down ends this fragment (0:
    /// any life).
    pub fn ended_by_death(&self, node: &str, generation: u64) -> bool {
        self.involves(node) && died(self.life(node), generation)
    }

    /// Whether life `generation` of `node` coming up ends this fragment: it was planned with
    /// an older life, whose part is gone.
    pub fn ended_by_return(&self, node: &str, generation: u64) -> bool {
        self.involves(node) && returned(self.life(node), generation)
    }
}

/// What the driver shows of a loaded fragment (`status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragmentStatus {
    pub model: u64,
    pub submitter: String,
    /// Bytes reserved on this node's devices, all together.
    pub reserved: u64,
}

struct Fragment<F> {
    info: FragmentInfo,
    reserved: Vec<(usize, u64)>,
    payload: F,
}

enum Entry<V> {
    Early(Vec<(u64, V)>, Instant),
    /// Since when: the run is given up [`Config::run_deadline`] later, by which time its
    /// submitter has failed it (its attempt started earlier).
    Running(Instant),
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
    /// The last [`DROPPED_KEPT`] fragments dropped because of another node, oldest first.
    dropped: VecDeque<(u64, DroppedBy)>,
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
            dropped: VecDeque::new(),
            runs: BTreeMap::new(),
            actions: VecDeque::new(),
        }
    }

    /// Reserves what a plan charges this node's devices, before anything is built: all or
    /// nothing, against what other loaded (or loading) fragments reserved.
    pub fn reserve(&mut self, charges: &[(usize, u64)]) -> Result<LoadTicket, ParticipantError> {
        self.reserve_sharing(charges, &[])
    }

    /// [`Participant::reserve`] for a plan that shares weights with other plans of its model
    /// (their copies on a GPU outlive any one plan): `charges` are the fragment's own, released
    /// with it, `shared` the weights it uploads for all of them, which stay reserved once it
    /// is loaded until the driver releases them ([`Participant::release_shared`]).
    pub fn reserve_sharing(
        &mut self,
        charges: &[(usize, u64)],
        shared: &[(usize, u64)],
    ) -> Result<LoadTicket, ParticipantError> {
        let mut need: BTreeMap<usize, u64> = BTreeMap::new();
        for &(d, b) in charges.iter().chain(shared) {
            let n = need.entry(d).or_insert(0);
            *n = n.saturating_add(b);
        }
        for (&d, &b) in &need {
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
        for (&d, &b) in &need {
            self.reserved[d] += b;
        }
        let id = self.next_load;
        self.next_load += 1;
        Ok(LoadTicket {
            id,
            reserve: charges.to_vec(),
            shared: shared.to_vec(),
        })
    }

    /// The executable could not be built: the reservation goes back, shared part and all.
    pub fn load_failed(&mut self, ticket: LoadTicket) {
        self.release(&ticket.reserve);
        self.release(&ticket.shared);
    }

    /// Shared weights a loaded plan reserved ([`LoadTicket::shared`]) are freed.
    pub fn release_shared(&mut self, charges: &[(usize, u64)]) {
        self.release(charges);
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

    /// Every fragment held here with what it reserves, for `status`.
    pub fn status(&self) -> Vec<FragmentStatus> {
        self.fragments
            .iter()
            .map(|(&model, f)| FragmentStatus {
                model,
                submitter: f.info.submitter.clone(),
                reserved: f.reserved.iter().map(|&(_, b)| b).sum(),
            })
            .collect()
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
                nodes: f.info.nodes.clone(),
            }),
            None => {
                let by = self.dropped.iter().find(|(m, _)| *m == model);
                if let Some((_, by)) = by.cloned() {
                    // Its submitter has not heard yet: told whom to blame, it retries
                    // without that node (or loads again with it, when it restarted).
                    let reason = format!("{} dropped its part: {}", self.me, by.why);
                    let m = failure(model, run, reason, &by.node, by.blame);
                    self.send(from, m);
                    return Err(ParticipantError::Dropped { model, why: by.why });
                }
                if from != self.me {
                    let reason = format!(
                        "{} does not hold model {model:016x} (it restarted?)",
                        self.me
                    );
                    let m = failure(model, run, reason, &self.me, Blame::Lost);
                    self.send(from, m);
                }
                Err(ParticipantError::NoModel(model))
            }
        }
    }

    /// The run's executable can take values now: the early ones are delivered. A run aborted
    /// in between stays aborted and is stopped at once.
    pub fn run_ready(&mut self, t: &RunTicket, now: Instant) {
        let key = (t.model, t.run);
        match self.runs.insert(key, Entry::Running(now)) {
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
            Some(Entry::Running(_)) | None => {}
        }
    }

    /// The run's executable returned. A run that completed is forgotten; one that failed
    /// here is reported to its submitter and to the other nodes of its plan, unless it had
    /// been aborted here (its end was known already). A failed or aborted run is
    /// remembered as aborted, so its stragglers are dropped.
    pub fn run_finished(&mut self, t: &RunTicket, result: Result<(), String>, now: Instant) {
        let key = (t.model, t.run);
        let aborted = matches!(self.runs.get(&key), Some(Entry::Aborted(_)));
        match result {
            Ok(()) if !aborted => {
                self.runs.remove(&key);
            }
            Ok(()) => {}
            Err(reason) if !aborted => {
                let m = failure(t.model, t.run, reason, &self.me, Blame::Error);
                self.runs.insert(key, Entry::Aborted(now));
                self.tell(t, &m);
            }
            Err(_) => {}
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
            Entry::Running(_) => {
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

    /// A `RunFailed` from `from`: the submitter giving the run up, or another participant's
    /// report. The run stops waiting here; a report from a peer other than the submitter is
    /// passed on to the submitter the first time this node hears of the run's end (the
    /// reporter may not reach it). Remembered even for a model not loaded here, so its
    /// stragglers are dropped.
    pub fn run_failed(&mut self, from: &str, r: &pb::RunFailed, now: Instant) {
        let first = self.abort(r.model_id, r.run_id, &r.reason, now);
        let Some(f) = self.fragments.get(&r.model_id) else {
            return;
        };
        let submitter = f.info.submitter.clone();
        if first && from != submitter && submitter != self.me {
            let mut m = r.clone();
            if m.culprit.is_empty() {
                m.culprit = from.to_string();
            }
            self.send(&submitter, m);
        }
    }

    /// Forgets a model; its runs in flight end with `why`.
    pub fn unload(&mut self, model: u64, why: &str, now: Instant) {
        if let Some(f) = self.fragments.remove(&model) {
            self.drop_fragment(model, f, why.to_string());
            self.abort_runs(model, &format!("the model was unloaded: {why}"), now);
        }
    }

    /// Life `generation` of a member died or left (0: whichever life): every fragment made
    /// with that life or an older one, as a node of its plan or as its submitter, is over
    /// (its submitter re-plans without it), and its runs end now.
    pub fn member_down(&mut self, node: &str, generation: u64, now: Instant) {
        let by = DroppedBy {
            node: node.to_string(),
            why: format!("node {node} is gone"),
            blame: Blame::Unreachable,
        };
        self.end_fragments(
            |i| i.ended_by_death(node, generation),
            &by.why.clone(),
            &format!("node {node} failed"),
            Some(by),
            now,
        );
    }

    /// Life `generation` of a member is up: fragments made with an older life of it are over
    /// (it restarted, or renewed after being declared dead, and holds no part of them).
    pub fn member_up(&mut self, node: &str, generation: u64, now: Instant) {
        let by = DroppedBy {
            node: node.to_string(),
            why: format!("node {node} restarted"),
            blame: Blame::Lost,
        };
        self.end_fragments(
            |i| i.ended_by_return(node, generation),
            &by.why.clone(),
            &by.why.clone(),
            Some(by),
            now,
        );
    }

    /// This node learned it had been declared dead (and rejoined under a new life): every
    /// other node has dropped its part of the plans made with it, and every submitter
    /// retired them, so the fragments it holds of plans that involve another node are
    /// dropped with their reservations and runs. Plans of this node alone stay.
    pub fn rejoined(&mut self, now: Instant) {
        let me = self.me.clone();
        self.end_fragments(
            |i| i.submitter != me || i.nodes.iter().any(|n| *n != me),
            "this node was declared dead: the other nodes retired its plans",
            "this node was declared dead",
            None,
            now,
        );
    }

    /// The node is stopping: every run in flight is aborted, so none waits on a value that
    /// will never come.
    pub fn abort_all(&mut self, why: &str, now: Instant) {
        let running: Vec<(u64, u64)> = self.runs.keys().copied().collect();
        for (model, run) in running {
            self.abort(model, run, why, now);
        }
    }

    /// A value of run `t` could not be sent to `to` (`what` says which: "output 0", "value
    /// 12"): the run fails everywhere, naming the node that could not be reached: `to`, or
    /// this node when `to` is the run's submitter (it cannot reach this node's results).
    /// Nothing is reported for a run that had ended here otherwise (aborted: its end is
    /// known).
    pub fn value_send_failed(
        &mut self,
        t: &RunTicket,
        to: &str,
        what: &str,
        why: &str,
        now: Instant,
    ) {
        let key = (t.model, t.run);
        if matches!(self.runs.get(&key), Some(Entry::Aborted(_))) {
            return;
        }
        let culprit = if to == t.submitter { &self.me } else { to };
        let reason = format!("cannot send {what} to {to}: {why}");
        let m = failure(t.model, t.run, reason, culprit, Blame::Unreachable);
        if let Some(Entry::Running(_)) = self.runs.insert(key, Entry::Aborted(now)) {
            self.actions.push_back(ParticipantAction::AbortRun {
                model: t.model,
                run: t.run,
                reason: m.reason.clone(),
            });
        }
        self.tell(t, &m);
    }

    /// A value `from` was sending for run `run` of `model` will never arrive (its partial
    /// tensor was given up: a stripe broke, or it stalled): the run fails everywhere,
    /// naming `from` (this node when `from` is the submitter). Ignored for a model not held
    /// here, and for a run that ended here already.
    pub fn value_lost(&mut self, model: u64, run: u64, from: &str, why: &str, now: Instant) {
        let Some(f) = self.fragments.get(&model) else {
            return;
        };
        let t = RunTicket {
            model,
            run,
            submitter: f.info.submitter.clone(),
            nodes: f.info.nodes.clone(),
        };
        if !self.abort(model, run, why, now) {
            return;
        }
        let reason = format!("a value from {from} was lost: {why}");
        // As for a send: the submitter does not blame itself for its link to this node.
        let culprit = if from == t.submitter { &self.me } else { from };
        let m = failure(model, run, reason, culprit, Blame::Unreachable);
        self.tell(&t, &m);
    }

    /// When the next early or aborted entry expires, or the next run passes its deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.runs
            .values()
            .filter_map(|e| match e {
                Entry::Early(_, t) | Entry::Aborted(t) => after(*t, self.config.early_ttl),
                Entry::Running(t) => after(*t, self.config.run_deadline),
            })
            .min()
    }

    /// Forgets values that waited too long for their run, and old aborts; gives up runs past
    /// their deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        let ttl = self.config.early_ttl;
        let deadline = self.config.run_deadline;
        let late: Vec<(u64, u64)> = self
            .runs
            .iter()
            .filter(|(_, e)| {
                matches!(e, Entry::Running(t) if now.saturating_duration_since(*t) >= deadline)
            })
            .map(|(&k, _)| k)
            .collect();
        let why = format!("no result within {}", secs(deadline));
        for (model, run) in late {
            self.abort(model, run, &why, now);
        }
        self.runs.retain(|_, e| match e {
            Entry::Early(_, t) | Entry::Aborted(t) => now.saturating_duration_since(*t) < ttl,
            Entry::Running(_) => true,
        });
    }

    pub fn poll_action(&mut self) -> Option<ParticipantAction<V>> {
        self.actions.pop_front()
    }

    /// Marks the run aborted (stopping it if it runs); whether it was not already.
    fn abort(&mut self, model: u64, run: u64, reason: &str, now: Instant) -> bool {
        match self.runs.insert((model, run), Entry::Aborted(now)) {
            Some(Entry::Running(_)) => {
                self.actions.push_back(ParticipantAction::AbortRun {
                    model,
                    run,
                    reason: format!("run abandoned: {reason}"),
                });
                true
            }
            Some(Entry::Aborted(at)) => {
                self.runs.insert((model, run), Entry::Aborted(at));
                false
            }
            Some(Entry::Early(..)) | None => true,
        }
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

    /// Drops the fragments `doomed` picks (`why`) and ends their runs (`runs_why`),
    /// remembering the node that was the cause (`by`), if any.
    fn end_fragments(
        &mut self,
        doomed: impl Fn(&FragmentInfo) -> bool,
        why: &str,
        runs_why: &str,
        by: Option<DroppedBy>,
        now: Instant,
    ) {
        let gone: Vec<u64> = self
            .fragments
            .iter()
            .filter(|(_, f)| doomed(&f.info))
            .map(|(&m, _)| m)
            .collect();
        for m in gone {
            let f = self.fragments.remove(&m).expect("listed above");
            self.drop_fragment(m, f, why.to_string());
            self.abort_runs(m, runs_why, now);
            if let Some(by) = &by {
                if self.dropped.len() == DROPPED_KEPT {
                    self.dropped.pop_front();
                }
                self.dropped.push_back((m, by.clone()));
            }
        }
    }

    fn abort_runs(&mut self, model: u64, why: &str, now: Instant) {
        for (&(m, run), e) in self.runs.range_mut((model, 0)..=(model, u64::MAX)) {
            if let Entry::Running(_) = e {
                self.actions.push_back(ParticipantAction::AbortRun {
                    model: m,
                    run,
                    reason: why.to_string(),
                });
            }
            *e = Entry::Aborted(now);
        }
    }

    /// A failure of run `t` seen here: to its submitter, and to every other node of its plan
    /// (each passes it on to the submitter if this node cannot reach it).
    fn tell(&mut self, t: &RunTicket, m: &pb::RunFailed) {
        self.send(&t.submitter, m.clone());
        let others: Vec<String> = t
            .nodes
            .iter()
            .filter(|n| **n != self.me && **n != t.submitter && **n != m.culprit)
            .cloned()
            .collect();
        for n in others {
            self.send(&n, m.clone());
        }
    }

    fn send(&mut self, to: &str, m: pb::RunFailed) {
        self.actions.push_back(ParticipantAction::Send {
            to: to.to_string(),
            message: Message::RunFailed(m),
        });
    }
}

/// How a failure is attributed to its culprit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blame {
    /// Its own work failed: final.
    Error,
    /// It could not be reached: the run may be retried without it.
    Unreachable,
    /// It does not hold the model (it restarted): load it again.
    Lost,
}

fn failure(model: u64, run: u64, reason: String, culprit: &str, blame: Blame) -> pb::RunFailed {
    pb::RunFailed {
        model_id: model,
        run_id: run,
        reason,
        culprit: culprit.to_string(),
        model_lost: blame == Blame::Lost,
        unreachable: blame == Blame::Unreachable,
    }
}
