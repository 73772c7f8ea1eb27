//! The submitting node's side: models submitted to this node, planned over the cluster,
//! deployed as fragments, and the runs it was asked for.
//!
//! The submitter plans and hands out fragments, feeds each run's inputs to the nodes that read
//! them and collects the outputs; it relays nothing in between (values cross straight from
//! the node that makes them to the nodes that read them). When a node of a plan dies, the
//! runs in flight on it fail with its name; each is retried once, on a new plan made without
//! that node when the others have room.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use vkml_protocol::{Message, pb};

use super::fragment::Skeleton;
use super::link::Link;
use super::participant::Participant;
use super::placement::{describe, plan_for, static_types};
use super::{DistError, wire};
use crate::cluster::{Cluster, transport};
use crate::graph::{Graph, SpecializeError, Specialized, ValueId};
use crate::ops::ValueType;
use crate::tensor::Tensor;

/// A run that has heard nothing for this long fails instead of hanging.
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// Plans kept per model (per input shapes).
const MAX_DEPLOYMENTS: usize = 8;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why a run failed: a node that died (the run may be retried without it), or anything else.
#[derive(Debug, Clone)]
enum Failure {
    Node {
        node: String,
        reason: String,
    },
    /// A node of the plan no longer holds its part (it restarted): load the model again.
    Lost {
        node: String,
    },
    Other(String),
}

/// A model submitted to this node, under the id its client uses.
pub struct ClusterModel {
    pub id: u64,
    pub name: String,
    graph: Arc<Graph>,
    value_inputs: Mutex<BTreeSet<usize>>,
    deployments: tokio::sync::Mutex<Vec<(DeployKey, Arc<Deployment>)>>,
    /// Nodes that failed while this model used them: left out of its plans until they come
    /// back (membership may not have declared them dead yet).
    avoid: Mutex<BTreeSet<String>>,
}

#[derive(Clone, PartialEq, Eq)]
struct DeployKey {
    types: Vec<ValueType>,
    values: Vec<(usize, Bytes)>,
}

/// One plan of a model, live on its nodes under `load_id`.
pub struct Deployment {
    load_id: u64,
    nodes: BTreeSet<String>,
    /// Graph inputs (indices) each node reads.
    needs: BTreeMap<String, Vec<usize>>,
    /// Outputs known without running (constants, inputs passed through).
    fixed_outputs: Vec<(usize, OutputSource)>,
    n_outputs: usize,
    pub placement: pb::Placement,
}

#[derive(Clone)]
enum OutputSource {
    Const(Tensor),
    Input(usize),
}

struct Pending {
    nodes: BTreeSet<String>,
    outputs: Vec<Option<Tensor>>,
    missing: usize,
    tx: Option<oneshot::Sender<Result<Vec<Tensor>, Failure>>>,
}

pub struct Submitter {
    me: String,
    cluster: Cluster,
    link: Arc<Link>,
    participant: Arc<Participant>,
    models: Mutex<BTreeMap<u64, Arc<ClusterModel>>>,
    pending: Mutex<BTreeMap<(u64, u64), Pending>>,
    next_run: AtomicU64,
}

/// Progress of a load, for the client's progress bar.
pub type Progress = mpsc::UnboundedSender<pb::LoadProgress>;

impl Submitter {
    pub fn new(cluster: Cluster, link: Arc<Link>, participant: Arc<Participant>) -> Submitter {
        Submitter {
            me: cluster.name().to_string(),
            cluster,
            link,
            participant,
            models: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(BTreeMap::new()),
            next_run: AtomicU64::new(1),
        }
    }

    pub fn model(&self, id: u64) -> Result<Arc<ClusterModel>, DistError> {
        lock(&self.models)
            .get(&id)
            .cloned()
            .ok_or(DistError::NoModel(id))
    }

    /// Loads a model file's bytes: plans it now when its input shapes are fixed (so a model
    /// that does not fit fails here), otherwise at its first run.
    pub async fn submit(
        self: &Arc<Self>,
        name: String,
        data: Bytes,
        progress: Progress,
    ) -> Result<(Arc<ClusterModel>, Option<pb::Placement>), DistError> {
        let graph = tokio::task::spawn_blocking(move || -> Result<Graph, DistError> {
            let model = crate::onnx::load_from_bytes(data, None)
                .map_err(|e| DistError::Runtime(e.into()))?;
            Ok(Graph::from_model(&model)?)
        })
        .await
        .map_err(join_err)??;
        let model = Arc::new(ClusterModel {
            id: rand::random(),
            name,
            graph: Arc::new(graph),
            value_inputs: Mutex::new(BTreeSet::new()),
            deployments: tokio::sync::Mutex::new(Vec::new()),
            avoid: Mutex::new(BTreeSet::new()),
        });
        let mut placement = None;
        if let Some(types) = static_types(&model.graph) {
            let zeros: Vec<Tensor> = types
                .iter()
                .map(|t| Tensor::zeros(t.dtype, t.shape.clone()))
                .collect();
            match self.deployment(&model, &zeros, Some(&progress)).await {
                Ok(d) => placement = Some(d.placement.clone()),
                // The plan depends on input values (a shape fed as an input): made per run.
                Err(DistError::NeedsValues) => {}
                Err(e) => return Err(e),
            }
        }
        lock(&self.models).insert(model.id, model.clone());
        tracing::info!("model {} is live as {:016x}", model.name, model.id);
        Ok((model, placement))
    }

    pub async fn unload(&self, id: u64) -> Result<(), DistError> {
        let model = lock(&self.models)
            .remove(&id)
            .ok_or(DistError::NoModel(id))?;
        let deps: Vec<Arc<Deployment>> = model
            .deployments
            .lock()
            .await
            .drain(..)
            .map(|(_, d)| d)
            .collect();
        for d in deps {
            self.retire(&d, None, "unloaded by its client").await;
        }
        Ok(())
    }

    pub fn inputs_outputs(model: &ClusterModel) -> (Vec<String>, Vec<String>) {
        (
            model
                .graph
                .inputs
                .iter()
                .map(|(_, d)| d.name.clone())
                .collect(),
            model
                .graph
                .outputs
                .iter()
                .map(|(_, d)| d.name.clone())
                .collect(),
        )
    }

    /// Runs a model once. Returns the outputs, whether the run had to be retried on a new plan,
    /// and that plan's placement.
    pub async fn run(
        self: &Arc<Self>,
        model: &Arc<ClusterModel>,
        inputs: Vec<Tensor>,
    ) -> Result<(Vec<Tensor>, bool), DistError> {
        let mut retried: Option<(String, String)> = None;
        loop {
            let dep = match self.deployment(model, &inputs, None).await {
                Ok(d) => d,
                Err(e) => {
                    let lost: Vec<String> = lock(&model.avoid).iter().cloned().collect();
                    return Err(match (retried, e) {
                        (Some((node, reason)), e) => DistError::NodeFailed {
                            node,
                            reason: format!("{reason}; the run cannot be retried without it: {e}"),
                        },
                        // A plan that no longer fits because nodes were lost: say which.
                        (None, DistError::Placement(why)) if !lost.is_empty() => {
                            DistError::NodeFailed {
                                node: lost.join(", "),
                                reason: format!(
                                    "it is gone and the remaining nodes have no room for the \
                                     model: {why}"
                                ),
                            }
                        }
                        (None, e) => e,
                    });
                }
            };
            match self.run_once(&dep, &inputs).await {
                Ok(out) => return Ok((out, retried.is_some())),
                Err(Failure::Node { node, reason }) => {
                    lock(&model.avoid).insert(node.clone());
                    self.forget(model, &dep).await;
                    self.retire(&dep, Some(&node), &format!("node {node} failed: {reason}"))
                        .await;
                    if let Some((first, first_reason)) = retried {
                        return Err(DistError::NodeFailed {
                            node,
                            reason: format!(
                                "{reason} (on the retry, after {first} failed: {first_reason})"
                            ),
                        });
                    }
                    tracing::warn!(
                        "a run of {} lost node {node} ({reason}); retrying",
                        model.name
                    );
                    retried = Some((node, reason));
                }
                Err(Failure::Lost { node }) => {
                    self.forget(model, &dep).await;
                    self.retire(&dep, None, &format!("node {node} lost its part"))
                        .await;
                    if let Some((first, reason)) = retried {
                        return Err(DistError::NodeFailed {
                            node,
                            reason: format!(
                                "it lost the model, on the retry after {first} failed: {reason}"
                            ),
                        });
                    }
                    tracing::info!("{node} no longer holds {}; loading it again", model.name);
                    retried = Some((node, "it restarted and lost the model".into()));
                }
                Err(Failure::Other(reason)) => return Err(DistError::RunFailed(reason)),
            }
        }
    }

    /// The deployment for these inputs' types (and shape-deciding values): cached, or planned
    /// and loaded now.
    async fn deployment(
        self: &Arc<Self>,
        model: &Arc<ClusterModel>,
        inputs: &[Tensor],
        progress: Option<&Progress>,
    ) -> Result<Arc<Deployment>, DistError> {
        let types: Vec<ValueType> = inputs.iter().map(ValueType::of).collect();
        // Serialised per model: two first runs must not deploy twice.
        let mut deps = model.deployments.lock().await;
        loop {
            let wanted = lock(&model.value_inputs).clone();
            let key = DeployKey {
                types: types.clone(),
                values: wanted
                    .iter()
                    .filter_map(|&i| inputs.get(i).map(|t| (i, t.bytes().clone())))
                    .collect(),
            };
            if let Some((_, d)) = deps.iter().find(|(k, _)| *k == key) {
                return Ok(d.clone());
            }
            let graph = model.graph.clone();
            // Fused where a GPU may run the plan, as a session does.
            let fuse = self.cluster.tuning().fusion
                && self
                    .cluster
                    .snapshot()
                    .devices()
                    .any(|(_, d)| d.kind == vkml_planner::DeviceKind::Gpu);
            let (types2, known): (Vec<ValueType>, Vec<Option<Tensor>>) = (
                types.clone(),
                (0..inputs.len())
                    .map(|i| wanted.contains(&i).then(|| inputs[i].clone()))
                    .collect(),
            );
            let spec = tokio::task::spawn_blocking(move || {
                let known: Vec<Option<&Tensor>> = known.iter().map(Option::as_ref).collect();
                graph.specialize_for(&types2, &known, fuse)
            })
            .await
            .map_err(join_err)?;
            match spec {
                Ok(spec) => {
                    let d = self.deploy(model, spec, progress).await?;
                    deps.insert(0, (key, d.clone()));
                    deps.truncate(MAX_DEPLOYMENTS);
                    return Ok(d);
                }
                Err(SpecializeError::NeedsValues(more)) => {
                    let mut set = lock(&model.value_inputs);
                    let before = set.len();
                    set.extend(more);
                    if set.len() == before {
                        return Err(DistError::Unsupported(
                            "planning asked again for input values it already had".into(),
                        ));
                    }
                    if progress.is_some() {
                        // At submission the values are not known: plan at the first run.
                        return Err(DistError::NeedsValues);
                    }
                }
                Err(e) => return Err(DistError::Runtime(e.into())),
            }
        }
    }

    /// Plans `spec` over the cluster as it is now and loads every node's fragment.
    async fn deploy(
        self: &Arc<Self>,
        model: &Arc<ClusterModel>,
        spec: Specialized,
        progress: Option<&Progress>,
    ) -> Result<Arc<Deployment>, DistError> {
        let mut snapshot = self.cluster.snapshot();
        for node in lock(&model.avoid).iter() {
            snapshot.nodes.remove(node);
        }
        let graph = model.graph.clone();
        let tuning = self.cluster.tuning();
        let (plan, skeleton, spec, snapshot) = tokio::task::spawn_blocking(move || {
            let (plan, cost, spec) = plan_for(&graph, spec, &snapshot, &tuning)?;
            let skeleton = Skeleton::new(&graph, &spec, &cost, &snapshot)?;
            Ok::<_, DistError>((plan, skeleton, spec, snapshot))
        })
        .await
        .map_err(join_err)??;
        let graph = &model.graph;
        let load_id: u64 = rand::random();
        let nodes: BTreeSet<String> = plan.placement.iter().map(|d| d.node.clone()).collect();
        let placement = describe(graph, &plan, &snapshot);
        let mut frags = Vec::new();
        let mut total = 0u64;
        for node in &nodes {
            let (mut f, w) = skeleton.fragment(graph, &spec, &plan, node, load_id, &self.me);
            f.tuning_fingerprint = tuning.fingerprint();
            f.plan_settings = tuning.plan_settings();
            total += f.weight_bytes;
            frags.push((node.clone(), f, w));
        }
        let sent = Arc::new(AtomicU64::new(0));
        let reporter = progress.map(|p| {
            let (p, sent) = (p.clone(), sent.clone());
            tokio::spawn(async move {
                loop {
                    let done = sent.load(Ordering::Relaxed);
                    let _ = p.send(pb::LoadProgress {
                        stage: "streaming weights".into(),
                        done_bytes: done,
                        total_bytes: total,
                    });
                    if done >= total {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        });
        let tasks: Vec<_> = frags
            .into_iter()
            .map(|(node, f, w)| {
                let me = self.clone();
                let sent = sent.clone();
                tokio::spawn(async move {
                    let r = me.load_on(&node, f, w, &sent).await;
                    (node, r)
                })
            })
            .collect();
        let mut failed = None;
        let mut loaded = Vec::new();
        for t in tasks {
            let (node, r) = t.await.map_err(join_err)?;
            match r {
                Ok(()) => loaded.push(node),
                Err(e) => {
                    failed.get_or_insert((node, e));
                }
            }
        }
        if let Some(r) = reporter {
            sent.store(total, Ordering::Relaxed);
            let _ = r.await;
        }
        if let Some((node, e)) = failed {
            for n in loaded {
                self.send_unload(&n, load_id, "loading failed on another node")
                    .await;
            }
            return Err(DistError::NodeFailed {
                node,
                reason: format!("could not load its part of the model: {e}"),
            });
        }
        let mut needs = BTreeMap::new();
        for (p, &n) in spec.live.iter().enumerate() {
            let node = &plan.placement[p].node;
            for (i, (v, _)) in graph.inputs.iter().enumerate() {
                if spec.node(graph, n).inputs.contains(&Some(*v)) && spec.consts[*v].is_none() {
                    let list: &mut Vec<usize> = needs.entry(node.clone()).or_default();
                    if !list.contains(&i) {
                        list.push(i);
                    }
                }
            }
        }
        let produced: BTreeSet<ValueId> = spec
            .live
            .iter()
            .flat_map(|&n| spec.node(graph, n).outputs.iter().copied())
            .collect();
        let mut fixed_outputs = Vec::new();
        for (i, (v, d)) in graph.outputs.iter().enumerate() {
            if produced.contains(v) {
                continue;
            }
            if let Some(t) = &spec.consts[*v] {
                fixed_outputs.push((i, OutputSource::Const(t.clone())));
            } else if let Some(j) = graph.inputs.iter().position(|(x, _)| x == v) {
                fixed_outputs.push((i, OutputSource::Input(j)));
            } else {
                return Err(DistError::Unsupported(format!(
                    "output '{}' is computed by nothing",
                    d.name
                )));
            }
        }
        tracing::info!(
            "model {} planned as {load_id:016x} over {} node(s), plan {:016x}",
            model.name,
            nodes.len(),
            plan.hash
        );
        Ok(Arc::new(Deployment {
            load_id,
            nodes,
            needs,
            fixed_outputs,
            n_outputs: graph.outputs.len(),
            placement,
        }))
    }

    async fn load_on(
        &self,
        node: &str,
        f: pb::Fragment,
        weights: Vec<(ValueId, Tensor)>,
        sent: &AtomicU64,
    ) -> Result<(), DistError> {
        if node == self.me {
            let bytes = f.weight_bytes;
            let p = self.participant.clone();
            let map: BTreeMap<ValueId, Tensor> = weights.into_iter().collect();
            tokio::task::spawn_blocking(move || p.load(&f, map))
                .await
                .map_err(join_err)??;
            sent.fetch_add(bytes, Ordering::Relaxed);
            return Ok(());
        }
        let (mut send, mut recv) = self.cluster.open_bi(node).await?;
        let model = f.model_id;
        transport::write_message(&mut send, &Message::Fragment(Box::new(f))).await?;
        for (v, t) in weights {
            let h = wire::header(&t, pb::TensorRole::Weight, model, 0, v as u64);
            wire::write_tensor(&mut send, h, t.bytes()).await?;
            sent.fetch_add(t.bytes().len() as u64, Ordering::Relaxed);
        }
        let _ = send.finish();
        match wire::expect_message(&mut recv).await? {
            Message::LoadAck(a) if a.ok => Ok(()),
            Message::LoadAck(a) => Err(DistError::Remote(a.reason)),
            other => Err(DistError::Protocol(format!(
                "expected a load acknowledgement, got {:?}",
                other.kind()
            ))),
        }
    }

    async fn send_unload(&self, node: &str, load_id: u64, why: &str) {
        if node == self.me {
            self.participant.unload(load_id, why);
            return;
        }
        let m = Message::Unload(pb::Unload {
            model_id: load_id,
            reason: why.to_string(),
        });
        if let Err(e) = self.link.send_message(node, &m).await {
            tracing::debug!("unload on {node}: {e}");
        }
    }

    /// Unloads a deployment from its nodes (but `dead`), saying why.
    async fn retire(&self, d: &Deployment, dead: Option<&str>, why: &str) {
        for n in &d.nodes {
            if Some(n.as_str()) != dead {
                self.send_unload(n, d.load_id, why).await;
            }
        }
    }

    async fn forget(&self, model: &ClusterModel, d: &Arc<Deployment>) {
        model
            .deployments
            .lock()
            .await
            .retain(|(_, x)| !Arc::ptr_eq(x, d));
    }

    async fn run_once(
        self: &Arc<Self>,
        d: &Arc<Deployment>,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>, Failure> {
        let run = self.next_run.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut outputs = vec![None; d.n_outputs];
        for (i, src) in &d.fixed_outputs {
            outputs[*i] = Some(match src {
                OutputSource::Const(t) => t.clone(),
                OutputSource::Input(j) => inputs[*j].clone(),
            });
        }
        let missing = outputs.iter().filter(|o| o.is_none()).count();
        if missing == 0 {
            return Ok(outputs.into_iter().flatten().collect());
        }
        lock(&self.pending).insert(
            (d.load_id, run),
            Pending {
                nodes: d.nodes.clone(),
                outputs,
                missing,
                tx: Some(tx),
            },
        );
        for node in &d.nodes {
            let ins: Vec<(usize, Tensor)> = d
                .needs
                .get(node)
                .map(|l| l.iter().map(|&i| (i, inputs[i].clone())).collect())
                .unwrap_or_default();
            if *node == self.me {
                if let Err(e) = self.participant.start_run(d.load_id, run, ins) {
                    self.fail(d.load_id, run, Failure::Other(e.to_string()));
                }
                continue;
            }
            let me = self.clone();
            let (node, load_id) = (node.clone(), d.load_id);
            tokio::spawn(async move {
                if let Err(e) = me.link.start_remote(&node, load_id, run, ins).await {
                    me.fail(
                        load_id,
                        run,
                        Failure::Node {
                            node: node.clone(),
                            reason: format!("cannot start the run there: {e}"),
                        },
                    );
                }
            });
        }
        let result = match tokio::time::timeout(RUN_DEADLINE, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Failure::Other("the run was dropped".into())),
            Err(_) => {
                lock(&self.pending).remove(&(d.load_id, run));
                Err(Failure::Other(format!(
                    "no result within {} s",
                    RUN_DEADLINE.as_secs()
                )))
            }
        };
        if let Err(f) = &result {
            // Every other node stops waiting for this run.
            let culprit = match f {
                Failure::Node { node, .. } => Some(node.as_str()),
                Failure::Lost { .. } | Failure::Other(_) => None,
            };
            let why = match f {
                Failure::Node { node, reason } => format!("node {node}: {reason}"),
                Failure::Lost { node } => format!("node {node} lost the model"),
                Failure::Other(r) => r.clone(),
            };
            for n in &d.nodes {
                if Some(n.as_str()) == culprit {
                    continue;
                }
                if *n == self.me {
                    self.participant.abort(d.load_id, run, &why);
                } else {
                    let m = Message::RunFailed(pb::RunFailed {
                        model_id: d.load_id,
                        run_id: run,
                        reason: why.clone(),
                        culprit: String::new(),
                        model_lost: false,
                    });
                    let link = self.link.clone();
                    let n = n.clone();
                    tokio::spawn(async move {
                        let _ = link.send_message(&n, &m).await;
                    });
                }
            }
        }
        result
    }

    fn fail(&self, model: u64, run: u64, f: Failure) {
        if let Some(mut p) = lock(&self.pending).remove(&(model, run))
            && let Some(tx) = p.tx.take()
        {
            let _ = tx.send(Err(f));
        }
    }

    /// An output of one of our runs arrived (from another node, or from this one).
    pub fn output_arrived(&self, model: u64, run: u64, index: usize, t: Tensor) {
        let mut pending = lock(&self.pending);
        let Some(p) = pending.get_mut(&(model, run)) else {
            return;
        };
        if index >= p.outputs.len() || p.outputs[index].is_some() {
            return;
        }
        p.outputs[index] = Some(t);
        p.missing -= 1;
        if p.missing == 0 {
            let mut p = pending.remove(&(model, run)).expect("present");
            if let Some(tx) = p.tx.take() {
                let _ = tx.send(Ok(p.outputs.into_iter().flatten().collect()));
            }
        }
    }

    /// A participant reports a run failed there. A culprit other than the reporter is a node
    /// it could not reach: treated as that node's failure (the run may be retried without it).
    pub fn run_failed(&self, from: &str, r: &pb::RunFailed) {
        let culprit = if r.culprit.is_empty() {
            from
        } else {
            &r.culprit
        };
        let f = if r.model_lost {
            Failure::Lost {
                node: from.to_string(),
            }
        } else if culprit != from {
            Failure::Node {
                node: culprit.to_string(),
                reason: r.reason.clone(),
            }
        } else {
            Failure::Other(format!("on node {culprit}: {}", r.reason))
        };
        self.fail(r.model_id, r.run_id, f);
    }

    /// A member died or left: the runs that involve it fail now, naming it; the deployments
    /// that use it are retired (the next run plans again).
    pub async fn member_down(self: &Arc<Self>, node: &str, state: &str) {
        let doomed: Vec<(u64, u64)> = lock(&self.pending)
            .iter()
            .filter(|(_, p)| p.nodes.contains(node))
            .map(|(&k, _)| k)
            .collect();
        for (m, r) in doomed {
            self.fail(
                m,
                r,
                Failure::Node {
                    node: node.to_string(),
                    reason: format!("the node is {state}"),
                },
            );
        }
        let models: Vec<Arc<ClusterModel>> = lock(&self.models).values().cloned().collect();
        for model in models {
            let gone: Vec<Arc<Deployment>> = {
                let mut deps = model.deployments.lock().await;
                let (gone, keep): (Vec<_>, Vec<_>) =
                    deps.drain(..).partition(|(_, d)| d.nodes.contains(node));
                *deps = keep;
                gone.into_iter().map(|(_, d)| d).collect()
            };
            for d in gone {
                self.retire(&d, Some(node), &format!("node {node} is {state}"))
                    .await;
            }
        }
    }

    /// A member is (again) alive: models may use it again.
    pub fn member_up(&self, node: &str) {
        for model in lock(&self.models).values() {
            lock(&model.avoid).remove(node);
        }
    }
}

fn join_err(e: tokio::task::JoinError) -> DistError {
    DistError::Protocol(format!("a task failed: {e}"))
}
