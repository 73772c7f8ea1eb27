//! One simulated node: its three machines and the driver around them, which is what the
//! node's tokio code does with each action, with the network replaced by the world's queue.
//! Values between nodes (stripes, their acknowledgements, reassembly): `values.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::net::{Ev, Wire};
use super::values::Pending;
use super::{NodeFault, SimConfig, Submission, World};
use crate::dist::assembly::{Assembler, AssemblyAction};
use crate::dist::deployment::{DeploymentPlan, FixedOutput};
use crate::dist::participant::{
    DeviceBudget, FragmentInfo, LoadTicket, Participant, ParticipantAction, ParticipantError,
    RunTicket,
};
use crate::dist::run::PlanError;
use crate::dist::submitter::{Action, PlanId, Prepared, RunId, Submitter};
use crate::{Message, pb};

/// The simulated executable of one node: its place in the plan's chain.
#[derive(Debug, Clone)]
pub(crate) struct SimFragment {
    pub order: Vec<String>,
    pub pos: usize,
}

/// What a run's computation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Slot {
    Input(usize),
    Edge(u64),
}

/// A run's executable in flight (the node's `RunLink`).
pub(crate) struct Exec {
    pub ticket: RunTicket,
    pub frag: SimFragment,
    pub got: BTreeMap<Slot, i64>,
    pub scheduled: bool,
    pub aborted: Option<String>,
}

/// What this node's membership believes of a node: the life it knows, and whether alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life {
    pub generation: u64,
    pub alive: bool,
}

pub(crate) struct SimNode {
    pub name: String,
    pub generation: u64,
    pub alive: bool,
    /// Who this node's membership believes alive, in which life.
    pub view: BTreeMap<String, Life>,
    pub submitter: Submitter<(), i64>,
    pub participant: Participant<SimFragment, i64>,
    pub assembler: Assembler<Vec<u8>>,
    pub execs: BTreeMap<(u64, u64), Exec>,
    /// Runs that already ran here: a duplicated `Run` must not run them twice.
    pub ran: BTreeSet<(u64, u64)>,
    pub next_transfer: u64,
    /// Values sent and not yet acknowledged, by transfer.
    pub sends: BTreeMap<u64, Pending>,
    /// Run starts sent and not yet acknowledged: (load id, run id, node) to when.
    pub starts: BTreeMap<(u64, u64, String), Instant>,
    pub ack_timeout: std::time::Duration,
    clients: BTreeMap<RunId, usize>,
}

impl SimNode {
    pub fn new(name: &str, generation: u64, cfg: &SimConfig) -> SimNode {
        let device = DeviceBudget {
            name: "sim:0".into(),
            budget: cfg.budget,
        };
        let life = Life {
            generation: 1,
            alive: true,
        };
        SimNode {
            name: name.to_string(),
            generation,
            alive: true,
            view: cfg.nodes.iter().map(|n| (n.clone(), life)).collect(),
            submitter: Submitter::new(name.to_string(), cfg.core.clone()),
            participant: Participant::new(name.to_string(), vec![device], cfg.core.clone()),
            assembler: Assembler::new(cfg.core.clone()),
            execs: BTreeMap::new(),
            ran: BTreeSet::new(),
            next_transfer: 1,
            sends: BTreeMap::new(),
            starts: BTreeMap::new(),
            ack_timeout: cfg.ack_timeout,
            clients: BTreeMap::new(),
        }
    }

    pub fn believes_alive(&self, node: &str) -> bool {
        node == self.name || self.view.get(node).is_some_and(|l| l.alive)
    }

    fn life_of(&self, node: &str) -> u64 {
        if node == self.name {
            return self.generation;
        }
        self.view.get(node).map_or(0, |l| l.generation)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.submitter.poll_timeout(),
            self.participant.poll_timeout(),
            self.assembler.poll_timeout(),
            self.sends_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn handle_timeout(&mut self, w: &mut World) {
        self.submitter.handle_timeout(w.now);
        self.participant.handle_timeout(w.now);
        self.assembler.handle_timeout(w.now);
        self.sends_handle_timeout(w);
        self.pump(w);
    }

    pub fn event(&mut self, w: &mut World, ev: Ev) {
        match ev {
            Ev::Deliver {
                from,
                generation,
                msg,
                copy,
                ..
            } => {
                if generation != self.generation {
                    w.stats.lost += 1;
                    return;
                }
                self.receive(w, &from, msg, copy);
            }
            Ev::ExecDone {
                generation,
                load_id,
                run_id,
                ..
            } if generation == self.generation => self.exec_done(w, load_id, run_id),
            Ev::LoadDone {
                generation,
                load_id,
                submitter,
                info,
                ticket,
                ..
            } if generation == self.generation => {
                self.load_done(w, load_id, &submitter, *info, ticket);
            }
            Ev::Submit { model, .. } => self.submit(w, model),
            Ev::ClientRun { client } => self.client_run(w, client),
            Ev::ClientUnload { model, .. } => {
                let _ = self.submitter.remove_model(model);
            }
            Ev::Disconnect { owner, .. } => self.submitter.owner_gone(owner, w.now),
            Ev::Verdict {
                node,
                generation,
                down,
                ..
            } => return self.verdict(w, &node, generation, down),
            _ => {}
        }
        self.pump(w);
    }

    /// This node's membership changed its mind about life `generation` of `node`. News
    /// about an older life than the one it knows changes nothing, as in the node's view.
    pub fn verdict(&mut self, w: &mut World, node: &str, generation: u64, down: bool) {
        let known = self.view.get(node).copied();
        let now = w.now;
        if down {
            if known.is_some_and(|l| l.generation > generation || !l.alive) {
                return;
            }
            self.view.insert(
                node.to_string(),
                Life {
                    generation,
                    alive: false,
                },
            );
            w.note(&self.name, format!("sees {node} dead"));
            self.participant.member_down(node, generation, now);
            self.submitter.member_down(node, generation, "dead", now);
            self.assembler.peer_down(node, "dead", now);
            self.peer_down(w, node);
        } else {
            if known.is_some_and(|l| {
                l.generation > generation || (l.generation == generation && l.alive)
            }) {
                return;
            }
            self.view.insert(
                node.to_string(),
                Life {
                    generation,
                    alive: true,
                },
            );
            w.note(&self.name, format!("sees {node} alive (life {generation})"));
            self.participant.member_up(node, generation, now);
            self.submitter.member_up(node, generation, now);
        }
        self.pump(w);
    }

    /// This node learns it had been declared dead: it renews its life and drops what the
    /// others gave up.
    pub fn rejoin(&mut self, w: &mut World) {
        self.generation += 1;
        w.note(
            &self.name,
            format!(
                "learns it was declared dead; rejoins as life {}",
                self.generation
            ),
        );
        self.participant.rejoined(w.now);
        self.submitter.rejoined(w.now);
        self.pump(w);
    }

    /// Carries out every machine's actions until none is left (one may cause another).
    pub fn pump(&mut self, w: &mut World) {
        loop {
            let mut busy = false;
            while let Some(a) = self.submitter.poll_action() {
                busy = true;
                self.on_submitter(w, a);
            }
            while let Some(a) = self.participant.poll_action() {
                busy = true;
                self.on_participant(w, a);
            }
            while let Some(a) = self.assembler.poll_action() {
                busy = true;
                let AssemblyAction::Dropped { key, why, .. } = a;
                w.stats.partial_dropped.push(why.clone());
                w.note(
                    &self.name,
                    format!("drops a partial tensor from {}: {why}", key.peer),
                );
                self.value_lost(w, &key, &why);
            }
            if !busy {
                return;
            }
        }
    }

    fn on_submitter(&mut self, w: &mut World, a: Action<(), i64>) {
        let now = w.now;
        match a {
            Action::Resolve { run, .. } => self.submitter.resolve(run, (), now),
            Action::Plan { plan, avoid, .. } => self.plan(w, plan, &avoid),
            Action::SendFragment { load_id, node } => {
                let order = w.plans[&load_id].clone();
                let mut lives: BTreeMap<String, u64> =
                    order.iter().map(|n| (n.clone(), self.life_of(n))).collect();
                lives.insert(self.name.clone(), self.generation);
                let info = FragmentInfo {
                    submitter: self.name.clone(),
                    nodes: order.iter().cloned().collect(),
                    lives,
                };
                if node == self.name {
                    self.fragment(w, load_id, info, order);
                } else if !self.believes_alive(&node) {
                    let e = format!("peer: {node} is not a live member");
                    self.submitter.load_result(load_id, &node, Err(e), now);
                } else {
                    let m = Wire::Fragment {
                        load_id,
                        info,
                        order,
                    };
                    w.send(&self.name, &node, m);
                }
            }
            Action::Send { to, message } => self.send_control(w, &to, message),
            Action::StartRun {
                node,
                load_id,
                run_id,
                inputs,
                ..
            } => {
                if node == self.name {
                    let me = self.name.clone();
                    if let Err(e) = self.start(w, &me, load_id, run_id, inputs) {
                        let e = e.to_string();
                        self.submitter.start_failed(load_id, run_id, &me, &e, now);
                    }
                } else if !self.believes_alive(&node) {
                    let e = format!("{node} is not a live member");
                    self.submitter.start_failed(load_id, run_id, &node, &e, now);
                } else {
                    let m = Wire::Run {
                        load_id,
                        run_id,
                        inputs,
                    };
                    self.start_remote(w, &node, m);
                }
            }
            Action::Deployed {
                plan,
                model,
                load_id,
            } => {
                self.submission(w, plan, model, Ok(load_id));
            }
            // The simulated planner never depends on input values.
            Action::Deferred { .. } => {}
            Action::DeployFailed { plan, model, error } => {
                w.note(&self.name, format!("deployment failed: {error}"));
                self.submission(w, plan, model, Err(error));
            }
            Action::RunDone { run, result } => {
                if let Some(client) = self.clients.remove(&run) {
                    let what = match &result {
                        Ok(o) => format!("{:?}", o.outputs),
                        Err(e) => e.to_string(),
                    };
                    w.note(&self.name, format!("client run {client} ends: {what}"));
                    w.clients[client].outcome = Some((w.since(), result));
                }
            }
            Action::Removed { model, why } => {
                w.note(&self.name, format!("model {model} {why}"));
            }
        }
    }

    fn on_participant(&mut self, w: &mut World, a: ParticipantAction<i64>) {
        match a {
            ParticipantAction::Send { to, message } => self.send_control(w, &to, message),
            ParticipantAction::Deliver {
                model,
                run,
                value,
                data,
            } => {
                if let Some(e) = self.execs.get_mut(&(model, run)) {
                    e.got.insert(Slot::Edge(value), data);
                    self.maybe_schedule(w, (model, run));
                }
            }
            ParticipantAction::AbortRun { model, run, reason } => {
                let Some(e) = self.execs.get_mut(&(model, run)) else {
                    return;
                };
                w.note(&self.name, format!("aborts run {run}: {reason}"));
                e.aborted = Some(reason.clone());
                if !e.scheduled {
                    let e = self.execs.remove(&(model, run)).expect("found above");
                    self.ran.insert((model, run));
                    self.participant.run_finished(&e.ticket, Err(reason), w.now);
                }
            }
            ParticipantAction::Unloaded { model, reason, .. } => {
                w.stats.unloaded += 1;
                w.note(&self.name, format!("unloads {model:016x}: {reason}"));
            }
        }
    }

    /// A client's submission waits on `plan`.
    fn submission(
        &mut self,
        w: &mut World,
        plan: PlanId,
        model: u64,
        r: Result<u64, super::RunError>,
    ) {
        let Some(s) = w.submissions.get_mut(&model) else {
            return;
        };
        if s.node != self.name || s.plan != Some(plan) || s.result.is_some() {
            return;
        }
        if r.is_err() {
            // The model never became live: the client gets the error and no id.
            let _ = self.submitter.remove_model(model);
        }
        s.result = Some(r);
    }

    fn submit(&mut self, w: &mut World, model: u64) {
        self.submitter.add_model(model);
        // Each submission is its own client: the owner is the model.
        let _ = self.submitter.lease(model, model);
        let (plan, result) = match self.submitter.prepare(model, (), w.now) {
            Ok(Prepared::Live(l)) => (None, Some(Ok(l))),
            Ok(Prepared::Pending(p)) => (Some(p), None),
            Err(e) => (None, Some(Err(e))),
        };
        let s = Submission {
            node: self.name.clone(),
            plan,
            result,
        };
        w.submissions.insert(model, s);
    }

    fn client_run(&mut self, w: &mut World, client: usize) {
        let c = &w.clients[client];
        match self.submitter.run(c.model, c.inputs.clone()) {
            Ok(id) => {
                self.clients.insert(id, client);
                w.clients[client].id = Some(id);
            }
            Err(e) => w.clients[client].outcome = Some((w.since(), Err(e))),
        }
    }

    /// The simulated planner: a chain of the nodes this one believes alive, in name order,
    /// without those to avoid.
    fn plan(&mut self, w: &mut World, plan: PlanId, avoid: &BTreeSet<String>) {
        let nodes: Vec<String> = w
            .cfg
            .nodes
            .iter()
            .filter(|n| self.believes_alive(n) && !avoid.contains(*n))
            .take(w.cfg.plan_width)
            .cloned()
            .collect();
        let min = w.cfg.min_nodes.max(1);
        if nodes.len() < min {
            let why = format!("{} node(s) can take the model, it needs {min}", nodes.len());
            self.submitter.plan_failed(plan, PlanError::Placement(why));
            return;
        }
        let load_id = w.rng.next_u64();
        let mut needs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        needs.entry(nodes[0].clone()).or_default().push(0);
        needs
            .entry(nodes[nodes.len() - 1].clone())
            .or_default()
            .push(1);
        w.plans.insert(load_id, nodes.clone());
        w.note(&self.name, format!("plans {load_id:016x} over {nodes:?}"));
        let lives = nodes.iter().map(|n| (n.clone(), self.life_of(n))).collect();
        let reserves = nodes.iter().map(|n| (n.clone(), w.cfg.charge)).collect();
        let dp = DeploymentPlan {
            load_id,
            nodes: nodes.into_iter().collect(),
            needs,
            fixed_outputs: vec![(1, FixedOutput::Input(0)), (2, FixedOutput::Const(42))],
            n_outputs: 3,
            lives,
            reserves,
        };
        self.submitter.planned(plan, dp, w.now);
    }

    fn receive(&mut self, w: &mut World, from: &str, msg: Wire, copy: bool) {
        match msg {
            Wire::Fragment {
                load_id,
                info,
                order,
            } => self.fragment(w, load_id, info, order),
            Wire::LoadAck { load_id, result } => {
                self.submitter.load_result(load_id, from, result, w.now);
            }
            Wire::Run {
                load_id,
                run_id,
                inputs,
            } => {
                if !copy {
                    w.send(&self.name, from, Wire::RunAck { load_id, run_id });
                }
                let _ = self.start(w, from, load_id, run_id, inputs);
            }
            Wire::RunAck { load_id, run_id } => self.run_acked(from, load_id, run_id),
            Wire::Control(m) => self.control(w, from, m),
            Wire::Stripe {
                header,
                bytes,
                transfer,
            } => {
                let answer = (!copy).then_some(transfer);
                self.stripe(w, from, &header, &bytes, answer);
            }
            Wire::StripeAck { transfer, result } => self.acked(w, transfer, result),
        }
    }

    /// A fragment to load: its memory is reserved now, its executable is built later.
    fn fragment(&mut self, w: &mut World, load_id: u64, info: FragmentInfo, order: Vec<String>) {
        let submitter = info.submitter.clone();
        match self.participant.reserve(&[(0, w.cfg.charge)]) {
            Err(e) => self.ack(w, &submitter, load_id, Err(e.to_string())),
            Ok(ticket) => {
                let ev = Ev::LoadDone {
                    node: self.name.clone(),
                    generation: self.generation,
                    load_id,
                    submitter,
                    info: Box::new((info, order)),
                    ticket,
                };
                w.after(w.cfg.load_time, ev);
            }
        }
    }

    fn load_done(
        &mut self,
        w: &mut World,
        load_id: u64,
        submitter: &str,
        info: (FragmentInfo, Vec<String>),
        ticket: LoadTicket,
    ) {
        let (info, order) = info;
        let failing = w.cfg.faults.iter().any(|f| match f {
            NodeFault::FailLoads { node, start, end } => {
                *node == self.name && w.in_window(*start, *end)
            }
            _ => false,
        });
        let pos = order.iter().position(|n| *n == self.name);
        let Some(pos) = pos.filter(|_| !failing) else {
            self.participant.load_failed(ticket);
            let e = format!("cannot build the executable on {}", self.name);
            return self.ack(w, submitter, load_id, Err(e));
        };
        let frag = SimFragment { order, pos };
        self.participant.loaded(ticket, load_id, info, frag);
        self.ack(w, submitter, load_id, Ok(()));
    }

    fn ack(&mut self, w: &mut World, submitter: &str, load_id: u64, result: Result<(), String>) {
        if submitter == self.name {
            let me = self.name.clone();
            self.submitter.load_result(load_id, &me, result, w.now);
        } else {
            w.send(&self.name, submitter, Wire::LoadAck { load_id, result });
        }
    }

    /// A run's start (from its submitter, maybe this node).
    fn start(
        &mut self,
        w: &mut World,
        from: &str,
        load_id: u64,
        run_id: u64,
        inputs: Vec<(usize, i64)>,
    ) -> Result<(), ParticipantError> {
        let key = (load_id, run_id);
        if self.execs.contains_key(&key) || self.ran.contains(&key) {
            return Ok(());
        }
        let ticket = self.participant.start_run(from, load_id, run_id)?;
        let frag = self
            .participant
            .fragment(load_id)
            .cloned()
            .expect("started, so loaded");
        let got = inputs
            .into_iter()
            .map(|(i, v)| (Slot::Input(i), v))
            .collect();
        let exec = Exec {
            ticket: ticket.clone(),
            frag,
            got,
            scheduled: false,
            aborted: None,
        };
        self.execs.insert(key, exec);
        self.participant.run_ready(&ticket, w.now);
        self.maybe_schedule(w, key);
        Ok(())
    }

    /// Computes once every value the node's part reads is in.
    pub fn maybe_schedule(&mut self, w: &mut World, key: (u64, u64)) {
        let Some(e) = self.execs.get_mut(&key) else {
            return;
        };
        let (k, len) = (e.frag.pos, e.frag.order.len());
        let mut needs = Vec::new();
        needs.push(if k == 0 {
            Slot::Input(0)
        } else {
            Slot::Edge(k as u64 - 1)
        });
        if k + 1 == len {
            needs.push(Slot::Input(1));
        }
        if e.scheduled || e.aborted.is_some() || !needs.iter().all(|s| e.got.contains_key(s)) {
            return;
        }
        e.scheduled = true;
        let ev = Ev::ExecDone {
            node: self.name.clone(),
            generation: self.generation,
            load_id: key.0,
            run_id: key.1,
        };
        w.after(w.cfg.exec_time, ev);
    }

    fn exec_done(&mut self, w: &mut World, load_id: u64, run_id: u64) {
        let Some(e) = self.execs.remove(&(load_id, run_id)) else {
            return;
        };
        self.ran.insert((load_id, run_id));
        let now = w.now;
        if let Some(reason) = e.aborted {
            return self.participant.run_finished(&e.ticket, Err(reason), now);
        }
        let failing = w.cfg.faults.iter().any(|f| match f {
            NodeFault::FailRuns { node, start, end } => {
                *node == self.name && w.in_window(*start, *end)
            }
            _ => false,
        });
        if failing {
            let why = format!("a kernel failed on {}", self.name);
            return self.participant.run_finished(&e.ticket, Err(why), now);
        }
        let value = e.got.values().sum::<i64>() + w.id_of(&self.name);
        let (k, order) = (e.frag.pos, &e.frag.order);
        if k + 1 < order.len() {
            let next = order[k + 1].clone();
            self.send_value(w, &e.ticket, pb::TensorRole::Edge, k as u64, value, &next);
        } else {
            let to = e.ticket.submitter.clone();
            self.send_value(w, &e.ticket, pb::TensorRole::Output, 0, value, &to);
        }
        self.participant.run_finished(&e.ticket, Ok(()), now);
    }

    pub fn send_control(&mut self, w: &mut World, to: &str, m: Message) {
        if to == self.name {
            let me = self.name.clone();
            self.control(w, &me, m);
        } else if self.believes_alive(to) {
            w.send(&self.name, to, Wire::Control(m));
        } else {
            w.stats.lost += 1;
        }
    }

    /// A control message, as the node's `message_from` handles it.
    fn control(&mut self, w: &mut World, from: &str, m: Message) {
        match m {
            Message::RunFailed(r) => {
                // To the submitter of that run, or to a participant: given up, or a peer's
                // report to pass on.
                self.submitter.run_failed(from, &r, w.now);
                self.participant.run_failed(from, &r, w.now);
            }
            Message::Unload(u) => self.participant.unload(u.model_id, &u.reason, w.now),
            _ => {}
        }
    }
}
