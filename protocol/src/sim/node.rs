//! One simulated node: its three machines and the driver around them, which is what the
//! node's tokio code does with each action, with the network replaced by the world's queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::net::{Ev, Wire};
use super::{NodeFault, SimConfig, Submission, World};
use crate::dist::assembly::{Assembler, AssemblyAction, Layout};
use crate::dist::deployment::{DeploymentPlan, FixedOutput};
use crate::dist::participant::{
    Arrival, DeviceBudget, FragmentInfo, LoadTicket, Participant, ParticipantAction,
    ParticipantError, RunTicket,
};
use crate::dist::run::PlanError;
use crate::dist::submitter::{Action, PlanId, Prepared, RunId, Submitter};
use crate::{Message, pb};

/// The simulated executable of one node: its place in the plan's chain.
#[derive(Debug, Clone)]
pub(crate) struct SimFragment {
    order: Vec<String>,
    pos: usize,
}

/// What a run's computation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Input(usize),
    Edge(u64),
}

/// A run's executable in flight (the node's `RunLink`).
struct Exec {
    ticket: RunTicket,
    frag: SimFragment,
    got: BTreeMap<Slot, i64>,
    scheduled: bool,
    aborted: Option<String>,
}

pub(crate) struct SimNode {
    pub name: String,
    pub generation: u64,
    pub alive: bool,
    /// Who this node's membership believes alive.
    pub view: BTreeMap<String, bool>,
    pub submitter: Submitter<(), i64>,
    pub participant: Participant<SimFragment, i64>,
    pub assembler: Assembler<Vec<u8>>,
    execs: BTreeMap<(u64, u64), Exec>,
    /// Runs that already ran here: a duplicated `Run` must not run them twice.
    ran: BTreeSet<(u64, u64)>,
    next_transfer: u64,
    clients: BTreeMap<RunId, usize>,
}

impl SimNode {
    pub fn new(name: &str, generation: u64, cfg: &SimConfig) -> SimNode {
        let device = DeviceBudget {
            name: "sim:0".into(),
            budget: cfg.budget,
        };
        SimNode {
            name: name.to_string(),
            generation,
            alive: true,
            view: cfg.nodes.iter().map(|n| (n.clone(), true)).collect(),
            submitter: Submitter::new(name.to_string(), cfg.core.clone()),
            participant: Participant::new(name.to_string(), vec![device], cfg.core.clone()),
            assembler: Assembler::new(cfg.core.clone()),
            execs: BTreeMap::new(),
            ran: BTreeSet::new(),
            next_transfer: 1,
            clients: BTreeMap::new(),
        }
    }

    fn believes_alive(&self, node: &str) -> bool {
        node == self.name || self.view.get(node).copied().unwrap_or(false)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.submitter.poll_timeout(),
            self.participant.poll_timeout(),
            self.assembler.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn handle_timeout(&mut self, w: &mut World) {
        self.submitter.handle_timeout(w.now);
        self.participant.handle_timeout(w.now);
        self.assembler.handle_timeout(w.now);
        self.pump(w);
    }

    pub fn event(&mut self, w: &mut World, ev: Ev) {
        match ev {
            Ev::Deliver {
                from,
                generation,
                msg,
                ..
            } => {
                if generation != self.generation {
                    w.stats.lost += 1;
                    return;
                }
                self.receive(w, &from, msg);
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
                order,
                ticket,
                ..
            } if generation == self.generation => {
                self.load_done(w, load_id, &submitter, order, ticket);
            }
            Ev::Submit { model, .. } => self.submit(w, model),
            Ev::ClientRun { client } => self.client_run(w, client),
            Ev::ClientUnload { model, .. } => {
                let _ = self.submitter.remove_model(model);
            }
            Ev::Verdict { node, down, .. } => return self.verdict(w, &node, down),
            _ => {}
        }
        self.pump(w);
    }

    /// `observer`'s membership changed its mind about `node`.
    pub fn verdict(&mut self, w: &mut World, node: &str, down: bool) {
        self.view.insert(node.to_string(), !down);
        if down {
            w.note(&self.name, format!("sees {node} dead"));
            self.participant.member_down(node, w.now);
            self.submitter.member_down(node, "dead", w.now);
            self.assembler.peer_down(node, "dead");
        } else {
            w.note(&self.name, format!("sees {node} alive"));
            self.submitter.member_up(node);
        }
        self.pump(w);
    }

    /// Carries out every machine's actions until none is left (one may cause another).
    fn pump(&mut self, w: &mut World) {
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
                if node == self.name {
                    let me = self.name.clone();
                    self.fragment(w, load_id, &me, order);
                } else if !self.believes_alive(&node) {
                    let e = format!("peer: {node} is not a live member");
                    self.submitter.load_result(load_id, &node, Err(e), now);
                } else {
                    let submitter = self.name.clone();
                    let m = Wire::Fragment {
                        load_id,
                        submitter,
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
            } => {
                if node == self.name {
                    let me = self.name.clone();
                    if let Err(e) = self.start(w, &me, load_id, run_id, inputs) {
                        self.submitter
                            .start_failed(load_id, run_id, &me, &e.to_string());
                    }
                } else if !self.believes_alive(&node) {
                    let e = format!("{node} is not a live member");
                    self.submitter.start_failed(load_id, run_id, &node, &e);
                } else {
                    let m = Wire::Run {
                        load_id,
                        run_id,
                        inputs,
                    };
                    w.send(&self.name, &node, m);
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
                    self.participant.run_finished(&e.ticket, Err(reason));
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
        let (plan, result) = match self.submitter.prepare(model, ()) {
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
        let dp = DeploymentPlan {
            load_id,
            nodes: nodes.into_iter().collect(),
            needs,
            fixed_outputs: vec![(1, FixedOutput::Input(0)), (2, FixedOutput::Const(42))],
            n_outputs: 3,
        };
        self.submitter.planned(plan, dp);
    }

    fn receive(&mut self, w: &mut World, from: &str, msg: Wire) {
        match msg {
            Wire::Fragment {
                load_id,
                submitter,
                order,
            } => self.fragment(w, load_id, &submitter, order),
            Wire::LoadAck { load_id, result } => {
                self.submitter.load_result(load_id, from, result, w.now);
            }
            Wire::Run {
                load_id,
                run_id,
                inputs,
            } => {
                let _ = self.start(w, from, load_id, run_id, inputs);
            }
            Wire::Control(m) => self.control(w, from, m),
            Wire::Stripe { header, bytes } => self.stripe(w, from, &header, &bytes),
        }
    }

    /// A fragment to load: its memory is reserved now, its executable is built later.
    fn fragment(&mut self, w: &mut World, load_id: u64, submitter: &str, order: Vec<String>) {
        match self.participant.reserve(&[(0, w.cfg.charge)]) {
            Err(e) => self.ack(w, submitter, load_id, Err(e.to_string())),
            Ok(ticket) => {
                let ev = Ev::LoadDone {
                    node: self.name.clone(),
                    generation: self.generation,
                    load_id,
                    submitter: submitter.to_string(),
                    order,
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
        order: Vec<String>,
        ticket: LoadTicket,
    ) {
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
        let info = FragmentInfo {
            submitter: submitter.to_string(),
            nodes: order.iter().cloned().collect(),
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
        self.participant.run_ready(&ticket);
        self.maybe_schedule(w, key);
        Ok(())
    }

    /// Computes once every value the node's part reads is in.
    fn maybe_schedule(&mut self, w: &mut World, key: (u64, u64)) {
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
        if let Some(reason) = e.aborted {
            return self.participant.run_finished(&e.ticket, Err(reason));
        }
        let failing = w.cfg.faults.iter().any(|f| match f {
            NodeFault::FailRuns { node, start, end } => {
                *node == self.name && w.in_window(*start, *end)
            }
            _ => false,
        });
        if failing {
            let why = format!("a kernel failed on {}", self.name);
            return self.participant.run_finished(&e.ticket, Err(why));
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
        self.participant.run_finished(&e.ticket, Ok(()));
    }

    /// A value out, as `cfg.stripes` stripes of 8 bytes (each the value).
    fn send_value(
        &mut self,
        w: &mut World,
        t: &RunTicket,
        role: pb::TensorRole,
        edge: u64,
        value: i64,
        to: &str,
    ) {
        if to == self.name {
            // In process, as the node's link does for itself.
            return self.route(w, to, role, t.model, t.run, edge, value);
        }
        if !self.believes_alive(to) {
            let why = format!("{to} is not a live member");
            if role == pb::TensorRole::Edge {
                self.participant
                    .value_send_failed(&t.submitter, t.model, t.run, to, &why);
            } else {
                w.note(&self.name, format!("cannot send an output to {to}: {why}"));
            }
            return;
        }
        let stripes = w.cfg.stripes.max(1);
        let total = 8 * u64::from(stripes);
        let transfer = self.next_transfer;
        self.next_transfer += 1;
        for i in 0..stripes {
            let mut h = pb::TensorHeader {
                run_id: t.run,
                edge_id: edge,
                dtype: "int64".into(),
                shape: vec![u64::from(stripes)],
                payload_bytes: 8,
                model_id: t.model,
                role: role as i32,
                ..Default::default()
            };
            if stripes > 1 {
                h.stripe_offset = 8 * u64::from(i);
                h.total_bytes = total;
                h.stripes = stripes;
                h.transfer = transfer;
            }
            let bytes = value.to_le_bytes().to_vec();
            w.send(&self.name, to, Wire::Stripe { header: h, bytes });
        }
    }

    fn stripe(&mut self, w: &mut World, from: &str, h: &pb::TensorHeader, bytes: &[u8]) {
        let now = w.now;
        let alloc = |l: &Layout| {
            Ok((0..l.stripes)
                .map(|i| Vec::with_capacity(l.len_of(i) as usize))
                .collect())
        };
        let mut claim = match self.assembler.claim(from, h, now, alloc) {
            Ok(c) => c,
            Err(e) => {
                w.note(&self.name, format!("refuses a stripe from {from}: {e}"));
                w.stats.refused.push(e.to_string());
                return;
            }
        };
        if bytes.len() != claim.len {
            self.assembler.abandon(claim, "the stream ended early", now);
            return;
        }
        claim.piece.extend_from_slice(bytes);
        let whole = match self.assembler.complete(claim, now) {
            Ok(Some(whole)) => whole,
            Ok(None) => return,
            Err(e) => return w.stats.refused.push(e.to_string()),
        };
        let data = whole.pieces.concat();
        let copies: Vec<&[u8]> = data.chunks(8).collect();
        let Some(first) = copies.first().filter(|c| c.len() == 8) else {
            return;
        };
        assert!(
            copies.iter().all(|c| c == first),
            "a value reassembled wrong"
        );
        let value = i64::from_le_bytes((*first).try_into().expect("8 bytes"));
        let h = &whole.header;
        self.route(w, from, h.role(), h.model_id, h.run_id, h.edge_id, value);
    }

    /// A whole value arrived: an edge for a run here, or an output of a run submitted here.
    #[allow(clippy::too_many_arguments)]
    fn route(
        &mut self,
        w: &mut World,
        from: &str,
        role: pb::TensorRole,
        model: u64,
        run: u64,
        edge: u64,
        value: i64,
    ) {
        match role {
            pb::TensorRole::Edge => match self.participant.arrive(model, run, edge, value, w.now) {
                Arrival::Delivered => {}
                Arrival::Early => w.stats.early += 1,
                Arrival::Aborted => {
                    w.stats.stragglers += 1;
                    w.note(
                        &self.name,
                        format!("drops a straggler of run {run} from {from}"),
                    );
                }
                Arrival::UnknownModel => w.stats.unknown_model += 1,
            },
            pb::TensorRole::Output => self.submitter.output(model, run, edge as usize, value),
            _ => {}
        }
    }

    fn send_control(&mut self, w: &mut World, to: &str, m: Message) {
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
                // To the submitter of that run, or to a participant being told to give up.
                self.submitter.run_failed(from, &r);
                self.participant
                    .abort(r.model_id, r.run_id, &r.reason, w.now);
            }
            Message::Unload(u) => self.participant.unload(u.model_id, &u.reason, w.now),
            _ => {}
        }
    }
}
