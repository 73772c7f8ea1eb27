//! The submitting node's side: the driver of `vkml_protocol::dist::submitter`, which decides
//! deployments (one per deployment key), runs, failure attribution, the one retry and the
//! deadline. This file carries the machine's actions out: planning ([`deploy`]), fragments
//! and weights to their nodes, run starts, control messages, and the answers to clients.
//!
//! The submitter relays nothing between participants: values cross straight from the node
//! that makes them to the nodes that read them, and outputs come back here.
//!
//! Here: the node's and clients' calls into the machine; `actions.rs` carries out what the
//! machine asks that takes time (planning, loading, starting runs, fetching weights);
//! `state.rs` turns the machine's actions into those tasks, doing the quick ones at once.

mod actions;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use vkml_protocol::dist::run::{RunError, RunOutput};
use vkml_protocol::dist::submitter::{self as core, PlanId, Prepared, RunId};
use vkml_protocol::{Message, pb};

use super::alarm::Alarm;
use super::deploy::{self, DeployKey, External, Part};
use super::link::Link;
use super::participant::Participant;
use super::placement::static_types;
use super::sequences::{Sequences, StartPlan};
use super::source::WeightSource;
use super::weights::WeightStore;
use super::{DistError, lock, panicked};
use crate::cluster::Cluster;
use crate::graph::{Graph, ValueId};
use crate::model::ValueDef;
use crate::tensor::Tensor;

/// How long an `Unload` may take to be acknowledged before it counts as lost and is sent
/// again (a live peer answers in milliseconds).
const UNLOAD_ACK: Duration = Duration::from_secs(5);

/// How long a client's unload waits for the nodes to confirm they let the model's memory go
/// (a load right after then plans against free memory); one not confirmed by then is sent
/// again in the background.
const UNLOAD_WAIT: Duration = Duration::from_secs(2);

/// A model submitted to this node, under the id its client uses.
pub struct ClusterModel {
    pub id: u64,
    pub name: String,
    graph: Arc<Graph>,
    /// Its weights that travel by reference (initializers in external data, deferred).
    external: External,
    /// Who serves the bytes of `external` that no node has: the client that submitted it.
    source: Option<WeightSource>,
}

/// What a client sent with a model's bytes: every external weight it offers, those of them
/// it sent already, and whether it serves the rest on request.
pub struct Offered {
    pub ranges: Vec<pb::WeightRange>,
    pub received: Received,
    pub source: Option<WeightSource>,
}

/// Progress of a load, for the client's progress bar.
pub type Progress = mpsc::UnboundedSender<pb::LoadProgress>;

/// Weight bytes a submission's load has sent to each node, of how many (known once planned).
#[derive(Default)]
struct Sent {
    /// Per node of the plan: bytes sent (or found there already) of its part's total.
    nodes: OnceLock<BTreeMap<String, (AtomicU64, u64)>>,
}

struct Entry {
    model: Arc<ClusterModel>,
    /// Inputs whose values the model's plans depend on: part of every run's key.
    value_inputs: BTreeSet<usize>,
    /// Who loaded it (the client connection it is leased to), for `status`.
    owner: String,
}

/// The client connection a model is leased to: its id, and how `status` names it.
#[derive(Debug, Clone)]
pub struct Owner {
    pub id: u64,
    pub name: String,
    /// Set once the connection has closed, before the machine hears of it: a submission
    /// still being read when it closed leases its model to an owner already gone, whose
    /// `owner_gone` found nothing to unload, so the lease must start its grace itself.
    pub gone: Arc<std::sync::atomic::AtomicBool>,
}

type Answer<T> = oneshot::Sender<Result<T, RunError>>;

/// A client's submission waiting for its first deployment.
struct Submission {
    answer: Answer<Option<pb::Placement>>,
    sent: Arc<Sent>,
    placement: Option<pb::Placement>,
}

/// A deployment's parts not yet handed to their sends, and the model they are of.
struct Load {
    parts: BTreeMap<String, Part>,
    sent: Option<Arc<Sent>>,
    model: Arc<ClusterModel>,
}

/// The machine and what the driver keeps beside it, under one lock.
struct State {
    core: core::Submitter<DeployKey, Tensor>,
    models: BTreeMap<u64, Entry>,
    runs: BTreeMap<RunId, Answer<RunOutput<Tensor>>>,
    submissions: BTreeMap<PlanId, Submission>,
    loads: BTreeMap<u64, Load>,
    /// Unloads sent to other nodes and not yet answered, by plan.
    unacked: BTreeMap<u64, usize>,
    /// Clients' sequences: where each keeps its bound values.
    seqs: Sequences,
    /// Per plan (load id): its model, the model's weights it holds on each GPU, and, once it
    /// made way for another plan of its model, until when the nodes keep them.
    resident: BTreeMap<u64, (u64, deploy::Resident, Option<Instant>)>,
}

/// An action to carry out once the lock is released.
enum Todo {
    Plan {
        plan: PlanId,
        model: Arc<ClusterModel>,
        key: DeployKey,
        avoid: BTreeSet<String>,
    },
    Load {
        load_id: u64,
        node: String,
        // Boxed: a fragment is far larger than the other variants.
        part: Option<Box<(Part, Arc<ClusterModel>)>>,
        sent: Option<Arc<Sent>>,
    },
    Send {
        to: String,
        message: Message,
    },
    Start {
        node: String,
        load_id: u64,
        run_id: u64,
        inputs: Vec<(usize, Tensor)>,
        /// For a step of a sequence: what the node takes, keeps and needs fetched.
        step: Option<StartPlan>,
    },
}

pub struct Submitter {
    me: String,
    cluster: Cluster,
    link: Arc<Link>,
    participant: Arc<Participant>,
    /// This node's weights: its own parts' come from here when they are here.
    weights: Arc<WeightStore>,
    state: Mutex<State>,
    alarm: Alarm,
    /// Woken when an unload is answered or a load settles (a client's unload waits on it).
    settled: tokio::sync::Notify,
}

impl Submitter {
    pub fn new(
        cluster: Cluster,
        link: Arc<Link>,
        participant: Arc<Participant>,
        weights: Arc<WeightStore>,
    ) -> Submitter {
        let me = cluster.name().to_string();
        let state = State {
            core: core::Submitter::new(me.clone(), cluster.dist_config()),
            models: BTreeMap::new(),
            runs: BTreeMap::new(),
            submissions: BTreeMap::new(),
            loads: BTreeMap::new(),
            unacked: BTreeMap::new(),
            // Twice the nodes' idle time: a step after they freed its values fails there,
            // saying why, rather than here as the first step of an unknown sequence.
            seqs: Sequences::new(cluster.dist_config().sequence_idle * 2),
            resident: BTreeMap::new(),
        };
        Submitter {
            me,
            cluster,
            link,
            participant,
            weights,
            state: Mutex::new(state),
            alarm: Alarm::default(),
            settled: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn alarm(&self) -> &Alarm {
        &self.alarm
    }

    pub fn model(&self, id: u64) -> Result<Arc<ClusterModel>, DistError> {
        lock(&self.state)
            .models
            .get(&id)
            .map(|e| e.model.clone())
            .ok_or(DistError::NoModel(id))
    }

    /// Loads a model file's bytes: plans it now when its input shapes are fixed (so a model
    /// that does not fit fails here), otherwise at its first run. A model with an `owner`
    /// is unloaded once the owner is gone (`owner_gone`). External weights not among those
    /// `offered` sent are deferred: each node's part is taken from its `source` as it loads.
    pub async fn submit(
        self: &Arc<Self>,
        name: String,
        data: Bytes,
        offered: Offered,
        progress: Progress,
        owner: Option<Owner>,
    ) -> Result<(Arc<ClusterModel>, Option<pb::Placement>), DistError> {
        let Offered {
            ranges,
            received,
            source,
        } = offered;
        let defer = source.is_some();
        let (graph, external) =
            crate::priority::heavy(move || decode(data, received, &ranges, defer))
                .await
                .map_err(panicked)??;
        let model = Arc::new(ClusterModel {
            id: rand::random(),
            name,
            graph: Arc::new(graph),
            external,
            source,
        });
        let id = model.id;
        let types = static_types(&model.graph);
        let sent = Arc::new(Sent::default());
        let (answer, rx) = oneshot::channel();
        let pending = self.call(|st, now| {
            let entry = Entry {
                model: model.clone(),
                value_inputs: BTreeSet::new(),
                owner: owner
                    .as_ref()
                    .map_or_else(|| "none".into(), |o| o.name.clone()),
            };
            st.models.insert(id, entry);
            st.core.add_model(id);
            if let Some(o) = &owner {
                st.core.lease(id, o.id)?;
                // Under the lock that `owner_gone` takes: if the connection closed before
                // this, its `owner_gone` has run or will find the lease.
                if o.gone.load(Ordering::SeqCst) {
                    st.core.owner_gone(o.id, now);
                }
            }
            let Some(types) = types else {
                return Ok(false);
            };
            let key = DeployKey {
                types,
                values: Vec::new(),
                bound: Vec::new(),
            };
            match st.core.prepare(id, key, now)? {
                Prepared::Pending(plan) => {
                    let s = Submission {
                        answer,
                        sent: sent.clone(),
                        placement: None,
                    };
                    st.submissions.insert(plan, s);
                    Ok(true)
                }
                Prepared::Live(_) => Ok(false),
            }
        });
        let placement = match pending {
            Ok(true) => report_until(rx, &sent, &progress).await,
            Ok(false) => Ok(None),
            Err(e) => Err(DistError::Run(e)),
        };
        if placement.is_err() {
            self.call(|st, _| {
                let _ = st.core.remove_model(id);
                st.models.remove(&id);
            });
        }
        let placement = placement?;
        tracing::info!("model {} is live as {id:016x}", model.name);
        Ok((model, placement))
    }

    /// The client unloads a model: its plans are retired everywhere. Resolves once every
    /// node of them answered that it let their memory go (its answer, its inventory, is
    /// what the next plan is made against), or after [`UNLOAD_WAIT`].
    pub async fn unload(self: &Arc<Self>, id: u64) -> Result<(), DistError> {
        let ids = self.call(|st, _| {
            let ids = st.core.load_ids(id);
            st.core.remove_model(id)?;
            st.models.remove(&id);
            Ok::<_, DistError>(ids)
        })?;
        self.wait_unloaded(&ids).await;
        Ok(())
    }

    /// A node's inventory it sent with an answer: its reservations as they are now.
    fn learn(&self, node: &str, inventory: Option<pb::Inventory>) {
        if let Some(inv) = inventory {
            self.cluster.learn_inventory(node, inv);
        }
    }

    /// Waits until plans `ids` are gone and every node answered their unloads, or for
    /// [`UNLOAD_WAIT`].
    async fn wait_unloaded(&self, ids: &[u64]) {
        let settled = || {
            let st = lock(&self.state);
            ids.iter()
                .all(|l| !st.core.has_deployment(*l) && !st.unacked.contains_key(l))
        };
        let deadline = tokio::time::Instant::now() + UNLOAD_WAIT;
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if settled() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::debug!("unloads of {ids:016x?} not all answered in {UNLOAD_WAIT:?}");
                return;
            }
        }
    }

    pub fn inputs_outputs(model: &ClusterModel) -> (Vec<String>, Vec<String>) {
        let names =
            |l: &[(ValueId, ValueDef)]| l.iter().map(|(_, d)| d.name.clone()).collect::<Vec<_>>();
        (names(&model.graph.inputs), names(&model.graph.outputs))
    }

    /// Runs a model once. Returns the outputs, and whether the run had to be retried on a new
    /// plan.
    pub async fn run(
        self: &Arc<Self>,
        model: &ClusterModel,
        inputs: Vec<Tensor>,
    ) -> Result<(Vec<Tensor>, bool), DistError> {
        let (answer, rx) = oneshot::channel();
        self.call(|st, _| {
            let run = st.core.run(model.id, inputs)?;
            st.runs.insert(run, answer);
            Ok::<(), RunError>(())
        })?;
        let out = rx
            .await
            .map_err(|_| DistError::Protocol("the run was dropped".into()))??;
        Ok((out.outputs, out.retried))
    }

    /// Runs one step of sequence `seq` (see sequences.rs): `pairs` are its bindings (graph
    /// output, graph input), `given` the inputs the client sent by index. Returns the outputs
    /// that come back (the bound ones stay on their nodes), with their indices.
    pub async fn run_step(
        self: &Arc<Self>,
        model: &ClusterModel,
        seq: u64,
        pairs: &[(usize, usize)],
        given: BTreeMap<usize, Tensor>,
    ) -> Result<Vec<(usize, Tensor)>, DistError> {
        let (names, outputs) = Submitter::inputs_outputs(model);
        if let Some(&(o, i)) = pairs
            .iter()
            .find(|&&(o, i)| o >= outputs.len() || i >= names.len())
        {
            return Err(DistError::Runtime(crate::Error::Input(format!(
                "binding output {o} to input {i}: the model has {} outputs and {} inputs",
                outputs.len(),
                names.len()
            ))));
        }
        let (answer, rx) = oneshot::channel();
        let kept = self.call(|st, now| {
            st.seqs.sweep(now);
            let (inputs, kept) = st
                .seqs
                .begin(seq, model.id, pairs, given, &names, now)
                .map_err(|e| DistError::Runtime(crate::Error::Input(e.to_string())))?;
            let missing = inputs.iter().position(Option::is_none);
            if let Some(i) = missing {
                st.seqs.refused(seq);
                return Err(DistError::Runtime(crate::Error::Input(format!(
                    "missing input '{}'",
                    names[i]
                ))));
            }
            let inputs = inputs.into_iter().flatten().collect();
            match st.core.run_step(model.id, inputs, kept.clone()) {
                Ok(run) => {
                    st.seqs.started(seq, run);
                    st.runs.insert(run, answer);
                    Ok(kept)
                }
                Err(e) => {
                    st.seqs.refused(seq);
                    Err(e.into())
                }
            }
        })?;
        let out = rx
            .await
            .map_err(|_| DistError::Protocol("the run was dropped".into()))??;
        let back = (0..outputs.len()).filter(|o| !kept.contains(o));
        Ok(back.zip(out.outputs).collect())
    }

    /// Ends sequence `seq`: the nodes that keep its values free them.
    pub fn end_sequence(self: &Arc<Self>, seq: u64) -> bool {
        let nodes = lock(&self.state).seqs.end(seq);
        let Some(nodes) = nodes else {
            return false;
        };
        for to in nodes {
            self.link.post(&to, end_message(seq));
        }
        true
    }

    /// An output of one of our runs arrived (from another node, or from this one).
    pub fn output_arrived(self: &Arc<Self>, model: u64, run: u64, index: usize, t: Tensor) {
        tracing::trace!("run {run}: output {index} arrived");
        self.call(|st, _| st.core.output(model, run, index, t));
    }

    /// An output of one of our runs was given up before it was whole.
    pub fn output_lost(
        self: &Arc<Self>,
        model: u64,
        run: u64,
        index: usize,
        from: &str,
        why: &str,
    ) {
        self.call(|st, now| st.core.output_lost(model, run, index, from, why, now));
    }

    /// A participant reports a run failed there (directly or through another participant),
    /// or this node's own abort comes back.
    pub fn run_failed(self: &Arc<Self>, from: &str, r: &pb::RunFailed) {
        self.call(|st, now| st.core.run_failed(from, r, now));
    }

    /// Life `generation` of a member died or left.
    pub fn member_down(self: &Arc<Self>, node: &str, generation: u64, state: &str) {
        self.call(|st, now| st.core.member_down(node, generation, state, now));
    }

    /// Life `generation` of a member is (again) alive: models may use it again, and plans
    /// made with an older life of it are retired.
    pub fn member_up(self: &Arc<Self>, node: &str, generation: u64) {
        self.call(|st, now| st.core.member_up(node, generation, now));
    }

    /// This node learned it had been declared dead: its shared plans are retired and their
    /// runs retried.
    pub fn rejoined(self: &Arc<Self>) {
        self.call(|st, now| st.core.rejoined(now));
    }

    /// A client connection closed: the models leased to it are unloaded after the grace.
    pub fn owner_gone(self: &Arc<Self>, owner: u64) {
        self.call(|st, now| st.core.owner_gone(owner, now));
    }

    /// The node is stopping: every run fails with `why`.
    pub fn shutdown(self: &Arc<Self>, why: &str) {
        self.call(|st, _| st.core.shutdown(why));
    }

    /// The models submitted here, for `status`.
    pub fn status(&self) -> Vec<pb::ModelStatus> {
        let st = lock(&self.state);
        let now = Instant::now();
        st.models
            .iter()
            .map(|(&id, e)| {
                let unload_in = st
                    .core
                    .lease_of(id)
                    .and_then(|(_, at)| at)
                    .map(|t| t.saturating_duration_since(now).as_millis().max(1) as u64);
                pb::ModelStatus {
                    model_id: id,
                    name: e.model.name.clone(),
                    owner: e.owner.clone(),
                    reserved: st
                        .core
                        .reserved(id)
                        .into_iter()
                        .map(|(node, bytes)| pb::NodeBytes { node, bytes })
                        .collect(),
                    unload_in_ms: unload_in.unwrap_or(0),
                }
            })
            .collect()
    }

    pub(super) fn handle_timeout(self: &Arc<Self>) {
        self.call(|st, now| st.core.handle_timeout(now));
    }

    /// Calls the machine, then carries out what it asks, with the lock released.
    fn call<R>(self: &Arc<Self>, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let (r, todo, next) = {
            let mut st = lock(&self.state);
            let now = Instant::now();
            let r = f(&mut st, now);
            let todo = st.drain(now);
            (r, todo, st.core.poll_timeout())
        };
        self.alarm.set(next);
        for t in todo {
            self.carry(t);
        }
        r
    }
}

/// What tells a node that it may forget what it keeps for sequence `seq`.
fn end_message(seq: u64) -> Message {
    Message::Sequence(pb::SequenceOp {
        sequence: seq,
        op: pb::sequence_op::Op::End as i32,
        ..Default::default()
    })
}

/// Weights received with a model's bytes, by (location, offset) as its external data names
/// them.
pub type Received = BTreeMap<(String, u64), (pb::WeightRange, Bytes)>;

/// A submitted model's graph, its external data resolved against the weights received, and
/// (with `defer`) the initializers among `ranges` not received deferred, to travel by
/// reference.
fn decode(
    data: Bytes,
    received: Received,
    ranges: &[pb::WeightRange],
    defer: bool,
) -> Result<(Graph, External), DistError> {
    let bytes = received
        .iter()
        .map(|(k, (_, b))| (k.clone(), b.clone()))
        .collect();
    let (model, _) =
        crate::onnx::load_resolved(data, bytes, defer).map_err(|e| DistError::Runtime(e.into()))?;
    let graph = Graph::from_model(&model)?;
    let offered: BTreeMap<(&str, u64), &pb::WeightRange> = ranges
        .iter()
        .map(|r| ((r.location.as_str(), r.offset), r))
        .collect();
    let ids: std::collections::HashMap<&str, ValueId> = graph
        .value_names
        .iter()
        .enumerate()
        .map(|(v, n)| (n.as_str(), v))
        .collect();
    let mut external = External::new();
    for d in &model.graph.deferred {
        let bad = |why: String| {
            DistError::Weights(format!(
                "tensor '{}': external data {} offset {}: {why}",
                d.name, d.location, d.offset
            ))
        };
        let r = offered
            .get(&(d.location.as_str(), d.offset))
            .ok_or_else(|| bad("the client did not offer it".into()))?;
        let ty = crate::ops::ValueType::new(d.dtype, d.shape.clone());
        if ty.bytes() as u64 != r.length {
            return Err(bad(format!(
                "the range holds {} bytes, but {ty} needs {}",
                r.length,
                ty.bytes()
            )));
        }
        external.insert(ids[d.name.as_str()], (*r).clone());
    }
    Ok((graph, external))
}

/// Waits for a submission's answer, telling the client how many weight bytes went out.
async fn report_until(
    mut rx: oneshot::Receiver<Result<Option<pb::Placement>, RunError>>,
    sent: &Sent,
    progress: &Progress,
) -> Result<Option<pb::Placement>, DistError> {
    let report = || {
        let Some(nodes) = sent.nodes.get() else {
            return;
        };
        for (node, (done, total)) in nodes {
            let _ = progress.send(pb::LoadProgress {
                stage: "weights".into(),
                done_bytes: done.load(Ordering::Relaxed).min(*total),
                total_bytes: *total,
                node: node.clone(),
            });
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let r = loop {
        tokio::select! {
            r = &mut rx => break r,
            _ = tick.tick() => report(),
        }
    };
    report();
    let r = r.map_err(|_| DistError::Protocol("the submission was dropped".into()))?;
    Ok(r?)
}
