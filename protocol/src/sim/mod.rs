//! An in-memory simulator of several nodes running the [`dist`](crate::dist) machines, with
//! simulated time and a seeded, deterministic network: per-link delay and jitter (which
//! reorders), drops and duplicates, rules for partitions and single lost or late stripes,
//! nodes that die (and come back empty), stall, fail their runs, or are falsely declared
//! dead by one observer.
//!
//! Each node holds a submitter, a participant and a stripe assembler, and drives them as the
//! node's tokio code will: every action is carried out by sending a [`Wire`] message, calling
//! one of its own machines (messages to itself never touch the network, as today), or
//! recording a client's answer. The executable is trivial: a plan is a chain of its nodes in
//! name order; the first reads graph input 0, each adds its id (10^i for the i-th configured
//! node) to what it received and sends it on as a striped value, and the last adds graph
//! input 1 and sends output 0 to the submitter. Output 1 is input 0 passed through and
//! output 2 the constant 42, both known without running. So a run's outputs say which nodes
//! computed them.
//!
//! Control messages, fragments and run starts are fire-and-forget. Values are acknowledged
//! stripe by stripe, as the node's tensor streams are: a refused stripe, or one whose
//! acknowledgement does not come within `SimConfig::ack_timeout`, fails its send. Sends to a
//! node the sender's membership believes dead fail at once, as a send to a node that is not a
//! live member does.
//!
//! Compiled for this crate's tests, and for others with the `sim` feature.

mod net;
mod node;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub use net::{Effect, LinkFaults, MsgKind, Rng, Rule, Wire};

use crate::dist::Config;
use crate::dist::run::{RunError, RunOutput};
use crate::dist::submitter::{PlanId, RunId};
use net::{Ev, Queue, Queued};
use node::SimNode;

/// A node-level fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFault {
    /// The node dies: its state is gone; the others see it dead after `SimConfig::detect`.
    Die { node: String, at: Duration },
    /// The node comes back with empty state; the others see it alive after `detect`.
    Revive { node: String, at: Duration },
    /// The node processes nothing in [start, end): messages, timers and its own work wait.
    Stall {
        node: String,
        start: Duration,
        end: Duration,
    },
    /// `observer` declares `node` dead at `start` while it is not (a false verdict); at
    /// `end`, `node` learns it (as SWIM's gossip tells it) and renews its life, which every
    /// other node then sees come up.
    FalseDeath {
        observer: String,
        node: String,
        start: Duration,
        end: Duration,
    },
    /// Every run's computation on `node` fails in [start, end) (a kernel error).
    FailRuns {
        node: String,
        start: Duration,
        end: Duration,
    },
    /// Every fragment `node` builds in [start, end) fails to build.
    FailLoads {
        node: String,
        start: Duration,
        end: Duration,
    },
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub nodes: Vec<String>,
    /// The machines' durations (shrink them in tests).
    pub core: Config,
    pub link: LinkFaults,
    pub rules: Vec<Rule>,
    pub faults: Vec<NodeFault>,
    /// From a death to every other node's membership saying so.
    pub detect: Duration,
    /// From a node's new life (a restart, or a renewal after a false verdict) to every other
    /// node seeing it: the new life announces itself and gossip spreads it within a few
    /// rounds, long before an old life's death is declared.
    pub announce: Duration,
    /// A fragment's computation.
    pub exec_time: Duration,
    /// Building a fragment's executable.
    pub load_time: Duration,
    /// Stripes per value (each 8 bytes: the value, once per stripe).
    pub stripes: u32,
    /// A stripe not acknowledged within this fails its send (QUIC's idle timeout).
    pub ack_timeout: Duration,
    /// Each node's one device.
    pub budget: u64,
    /// What each plan charges each of its nodes.
    pub charge: u64,
    /// At most this many nodes per plan.
    pub plan_width: usize,
    /// Fewer usable nodes than this: the plan fails (the others have no room).
    pub min_nodes: usize,
}

impl SimConfig {
    /// `n` nodes named n1..nN on a fault-free network, with the machines' default durations.
    pub fn new(n: usize, seed: u64) -> SimConfig {
        SimConfig {
            seed,
            nodes: (1..=n).map(|i| format!("n{i}")).collect(),
            core: Config::default(),
            link: LinkFaults::default(),
            rules: Vec::new(),
            faults: Vec::new(),
            detect: Duration::from_millis(1500),
            announce: Duration::from_millis(200),
            exec_time: Duration::from_millis(5),
            load_time: Duration::from_millis(20),
            stripes: 3,
            ack_timeout: Duration::from_secs(10),
            budget: 1000,
            charge: 100,
            plan_width: usize::MAX,
            min_nodes: 1,
        }
    }
}

/// Things counted across the cluster, for tests.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Values that arrived for a run already aborted there, and were dropped.
    pub stragglers: usize,
    /// Values that arrived before their run started.
    pub early: usize,
    /// Values for a model not loaded on the receiver.
    pub unknown_model: usize,
    /// Stripes refused, with the reason.
    pub refused: Vec<String>,
    /// Partial tensors given up, with the reason.
    pub partial_dropped: Vec<String>,
    /// Fragments unloaded (any reason).
    pub unloaded: usize,
    /// Messages lost to faults.
    pub lost: usize,
}

/// A client's run as the simulation records it.
#[derive(Debug, Clone)]
pub struct ClientRun {
    pub node: String,
    pub model: u64,
    pub inputs: Vec<i64>,
    pub at: Duration,
    pub id: Option<RunId>,
    /// When and how it ended.
    pub outcome: Option<(Duration, Result<RunOutput<i64>, RunError>)>,
}

#[derive(Debug, Clone)]
struct Submission {
    node: String,
    plan: Option<PlanId>,
    result: Option<Result<u64, RunError>>,
}

/// Everything but the nodes: time, the queue, the PRNG, and what was observed.
pub(crate) struct World {
    epoch: Instant,
    now: Instant,
    cfg: SimConfig,
    rng: Rng,
    queue: Queue,
    seq: u64,
    /// Messages sent, and those delivered once (the copies the network makes of a message
    /// share its id: the first to arrive is the message, the others copies).
    messages: u64,
    delivered: BTreeSet<u64>,
    alive: BTreeMap<String, u64>,
    /// Every plan made: load id to the chain of nodes.
    plans: BTreeMap<u64, Vec<String>>,
    submissions: BTreeMap<u64, Submission>,
    clients: Vec<ClientRun>,
    stats: Stats,
    log: Vec<String>,
}

impl World {
    fn since(&self) -> Duration {
        self.now - self.epoch
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn after(&mut self, d: Duration, ev: Ev) {
        self.push(self.now + d, ev);
    }

    fn note(&mut self, who: &str, what: String) {
        let t = self.since().as_secs_f64() * 1000.0;
        self.log.push(format!("{t:10.3} ms {who}: {what}"));
    }

    /// The node's id, which its computation adds.
    fn id_of(&self, node: &str) -> i64 {
        let i = self.cfg.nodes.iter().position(|n| n == node).unwrap_or(0);
        10i64.pow(i as u32)
    }

    fn in_window(&self, start: Duration, end: Duration) -> bool {
        (start..end).contains(&self.since())
    }

    /// The end of a stall `node` is in now, if it is.
    fn stalled(&self, node: &str, at: Instant) -> Option<Instant> {
        let t = at - self.epoch;
        self.cfg.faults.iter().find_map(|f| match f {
            NodeFault::Stall {
                node: n,
                start,
                end,
            } if n == node && (*start..*end).contains(&t) => Some(self.epoch + *end),
            _ => None,
        })
    }

    /// Sends a message through the faults of its link.
    fn send(&mut self, from: &str, to: &str, msg: Wire) {
        let Some(&generation) = self.alive.get(to) else {
            self.stats.lost += 1;
            return;
        };
        let since = self.since();
        let mut copies = 1;
        let mut extra = Duration::ZERO;
        for r in &self.cfg.rules {
            if r.matches(from, to, &msg, since) {
                match r.effect {
                    Effect::Drop => copies = 0,
                    Effect::Duplicate => copies += 1,
                    Effect::Delay(d) => extra += d,
                }
            }
        }
        let link = self.cfg.link.clone();
        if link.kinds.contains(&msg.kind()) {
            if self.rng.chance(link.drop) {
                copies = 0;
            }
            if copies > 0 && self.rng.chance(link.duplicate) {
                copies += 1;
            }
        }
        if copies == 0 {
            self.stats.lost += 1;
            return;
        }
        self.messages += 1;
        let id = self.messages;
        for _ in 0..copies {
            let d = link.delay + extra + self.rng.upto(link.jitter);
            let ev = Ev::Deliver {
                from: from.to_string(),
                to: to.to_string(),
                generation,
                msg: msg.clone(),
                id,
                copy: false,
            };
            self.after(d, ev);
        }
    }
}

pub struct Sim {
    w: World,
    nodes: BTreeMap<String, SimNode>,
    steps: u64,
}

impl Sim {
    pub fn new(cfg: SimConfig) -> Sim {
        // The one clock read: only differences from it matter, so runs are reproducible.
        let epoch = Instant::now();
        let mut w = World {
            epoch,
            now: epoch,
            rng: Rng::new(cfg.seed),
            queue: Queue::new(),
            seq: 0,
            messages: 0,
            delivered: BTreeSet::new(),
            alive: cfg.nodes.iter().map(|n| (n.clone(), 1)).collect(),
            plans: BTreeMap::new(),
            submissions: BTreeMap::new(),
            clients: Vec::new(),
            stats: Stats::default(),
            log: Vec::new(),
            cfg,
        };
        let nodes = w
            .cfg
            .nodes
            .iter()
            .map(|n| (n.clone(), SimNode::new(n, 1, &w.cfg)))
            .collect();
        for f in w.cfg.faults.clone() {
            schedule_fault(&mut w, f);
        }
        Sim { w, nodes, steps: 0 }
    }

    /// A client submits model `model` to `node` at `at` (it plans and loads at once).
    pub fn submit(&mut self, at: Duration, node: &str, model: u64) {
        let ev = Ev::Submit {
            node: node.to_string(),
            model,
        };
        self.w.push(self.w.epoch + at, ev);
    }

    /// A client asks `node` for a run of `model` at `at`; returns the run's handle.
    pub fn run(&mut self, at: Duration, node: &str, model: u64, inputs: [i64; 2]) -> usize {
        let client = self.w.clients.len();
        self.w.clients.push(ClientRun {
            node: node.to_string(),
            model,
            inputs: inputs.to_vec(),
            at,
            id: None,
            outcome: None,
        });
        self.w.push(self.w.epoch + at, Ev::ClientRun { client });
        client
    }

    /// A client unloads `model` from `node` at `at`.
    pub fn unload(&mut self, at: Duration, node: &str, model: u64) {
        let ev = Ev::ClientUnload {
            node: node.to_string(),
            model,
        };
        self.w.push(self.w.epoch + at, ev);
    }

    /// `observer`'s membership sees `node` (its current life) alive again at `at`, whatever
    /// it believed.
    pub fn alive_again(&mut self, at: Duration, observer: &str, node: &str) {
        let generation = self.nodes[node].generation;
        let ev = Ev::Verdict {
            observer: observer.to_string(),
            node: node.to_string(),
            generation,
            down: false,
        };
        self.w.push(self.w.epoch + at, ev);
    }

    /// The client that submitted `model` to `node` goes away at `at` (its connection
    /// closes): the model is leased to it.
    pub fn disconnect(&mut self, at: Duration, node: &str, model: u64) {
        let ev = Ev::Disconnect {
            node: node.to_string(),
            owner: model,
        };
        self.w.push(self.w.epoch + at, ev);
    }

    /// Runs every event and timer up to `t` (simulated, since the start).
    pub fn run_until(&mut self, t: Duration) {
        let end = self.w.epoch + t;
        while let Some(at) = self.next_time().filter(|&at| at <= end) {
            self.steps += 1;
            assert!(self.steps < 10_000_000, "the simulation does not settle");
            self.w.now = self.w.now.max(at);
            self.step(at);
        }
        self.w.now = self.w.now.max(end);
    }

    /// The earliest queued event or due timer (a stalled node's timers wait for its end).
    fn next_time(&self) -> Option<Instant> {
        let event = self.w.queue.peek().map(|q| q.at);
        let timers = self.nodes.values().filter(|n| n.alive).filter_map(|n| {
            let t = n.poll_timeout()?;
            Some(self.w.stalled(&n.name, t).unwrap_or(t))
        });
        event.into_iter().chain(timers).min()
    }

    fn step(&mut self, at: Instant) {
        if self.w.queue.peek().is_some_and(|q| q.at <= at) {
            let q = self.w.queue.pop().expect("peeked");
            self.event(q.ev);
            return;
        }
        let due: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.alive && n.poll_timeout().is_some_and(|t| t <= at))
            .filter(|n| self.w.stalled(&n.name, at).is_none())
            .map(|n| n.name.clone())
            .collect();
        for name in due {
            let n = self.nodes.get_mut(&name).expect("listed");
            n.handle_timeout(&mut self.w);
        }
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Die { node } => return self.die(&node),
            Ev::Revive { node } => return self.revive(&node),
            _ => {}
        }
        if let Ev::Rejoin { node } = &ev {
            let node = node.clone();
            if let Some(end) = self.w.stalled(&node, self.w.now) {
                self.w.push(end, ev);
                return;
            }
            return self.rejoin(&node);
        }
        let name = match &ev {
            Ev::ClientRun { client } => self.w.clients[*client].node.clone(),
            ev => target(ev).to_string(),
        };
        // Work for a stalled node waits for the stall's end, in its order.
        if let Some(end) = self.w.stalled(&name, self.w.now) {
            self.w.push(end, ev);
            return;
        }
        let mut ev = ev;
        if let Ev::Deliver { id, copy, .. } = &mut ev {
            *copy = !self.w.delivered.insert(*id);
        }
        let Some(n) = self.nodes.get_mut(&name).filter(|n| n.alive) else {
            if let Ev::ClientRun { client } = ev {
                let e = RunError::Plan(format!("{name} is down"));
                self.w.clients[client].outcome = Some((self.w.since(), Err(e)));
            }
            return;
        };
        n.event(&mut self.w, ev);
    }

    fn die(&mut self, node: &str) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        n.alive = false;
        self.w.alive.remove(node);
        self.w.note(node, "dies".into());
        let generation = n.generation;
        self.verdicts(node, generation, true);
    }

    /// Every other node's membership says so about life `generation` of `node`: a death
    /// `detect` from now, a new life `announce` from now.
    fn verdicts(&mut self, node: &str, generation: u64, down: bool) {
        let detect = if down {
            self.w.cfg.detect
        } else {
            self.w.cfg.announce
        };
        for observer in self.w.cfg.nodes.clone() {
            if observer != node {
                let ev = Ev::Verdict {
                    observer,
                    node: node.to_string(),
                    generation,
                    down,
                };
                self.w.after(detect, ev);
            }
        }
    }

    /// `node` learns it was declared dead: a new life, which the others see come up.
    fn rejoin(&mut self, node: &str) {
        let Some(n) = self.nodes.get_mut(node).filter(|n| n.alive) else {
            return;
        };
        n.rejoin(&mut self.w);
        let generation = n.generation;
        self.w.alive.insert(node.to_string(), generation);
        self.verdicts(node, generation, false);
    }

    fn revive(&mut self, node: &str) {
        let generation = self.nodes.get(node).map_or(1, |n| n.generation + 1);
        let mut n = SimNode::new(node, generation, &self.w.cfg);
        for (other, life) in n.view.iter_mut() {
            match self.w.alive.get(other) {
                Some(&g) => life.generation = g,
                None => life.alive = other == node,
            }
        }
        self.nodes.insert(node.to_string(), n);
        self.w.alive.insert(node.to_string(), generation);
        self.w.note(node, "comes back, empty".into());
        self.verdicts(node, generation, false);
    }

    // ---- what tests look at ----

    pub fn now(&self) -> Duration {
        self.w.since()
    }

    pub fn client(&self, h: usize) -> &ClientRun {
        &self.w.clients[h]
    }

    /// How a run ended, if it did.
    pub fn outcome(&self, h: usize) -> Option<&Result<RunOutput<i64>, RunError>> {
        self.w.clients[h].outcome.as_ref().map(|(_, r)| r)
    }

    /// When a run ended, since the start.
    pub fn ended_at(&self, h: usize) -> Option<Duration> {
        self.w.clients[h].outcome.as_ref().map(|(t, _)| *t)
    }

    /// The load id a submission made live, or why it failed.
    pub fn submission(&self, model: u64) -> Option<&Result<u64, RunError>> {
        self.w.submissions.get(&model)?.result.as_ref()
    }

    /// The chain of nodes of a plan.
    pub fn plan(&self, load_id: u64) -> Option<&[String]> {
        self.w.plans.get(&load_id).map(Vec::as_slice)
    }

    /// The outputs a run on plan `load_id` must give.
    pub fn expected(&self, load_id: u64, inputs: &[i64]) -> Vec<i64> {
        let ids: i64 = self.w.plans[&load_id].iter().map(|n| self.w.id_of(n)).sum();
        vec![inputs[0] + inputs[1] + ids, inputs[0], 42]
    }

    /// Bytes reserved on `node`'s device.
    pub fn reserved(&self, node: &str) -> u64 {
        self.nodes[node].participant.reserved()[0]
    }

    /// Load ids of the fragments `node` holds.
    pub fn loaded(&self, node: &str) -> Vec<u64> {
        self.nodes[node].participant.loaded_models()
    }

    /// Run entries (early, running, aborted) on `node`.
    pub fn entries(&self, node: &str) -> usize {
        self.nodes[node].participant.entries()
    }

    /// Partial tensors on `node`.
    pub fn partial(&self, node: &str) -> usize {
        self.nodes[node].assembler.partial()
    }

    /// Runs not yet ended on `node`'s submitter.
    pub fn runs_in_flight(&self, node: &str) -> usize {
        self.nodes[node].submitter.runs_in_flight()
    }

    /// The nodes `node`'s submitter leaves out of `model`'s plans now.
    pub fn avoided(&self, node: &str, model: u64) -> BTreeSet<String> {
        let s = &self.nodes[node].submitter;
        s.avoided(model, self.w.now).unwrap_or_default()
    }

    /// Whether `node`'s submitter still has `model`.
    pub fn has_model(&self, node: &str, model: u64) -> bool {
        self.nodes[node].submitter.has_model(model)
    }

    /// The life `node` is in.
    pub fn generation(&self, node: &str) -> u64 {
        self.nodes[node].generation
    }

    pub fn stats(&self) -> &Stats {
        &self.w.stats
    }

    /// What happened, one line per notable event (print it when a test fails).
    pub fn log(&self) -> String {
        self.w.log.join("\n")
    }
}

/// The node an event is for (a client's run: see its record).
fn target(ev: &Ev) -> &str {
    match ev {
        Ev::Deliver { to, .. } => to,
        Ev::ExecDone { node, .. }
        | Ev::LoadDone { node, .. }
        | Ev::Submit { node, .. }
        | Ev::ClientUnload { node, .. }
        | Ev::Disconnect { node, .. }
        | Ev::Die { node }
        | Ev::Revive { node }
        | Ev::Rejoin { node } => node,
        Ev::Verdict { observer, .. } => observer,
        Ev::ClientRun { .. } => "",
    }
}

fn schedule_fault(w: &mut World, f: NodeFault) {
    let e = w.epoch;
    match f {
        NodeFault::Die { node, at } => w.push(e + at, Ev::Die { node }),
        NodeFault::Revive { node, at } => w.push(e + at, Ev::Revive { node }),
        NodeFault::FalseDeath {
            observer,
            node,
            start,
            end,
        } => {
            let generation = w.alive.get(&node).copied().unwrap_or(1);
            let down = Ev::Verdict {
                observer,
                node: node.clone(),
                generation,
                down: true,
            };
            w.push(e + start, down);
            w.push(e + end, Ev::Rejoin { node });
        }
        NodeFault::Stall { .. } | NodeFault::FailRuns { .. } | NodeFault::FailLoads { .. } => {}
    }
}
