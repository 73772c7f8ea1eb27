//! The machine's actions sorted: messages and answers done at once under the lock, the rest
//! handed back as tasks (`Todo`) for actions.rs.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use vkml_protocol::Message;
use vkml_protocol::dist::run::{PlanError, RunError};
use vkml_protocol::dist::submitter::{Action, PlanId};

use super::super::deploy::{self, DeployKey, Made, Part};
use super::{ClusterModel, Load, Sent, State, Todo, end_message};

impl State {
    /// The machine's actions: the synchronous ones done here, the rest to carry out.
    pub(super) fn drain(&mut self, now: Instant) -> Vec<Todo> {
        let mut todo = Vec::new();
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::Resolve { run, model } => {
                    let none = BTreeSet::new();
                    let values = self.models.get(&model).map_or(&none, |e| &e.value_inputs);
                    let mut key = DeployKey::of(self.core.inputs(run).unwrap_or_default(), values);
                    // A step's bound inputs stay on the nodes: their types are known here.
                    for (i, ty) in self.seqs.bound_types(run) {
                        if let Some(t) = key.types.get_mut(i) {
                            *t = ty;
                        }
                    }
                    // A plan for steps, whose nodes may keep the bindings on their GPUs.
                    key.bound = self.seqs.bindings(run);
                    self.core.resolve(run, key, now);
                }
                Action::Plan {
                    plan,
                    model,
                    key,
                    avoid,
                } => match self.models.get(&model) {
                    Some(e) => todo.push(Todo::Plan {
                        plan,
                        model: e.model.clone(),
                        key,
                        avoid,
                    }),
                    None => {
                        let e = PlanError::Other(RunError::NoModel(model).to_string());
                        self.core.plan_failed(plan, e);
                    }
                },
                Action::SendFragment { load_id, node } => {
                    let (part, sent) = self.take_part(load_id, &node);
                    todo.push(Todo::Load {
                        load_id,
                        node,
                        part: part.map(Box::new),
                        sent,
                    });
                }
                Action::Send { to, message } => {
                    if let Message::Unload(u) = &message {
                        self.seqs.unloaded(u.model_id);
                    }
                    todo.push(Todo::Send { to, message })
                }
                Action::StartRun {
                    run,
                    node,
                    load_id,
                    run_id,
                    mut inputs,
                } => {
                    tracing::trace!("run {run_id}: start for {node}");
                    let step = self.seqs.start(run, &node, load_id, &mut inputs);
                    todo.push(Todo::Start {
                        node,
                        load_id,
                        run_id,
                        inputs,
                        step,
                    });
                }
                Action::Deployed { plan, .. } => self.submitted(plan, Ok(())),
                Action::DeployFailed { plan, error, .. } => self.submitted(plan, Err(error)),
                // Live without a plan: its runs plan with their values.
                Action::Deferred { plan, .. } => self.submitted(plan, Ok(())),
                Action::RunDone { run, result } => {
                    tracing::trace!("run {run:?}: done");
                    let ran_on = result.as_ref().ok().map(|o| o.load_id);
                    if let Some((seq, nodes)) = self.seqs.finished(run, ran_on) {
                        tracing::debug!("sequence {seq:016x} ended by a failed step");
                        for to in nodes {
                            todo.push(Todo::Send {
                                to,
                                message: end_message(seq),
                            });
                        }
                    }
                    if let Some(answer) = self.runs.remove(&run) {
                        let _ = answer.send(result);
                    }
                }
                Action::Removed { model, why } => {
                    if let Some(e) = self.models.remove(&model) {
                        tracing::info!("model {} ({model:016x}) {why}", e.model.name);
                    }
                }
            }
        }
        todo
    }

    /// A deployment the machine asked for was made: it loads, if the machine still wants it.
    pub(super) fn planned(
        &mut self,
        plan: PlanId,
        made: Made,
        model: &Arc<ClusterModel>,
        now: Instant,
    ) {
        let Made {
            plan: dp,
            parts,
            placement,
            outputs,
            resident,
            ..
        } = made;
        let load_id = dp.load_id;
        self.resident.insert(load_id, (model.id, resident, None));
        self.seqs.planned(load_id, outputs);
        if !self.core.planned(plan, dp, now) {
            return;
        }
        let nodes = parts
            .iter()
            .map(|(n, (f, _))| (n.clone(), (AtomicU64::new(0), f.weight_bytes)))
            .collect();
        let sent = self.submissions.get_mut(&plan).map(|s| {
            s.placement = Some(placement);
            let _ = s.sent.nodes.set(nodes);
            s.sent.clone()
        });
        let model = model.clone();
        self.loads.insert(load_id, Load { parts, sent, model });
    }

    /// The weights of model `model` its plans hold, per GPU, and those the nodes keep of its
    /// plans that made way for others (forgetting the rest, and what models gone held).
    pub(super) fn resident_of(&mut self, model: u64, now: Instant) -> deploy::Resident {
        let (core, unacked, models) = (&self.core, &self.unacked, &self.models);
        self.resident.retain(|l, (m, _, kept)| {
            let held =
                core.has_deployment(*l) || unacked.contains_key(l) || kept.is_some_and(|t| now < t);
            held && models.contains_key(m)
        });
        let mut all = deploy::Resident::new();
        for (_, r, _) in self.resident.values().filter(|(m, ..)| *m == model) {
            for (d, values) in r {
                all.entry(d.clone()).or_default().extend(values);
            }
        }
        all
    }

    /// One node's part of a deployment and its model, taken for sending (the last one frees
    /// the entry).
    #[allow(clippy::type_complexity)]
    pub(super) fn take_part(
        &mut self,
        load_id: u64,
        node: &str,
    ) -> (Option<(Part, Arc<ClusterModel>)>, Option<Arc<Sent>>) {
        let Some(load) = self.loads.get_mut(&load_id) else {
            return (None, None);
        };
        let part = load.parts.remove(node).map(|p| (p, load.model.clone()));
        let sent = load.sent.clone();
        if load.parts.is_empty() {
            self.loads.remove(&load_id);
        }
        (part, sent)
    }

    /// The submission waiting on `plan` gets its answer.
    pub(super) fn submitted(&mut self, plan: PlanId, r: Result<(), RunError>) {
        if let Some(s) = self.submissions.remove(&plan) {
            for (done, total) in s.sent.nodes.get().into_iter().flat_map(|m| m.values()) {
                done.store(*total, Ordering::Relaxed);
            }
            let _ = s.answer.send(r.map(|()| s.placement));
        }
    }
}
