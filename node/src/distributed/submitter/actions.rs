//! What the submitter's machine asks that takes time, carried out with its lock released:
//! planning a deployment, loading fragments and weights onto nodes, starting runs, taking
//! a client's weights and relaying them to the nodes that asked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use vkml_protocol::dist::run::{PlanError, RunError};
use vkml_protocol::dist::submitter::PlanId;
use vkml_protocol::{Message, pb};

use super::super::deploy::{self, DeployKey, Unplanned};
use super::super::sequences::StartPlan;
use super::super::{DistError, lock, panicked, wire};
use super::{ClusterModel, Sent, Submitter, Todo, UNLOAD_ACK};
use crate::cluster::transport;
use crate::graph::ValueId;
use crate::tensor::Tensor;

impl Submitter {
    pub(super) fn carry(self: &Arc<Self>, t: Todo) {
        match t {
            Todo::Plan {
                plan,
                model,
                key,
                avoid,
            } => {
                let me = self.clone();
                let planning = tokio::spawn(self.clone().plan(plan, model, key, avoid));
                // A planning task that panicked must still answer, or its runs would wait.
                tokio::spawn(async move {
                    if let Err(e) = planning.await {
                        let e = PlanError::Other(format!("planning failed: {e}"));
                        me.call(|st, _| st.core.plan_failed(plan, e));
                    }
                });
            }
            Todo::Load {
                load_id,
                node,
                part,
                sent,
            } => {
                let me = self.clone();
                let to = node.clone();
                let loading = tokio::spawn(async move {
                    match part.map(|p| *p) {
                        Some(((f, w), model)) => me.load_on(&to, f, w, sent, &model).await,
                        None => Err(DistError::Protocol("the fragment is gone".into())),
                    }
                });
                let me = self.clone();
                tokio::spawn(async move {
                    let r = match loading.await {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(format!("loading failed: {e}")),
                    };
                    me.call(|st, now| st.core.load_result(load_id, &node, r, now));
                    me.settled.notify_waiters();
                });
            }
            Todo::Send {
                to,
                message: Message::Unload(u),
            } if to != self.me => {
                // Acknowledged, and reported: an unload lost to a partition is sent again.
                *lock(&self.state).unacked.entry(u.model_id).or_default() += 1;
                let me = self.clone();
                tokio::spawn(async move {
                    let m = Message::Unload(u);
                    let sent = tokio::time::timeout(UNLOAD_ACK, me.link.send_acked(&to, &m)).await;
                    let Message::Unload(u) = m else { return };
                    if let Ok(Ok(Message::Inventory(inv))) = &sent {
                        me.cluster.learn_inventory(&to, inv.clone());
                    }
                    {
                        let mut st = lock(&me.state);
                        if let Some(n) = st.unacked.get_mut(&u.model_id) {
                            *n -= 1;
                            if *n == 0 {
                                st.unacked.remove(&u.model_id);
                            }
                        }
                    }
                    me.settled.notify_waiters();
                    match sent {
                        Ok(Ok(_)) => me.call(|st, _| st.core.unload_delivered(&to, u.model_id)),
                        Ok(Err(e)) => {
                            tracing::debug!(
                                "unload of {:016x} not delivered to {to}: {e}",
                                u.model_id
                            );
                            me.call(|st, now| {
                                st.core.unload_failed(&to, u.model_id, &u.reason, now)
                            })
                        }
                        Err(_) => me
                            .call(|st, now| st.core.unload_failed(&to, u.model_id, &u.reason, now)),
                    }
                });
            }
            Todo::Send { to, message } => self.link.post(&to, message),
            Todo::Start {
                node,
                load_id,
                run_id,
                inputs,
                step,
            } if node == self.me && step.as_ref().is_none_or(|s| s.fetch.is_empty()) => {
                let step = step.map(|s| s.step);
                if let Err(e) = self
                    .participant
                    .start_run(&self.me, load_id, run_id, inputs, step)
                {
                    let me = self.me.clone();
                    let why = e.to_string();
                    self.call(|st, now| st.core.start_failed(load_id, run_id, &me, &why, now));
                }
            }
            Todo::Start {
                node,
                load_id,
                run_id,
                inputs,
                step,
            } => {
                let me = self.clone();
                tokio::spawn(async move { me.start(node, load_id, run_id, inputs, step).await });
            }
        }
    }

    /// Starts run `run_id` of `load_id` on `node` (this node too, when a step's values must be
    /// fetched first) and reports a start that fails.
    async fn start(
        self: Arc<Self>,
        node: String,
        load_id: u64,
        run_id: u64,
        mut inputs: Vec<(usize, Tensor)>,
        step: Option<StartPlan>,
    ) {
        let (step, fetch) = match step {
            Some(StartPlan { step, fetch }) => (Some(step), fetch),
            None => (None, BTreeMap::new()),
        };
        // Values kept on other nodes than the one that reads them now come through here,
        // once (the plan placed their layer elsewhere).
        for (keeper, wanted) in fetch {
            let seq = step.as_ref().map_or(0, |s| s.sequence);
            match self.fetch(&keeper, seq, &wanted).await {
                Ok(values) => inputs.extend(values),
                Err(e) => {
                    let why = format!("fetching sequence values: {e}");
                    self.call(|st, now| st.core.start_failed(load_id, run_id, &keeper, &why, now));
                    return;
                }
            }
        }
        let r = if node == self.me {
            self.participant
                .start_run(&self.me, load_id, run_id, inputs, step)
        } else {
            let step = step.as_ref();
            self.link
                .start_remote(&node, load_id, run_id, inputs, step)
                .await
        };
        if let Err(e) = r {
            let why = e.to_string();
            self.call(|st, now| st.core.start_failed(load_id, run_id, &node, &why, now));
        }
    }

    /// Takes the values `keeper` keeps for inputs `wanted` of sequence `seq`.
    async fn fetch(
        &self,
        keeper: &str,
        seq: u64,
        wanted: &[usize],
    ) -> Result<Vec<(usize, Tensor)>, DistError> {
        if keeper == self.me {
            return self.participant.fetch(&self.me, seq, wanted);
        }
        self.link.fetch(keeper, seq, wanted).await
    }

    /// Plans a deployment the machine asked for, and answers it.
    async fn plan(
        self: Arc<Self>,
        plan: PlanId,
        model: Arc<ClusterModel>,
        key: DeployKey,
        avoid: BTreeSet<String>,
    ) {
        let make = || {
            let ask = deploy::Ask {
                name: &model.name,
                graph: &model.graph,
                external: &model.external,
                owner: model.id,
                resident: self.call(|st, now| st.resident_of(model.id, now)),
            };
            let (cluster, me, key, avoid) = (&self.cluster, &self.me, &key, &avoid);
            async move { deploy::make(cluster, me, &ask, key, avoid).await }
        };
        let mut made = make().await;
        // No room left beside the model's plans for other input shapes (a language model
        // makes one per sequence length), or only room enough for a far slower plan (they
        // share the weights, but each needs room for its own activations): the idle ones give
        // way, keeping their weights on the nodes a while, and it is planned again.
        if matches!(&made, Ok(m) if m.over_gross || m.cramped) {
            let evicted = self.call(|st, now| {
                let evicted = st.core.evict_idle(model.id);
                for l in &evicted {
                    if let Some((_, _, kept)) = st.resident.get_mut(l) {
                        *kept = Some(now + super::super::participant::KEEP_SHARED);
                    }
                }
                evicted
            });
            if !evicted.is_empty() {
                tracing::debug!(
                    "model {}: {} idle plan(s) unloaded to make room",
                    model.name,
                    evicted.len()
                );
                self.wait_unloaded(&evicted).await;
                made = make().await;
            }
        }
        self.call(|st, now| match made {
            Ok(made) => st.planned(plan, made, &model, now),
            Err(Unplanned::NeedsValues(more)) => {
                let e = match st.models.get_mut(&model.id) {
                    Some(e) => {
                        let before = e.value_inputs.len();
                        e.value_inputs.extend(more);
                        if e.value_inputs.len() > before {
                            PlanError::NeedsValues
                        } else {
                            let why = "planning asked again for input values it already had";
                            PlanError::Other(DistError::Unsupported(why.into()).to_string())
                        }
                    }
                    None => PlanError::Other(RunError::NoModel(model.id).to_string()),
                };
                st.core.plan_failed(plan, e);
            }
            Err(Unplanned::Failed(e)) => st.core.plan_failed(plan, e),
        });
    }

    /// Sends `node` its fragment and weights (on this node: loads it here) and waits for its
    /// answer. Weights by reference go from this node's store when it has them, else from
    /// the model's source: kept here for this node's own part, only passed on for others.
    async fn load_on(
        &self,
        node: &str,
        f: pb::Fragment,
        weights: Vec<(ValueId, Tensor)>,
        sent: Option<Arc<Sent>>,
        model: &ClusterModel,
    ) -> Result<(), DistError> {
        let count = |n: u64| {
            let part = sent.as_ref().and_then(|s| s.nodes.get()?.get(node));
            if let Some((done, _)) = part {
                done.fetch_add(n, Ordering::Relaxed);
            }
        };
        if node == self.me {
            let inline: u64 = weights.iter().map(|(_, t)| t.bytes().len() as u64).sum();
            let mut map: BTreeMap<ValueId, Tensor> = weights.into_iter().collect();
            map.extend(self.take_own(&f, model, count).await?);
            let p = self.participant.clone();
            crate::priority::heavy(move || p.load(&f, map))
                .await
                .map_err(panicked)??;
            count(inline);
            return Ok(());
        }
        let (mut send, mut recv) = self.cluster.open_bi(node).await?;
        let id = f.model_id;
        let refs: Vec<pb::WeightRange> = f
            .external
            .iter()
            .map(|r| r.range.clone().unwrap_or_default())
            .collect();
        transport::write_message(&mut send, &Message::Fragment(Box::new(f))).await?;
        for (v, t) in weights {
            let h = wire::header(&t, pb::TensorRole::Weight, id, 0, v as u64);
            wire::write_tensor(&mut send, h, t.bytes()).await?;
            count(t.bytes().len() as u64);
        }
        if !refs.is_empty() {
            let wanted = match wire::expect_message(&mut recv).await? {
                Message::WeightsWanted(w) => w.indices,
                Message::LoadAck(a) => {
                    self.learn(node, a.inventory);
                    return Err(DistError::Remote(a.reason));
                }
                other => {
                    return Err(DistError::Protocol(format!(
                        "expected the weights {node} wants, got {:?}",
                        other.kind()
                    )));
                }
            };
            let asked = picked(&refs, &wanted, node)?;
            let asked_bytes: u64 = asked.iter().map(|r| r.length).sum();
            count(refs.iter().map(|r| r.length).sum::<u64>() - asked_bytes);
            self.relay(model, &asked, &mut send, count).await?;
        }
        let _ = send.finish();
        match wire::expect_message(&mut recv).await? {
            Message::LoadAck(a) => {
                self.learn(node, a.inventory);
                if a.ok {
                    Ok(())
                } else {
                    Err(DistError::Remote(a.reason))
                }
            }
            other => Err(DistError::Protocol(format!(
                "expected a load acknowledgement, got {:?}",
                other.kind()
            ))),
        }
    }

    /// The weights by reference of this node's own fragment `f`, as tensors.
    async fn take_own(
        &self,
        f: &pb::Fragment,
        model: &ClusterModel,
        count: impl FnMut(u64),
    ) -> Result<Vec<(ValueId, Tensor)>, DistError> {
        if f.external.is_empty() {
            return Ok(Vec::new());
        }
        let ranges: Vec<pb::WeightRange> = f
            .external
            .iter()
            .map(|r| r.range.clone().unwrap_or_default())
            .collect();
        let bytes = match &model.source {
            Some(source) => source.take(&self.weights, &ranges, count).await?,
            None => return Err(no_source(&ranges)),
        };
        f.external
            .iter()
            .zip(bytes)
            .map(|(r, b)| {
                let v = r.value as usize;
                let ty = f.types.get(v).ok_or_else(|| {
                    DistError::Protocol(format!("weight for value {v}, which has no type"))
                })?;
                Ok((v, wire::tensor_of(ty, b)?))
            })
            .collect()
    }

    /// Sends `ranges` to another node on `send`, from this node's store or the model's source.
    async fn relay(
        &self,
        model: &ClusterModel,
        ranges: &[pb::WeightRange],
        send: &mut quinn::SendStream,
        count: impl FnMut(u64),
    ) -> Result<(), DistError> {
        match &model.source {
            Some(source) => source.relay(&self.weights, ranges, send, count).await,
            None if ranges.is_empty() => Ok(()),
            None => Err(no_source(ranges)),
        }
    }
}

/// The weights a participant asked for (`wanted`: increasing indices into `refs`).
fn picked(
    refs: &[pb::WeightRange],
    wanted: &[u32],
    node: &str,
) -> Result<Vec<pb::WeightRange>, DistError> {
    if wanted.windows(2).any(|w| w[0] >= w[1]) {
        return Err(DistError::Protocol(format!(
            "{node} asked for weights out of order"
        )));
    }
    wanted
        .iter()
        .map(|&i| {
            refs.get(i as usize).cloned().ok_or_else(|| {
                DistError::Protocol(format!(
                    "{node} asked for weight {i}, which was not offered"
                ))
            })
        })
        .collect()
}

/// Weights by reference without a client to serve them: cannot happen, as only a served
/// submission defers any.
fn no_source(ranges: &[pb::WeightRange]) -> DistError {
    let r = &ranges[0];
    DistError::Protocol(format!(
        "no one serves the weight at {} offset {}",
        r.location, r.offset
    ))
}
