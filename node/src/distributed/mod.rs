//! Cluster-wide execution: a model submitted to any node runs over the whole cluster, peer to
//! peer, with no node coordinating a run.
//!
//! Every decision (which node gets which message, when a run is complete, failed, retried or
//! late, which plans are unloaded, what a participant reserves, when early values are
//! forgotten) is made by the state machines of `vkml_protocol::dist`; the modules here drive
//! them: each holds its machine behind one lock, feeds it events, carries out its actions with
//! the lock released, and wakes it when its `poll_timeout` is due (`alarm`).
//!
//! - [`submitter`]: the node a model was submitted to: plans it (`deploy`: over a frozen
//!   snapshot of the membership), sends each participant its [`fragment`] and the weights it
//!   needs, feeds runs their inputs and collects their outputs;
//! - [`participant`]: every node's part in other nodes' models: checks and loads fragments,
//!   runs them as values arrive;
//! - [`placement`]: a plan from a specialised graph and a snapshot, and its description for
//!   people; [`offline`]: the same without a cluster (`vkml-node plan`);
//! - [`link`], [`wire`]: tensors and messages between nodes;
//! - [`client`]: the tool's side (`vkml-node submit`, the Rust API).
//!
//! Inside a node a fragment is an ordinary [`Executable`](crate::exec::Executable) built from
//! the cluster's plan: its chunks wait on the same atomic counters, which values arriving from
//! other nodes decrement exactly as finishing local chunks do. docs/CLUSTER.md tells the story.

mod alarm;
pub mod client;
mod deploy;
pub mod fragment;
mod kept;
pub mod link;
pub mod offline;
pub mod participant;
pub mod placement;
mod sequences;
mod shared_charges;
mod side_files;
mod source;
pub mod submitter;
pub mod weights;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::runtime::Handle;
use vkml_protocol::dist::run::RunError;
use vkml_protocol::{Message, error_code, pb};

use crate::cluster::{
    Cluster, ClusterError, DroppedTensor, ExecStatus, IncomingStream, MemberEvent, MemberState,
    transport,
};
use crate::exec::Device;
use crate::graph::ValueId;
use link::Link;
use participant::{Participant, Step};
use submitter::{Owner, Submitter};
use weights::WeightStore;

#[derive(Debug, thiserror::Error)]
pub enum DistError {
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("peer: {0}")]
    Peer(String),
    #[error("{0}")]
    Remote(String),
    #[error("not supported on a cluster: {0}")]
    Unsupported(String),
    #[error("placement: {0}")]
    Placement(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Runtime(#[from] crate::Error),
    /// A run or a submission failed, as the submitter's machine decided.
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("no model with id {0:016x} is loaded on this node (unloaded, or the node restarted)")]
    NoModel(u64),
    /// A weight could not be received, kept or found (the message names it).
    #[error("{0}")]
    Weights(String),
    /// A run this node could not start, already reported to its submitter (a `RunFailed`
    /// naming the node that caused it).
    #[error("{0}")]
    Reported(String),
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn panicked(e: crate::priority::Panicked) -> DistError {
    DistError::Protocol(e.to_string())
}

fn join_err(e: tokio::task::JoinError) -> DistError {
    DistError::Protocol(format!("a task failed: {e}"))
}

/// A node's execution service: the fragments it runs and the models submitted to it.
pub struct Exec {
    cluster: Cluster,
    link: Arc<Link>,
    weights: Arc<WeightStore>,
    pub participant: Arc<Participant>,
    pub submitter: Arc<Submitter>,
}

impl Exec {
    /// Serves execution on `cluster` with this node's `devices` (as `inventory` advertises
    /// them). Call inside the tokio runtime, once.
    /// Weights it is sent are kept in `weights`.
    pub fn start(
        cluster: Cluster,
        devices: Vec<Device>,
        inventory: Vec<pb::Device>,
        weights: WeightStore,
    ) -> Arc<Exec> {
        let rt = Handle::current();
        let link = Arc::new(Link::new(cluster.clone()));
        let weights = Arc::new(weights);
        let participant = Arc::new(Participant::new(
            cluster.name().to_string(),
            devices,
            inventory,
            link.clone(),
            rt.clone(),
            cluster.tuning(),
            cluster.dist_config(),
        ));
        let submitter = Arc::new(Submitter::new(
            cluster.clone(),
            link.clone(),
            participant.clone(),
            weights.clone(),
        ));
        let exec = Arc::new(Exec {
            cluster: cluster.clone(),
            link: link.clone(),
            weights,
            participant,
            submitter,
        });
        link.attach(Arc::downgrade(&exec));
        let p = Arc::downgrade(&exec.participant);
        exec.participant.alarm().spawn(p, |p| p.handle_timeout());
        let s = Arc::downgrade(&exec.submitter);
        exec.submitter.alarm().spawn(s, |s| s.handle_timeout());

        let mut tensors = cluster.tensors();
        let e = exec.clone();
        tokio::spawn(async move {
            while let Some(t) = tensors.recv().await {
                e.tensor_arrived(&t.from, &t.header, t.payload);
            }
        });
        let mut incoming = cluster.incoming();
        let e = exec.clone();
        tokio::spawn(async move {
            while let Some(s) = incoming.recv().await {
                tokio::spawn(e.clone().serve(s));
            }
        });
        let mut drops = cluster.dropped_tensors();
        let e = exec.clone();
        tokio::spawn(async move {
            while let Some(d) = drops.recv().await {
                e.tensor_lost(&d);
            }
        });
        tokio::spawn(watch_members(exec.clone(), cluster.subscribe()));
        let mut life = cluster.life();
        let e = exec.clone();
        tokio::spawn(async move {
            while life.changed().await.is_ok() {
                tracing::warn!(
                    "this node was declared dead: dropping the plans the others retired"
                );
                e.participant.rejoined();
                e.submitter.rejoined();
            }
        });
        let weak = Arc::downgrade(&exec);
        cluster.set_status_source(move || match weak.upgrade() {
            Some(e) => {
                let (received, cached) = e.weights.counters();
                let (kept, kept_bytes, on_gpu) = e.participant.kept_usage();
                let (shared, reused) = e.participant.shared_usage();
                ExecStatus {
                    models: e.submitter.status(),
                    fragments: e.participant.status(),
                    weight_bytes_received: received,
                    weight_bytes_cached: cached,
                    sequences_kept: kept as u64,
                    sequence_bytes: kept_bytes,
                    sequence_gpu_bytes: on_gpu,
                    shared_weight_bytes: shared,
                    weight_bytes_reused: reused,
                }
            }
            None => ExecStatus::default(),
        });
        exec
    }

    /// The node is stopping: the runs submitted here fail with a reason their clients can
    /// read, and the runs of other nodes' models here are aborted, so no thread waits on a
    /// value that will never come.
    pub fn shutdown(&self) {
        let why = format!("node {} is stopping", self.cluster.name());
        self.submitter.shutdown(&why);
        self.participant.abort_all(&why);
    }

    /// A tensor given up before it was whole: whoever waited for it is told.
    fn tensor_lost(&self, d: &DroppedTensor) {
        match d.role {
            pb::TensorRole::Edge => self
                .participant
                .value_lost(d.model_id, d.run_id, &d.from, &d.why),
            pb::TensorRole::Output => self.submitter.output_lost(
                d.model_id,
                d.run_id,
                d.edge_id as usize,
                &d.from,
                &d.why,
            ),
            _ => {}
        }
    }

    /// A tensor for one of our fragments' runs, or an output of one of our submitted runs.
    pub(crate) fn tensor_arrived(&self, from: &str, h: &pb::TensorHeader, payload: Bytes) {
        let t = match wire::tensor(h, payload) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("a bad tensor from {from}: {e}");
                return;
            }
        };
        match h.role() {
            pb::TensorRole::Edge => {
                if from != self.cluster.name() {
                    self.cluster
                        .exec_stats()
                        .edge_received(from, t.bytes().len() as u64);
                }
                self.participant
                    .arrive(h.model_id, h.run_id, h.edge_id as ValueId, t)
            }
            pb::TensorRole::Output => {
                self.submitter
                    .output_arrived(h.model_id, h.run_id, h.edge_id as usize, t)
            }
            other => tracing::warn!("{from} sent a {other:?} tensor on its own; dropped"),
        }
    }

    /// A control message from a member (or from this node to itself).
    pub(crate) fn message_from(&self, from: &str, m: Message) {
        match m {
            Message::RunFailed(r) => {
                // To the submitter of that run, or to a participant: told to give up, or
                // told of a peer's failure (which it passes on to the submitter).
                self.submitter.run_failed(from, &r);
                self.participant.run_failed(from, &r);
            }
            Message::Unload(u) => self
                .participant
                .unload(u.model_id, &u.reason, u.keep_weights),
            Message::Sequence(op) if op.op() == pb::sequence_op::Op::End => {
                self.participant.end_sequence(from, op.sequence)
            }
            other => tracing::debug!("unexpected {:?} from {from}", other.kind()),
        }
    }

    async fn serve(self: Arc<Self>, s: IncomingStream) {
        let IncomingStream {
            peer,
            client,
            conn,
            first,
            send,
            mut recv,
        } = s;
        let mut send = send;
        let result: Result<(), DistError> = async {
            match first {
                Message::Submit(m) => {
                    let s = send.as_mut().ok_or_else(one_way)?;
                    let owner = client.then(|| self.lease_to(&conn));
                    // Only a client serves its weights on streams opened to it.
                    let source = (client && m.source != 0).then(|| conn.clone());
                    self.serve_submit(m, s, &mut recv, owner, source).await
                }
                Message::Run(r) if client => {
                    let s = send.as_mut().ok_or_else(one_way)?;
                    self.serve_client_run(r, s, &mut recv).await
                }
                Message::Unload(u) if client => {
                    let s = send.as_mut().ok_or_else(one_way)?;
                    self.submitter.unload(u.model_id).await?;
                    transport::write_message(s, &Message::Unload(u)).await?;
                    Ok(())
                }
                Message::Sequence(op) => {
                    self.serve_sequence(&peer, client, op, send.as_mut()).await
                }
                Message::Run(r) => {
                    // Not sized from `r.tensors`: a peer's claim, not yet backed by bytes.
                    let mut inputs = Vec::new();
                    for _ in 0..r.tensors {
                        let (h, payload) = wire::read_tensor(&mut recv).await?;
                        inputs.push((h.edge_id as usize, wire::tensor(&h, payload)?));
                    }
                    // A refusal is reported to the submitter by the participant's machine too.
                    let (model_id, run_id) = (r.model_id, r.run_id);
                    let step = Step::of_run(&r);
                    let started = self
                        .participant
                        .start_run(&peer, model_id, run_id, inputs, step);
                    if let Err(e) = &started {
                        tracing::debug!("run {run_id} from {peer} not started: {e}");
                    }
                    // On a stream with a way back the sender waits for this answer: a start
                    // dropped on the way (a partition) is then an error there, not a run
                    // that waits for a part nobody started.
                    if let Some(s) = send.as_mut() {
                        // A failure the machine reported already (naming its cause) is not
                        // answered as this node's: the report decides the run's fate.
                        if !matches!(started, Err(DistError::Reported(_))) {
                            started?;
                        }
                        transport::write_message(s, &Message::Run(r)).await?;
                    }
                    Ok(())
                }
                Message::Fragment(f) => {
                    let s = send.as_mut().ok_or_else(one_way)?;
                    self.serve_fragment(*f, s, &mut recv).await
                }
                m @ (Message::RunFailed(_) | Message::Unload(_)) if !client => {
                    // On a stream with a way back the message is answered once it is done
                    // here: its sender sends it again until then (link.rs, `send_acked`).
                    let unload = matches!(m, Message::Unload(_));
                    let echo = m.clone();
                    self.message_from(&peer, m);
                    if let Some(s) = send.as_mut() {
                        // An unload is answered with this node's inventory, its memory let
                        // go: the submitter plans the next load against it at once, not
                        // against gossip that may still say the memory is taken.
                        let ack = if unload {
                            Message::Inventory(self.cluster.own_inventory())
                        } else {
                            echo
                        };
                        transport::write_message(s, &ack).await?;
                    }
                    Ok(())
                }
                other => Err(DistError::Protocol(format!(
                    "{} cannot ask for {:?} here",
                    if client { "a client" } else { "a member" },
                    other.kind()
                ))),
            }
        }
        .await;
        if let Some(s) = send.as_mut() {
            if let Err(e) = &result {
                // A peer still sending (a model's weights) learns at once that no one reads.
                let _ = recv.stop(quinn::VarInt::from_u32(error_code::FAILED));
                let m = Message::Error(pb::ErrorReply {
                    code: error_code::FAILED,
                    message: e.to_string().chars().take(8000).collect(),
                });
                let _ = transport::write_message(s, &m).await;
            }
            let _ = s.finish();
            // Let the reply reach the peer before the stream is dropped.
            let _ = tokio::time::timeout(Duration::from_secs(5), s.stopped()).await;
        } else if let Err(e) = result {
            tracing::warn!("a stream from {peer} failed: {e}");
        }
    }

    /// The owner a client connection's models are leased to: when the connection closes,
    /// they are unloaded after the grace period.
    fn lease_to(self: &Arc<Self>, conn: &quinn::Connection) -> Owner {
        let id = conn.stable_id() as u64;
        let owner = Owner {
            id,
            name: format!("client at {}", conn.remote_address()),
            gone: Arc::default(),
        };
        let (conn, me, gone) = (conn.clone(), Arc::downgrade(self), owner.gone.clone());
        tokio::spawn(async move {
            let why = conn.closed().await;
            gone.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(e) = me.upgrade() {
                tracing::info!(
                    "{} is gone ({why}): its models will be unloaded",
                    owner_name(&conn)
                );
                e.submitter.owner_gone(id);
            }
        });
        owner
    }

    /// A client's submission: the model's bytes, then (one `WeightsWanted`) the external
    /// weights this node must have to plan it, or all it lacks when the client does not
    /// serve its weights on request (no `source`); then planning and loading, with progress.
    async fn serve_submit(
        self: &Arc<Self>,
        m: pb::Submit,
        send: &mut quinn::SendStream,
        recv: &mut quinn::RecvStream,
        owner: Option<Owner>,
        source: Option<quinn::Connection>,
    ) -> Result<(), DistError> {
        let buf = wire::read_announced(recv, m.model_bytes, "model").await?;
        let now = match source {
            Some(_) => planning_needs(&buf, &m.weights)?,
            None => (0..m.weights.len()).collect(),
        };
        let weights = self
            .take_weights(&m.weights, &now, send, recv, "the client")
            .await?;
        let received = now
            .into_iter()
            .zip(weights)
            .map(|(i, b)| {
                let r = m.weights[i].clone();
                ((r.location.clone(), r.offset), (r, b))
            })
            .collect();
        let offered = submitter::Offered {
            source: source.map(|c| source::WeightSource::new(c, m.source, &m.weights)),
            ranges: m.weights,
            received,
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let submitter = self.submitter.clone();
        let name = m.name.clone();
        let mut task =
            tokio::spawn(async move { submitter.submit(name, buf, offered, tx, owner).await });
        let outcome = loop {
            tokio::select! {
                Some(p) = rx.recv() => {
                    transport::write_message(send, &Message::LoadProgress(p)).await?;
                }
                r = &mut task => break r.map_err(|e| DistError::Protocol(e.to_string()))?,
            }
        };
        let (model, placement) = outcome?;
        let (inputs, outputs) = Submitter::inputs_outputs(&model);
        let loaded = pb::Loaded {
            model_id: model.id,
            placement,
            inputs,
            outputs,
        };
        transport::write_message(send, &Message::Loaded(loaded)).await?;
        Ok(())
    }

    async fn serve_client_run(
        self: &Arc<Self>,
        r: pb::Run,
        send: &mut quinn::SendStream,
        recv: &mut quinn::RecvStream,
    ) -> Result<(), DistError> {
        let model = self.submitter.model(r.model_id)?;
        let (names, _) = Submitter::inputs_outputs(&model);
        if r.sequence != 0 {
            return self.serve_client_step(r, &model, send, recv).await;
        }
        if r.tensors as usize != names.len() {
            return Err(DistError::Runtime(crate::Error::Input(format!(
                "the model takes {} input(s) ({}), {} were sent",
                names.len(),
                names.join(", "),
                r.tensors
            ))));
        }
        let mut slots: BTreeMap<usize, crate::tensor::Tensor> = BTreeMap::new();
        for _ in 0..r.tensors {
            let (h, payload) = wire::read_tensor(recv).await?;
            slots.insert(h.edge_id as usize, wire::tensor(&h, payload)?);
        }
        let inputs: Vec<_> = (0..names.len())
            .map(|i| {
                slots.remove(&i).ok_or_else(|| {
                    DistError::Runtime(crate::Error::Input(format!("missing input '{}'", names[i])))
                })
            })
            .collect::<Result<_, _>>()?;
        let (outputs, retried) = self.submitter.run(&model, inputs).await?;
        let m = Message::RunResult(pb::RunResult {
            run_id: 0,
            tensors: outputs.len() as u32,
            retried,
        });
        let tensors = outputs.iter().enumerate().map(|(i, t)| {
            let h = wire::header(t, pb::TensorRole::Output, r.model_id, 0, i as u64);
            (h, t.bytes())
        });
        wire::write_with_tensors(send, &m, tensors).await
    }

    /// A `SequenceOp`: a client's END (ended on every keeper, answered), a submitter's FETCH
    /// (answered with the values this node gives up) or END (no answer).
    async fn serve_sequence(
        &self,
        peer: &str,
        client: bool,
        op: pb::SequenceOp,
        send: Option<&mut quinn::SendStream>,
    ) -> Result<(), DistError> {
        let end = op.op() == pb::sequence_op::Op::End;
        if client && !end {
            return Err(DistError::Protocol(
                "a client may only end a sequence".into(),
            ));
        }
        if end && !client {
            self.message_from(peer, Message::Sequence(op));
            return Ok(());
        }
        let s = send.ok_or_else(one_way)?;
        if client {
            self.submitter.end_sequence(op.sequence);
            transport::write_message(s, &Message::Sequence(op)).await?;
            return Ok(());
        }
        let wanted: Vec<usize> = op.inputs.iter().map(|&i| i as usize).collect();
        let values = self.participant.fetch(peer, op.sequence, &wanted)?;
        let answer = pb::SequenceOp {
            tensors: values.len() as u32,
            ..op
        };
        let tensors = values.iter().map(|(i, t)| {
            let h = wire::header(t, pb::TensorRole::Input, 0, 0, *i as u64);
            (h, t.bytes())
        });
        wire::write_with_tensors(s, &Message::Sequence(answer), tensors).await
    }

    /// A client's step of a sequence: the inputs it sent (not sized from `r.tensors`, a
    /// claim), the outputs that come back with their indices.
    async fn serve_client_step(
        self: &Arc<Self>,
        r: pb::Run,
        model: &submitter::ClusterModel,
        send: &mut quinn::SendStream,
        recv: &mut quinn::RecvStream,
    ) -> Result<(), DistError> {
        let mut given = BTreeMap::new();
        for _ in 0..r.tensors {
            let (h, payload) = wire::read_tensor(recv).await?;
            given.insert(h.edge_id as usize, wire::tensor(&h, payload)?);
        }
        let pairs = wire::pairs(&r.bind);
        let outputs = self
            .submitter
            .run_step(model, r.sequence, &pairs, given)
            .await?;
        let m = Message::RunResult(pb::RunResult {
            run_id: 0,
            tensors: outputs.len() as u32,
            retried: false,
        });
        let tensors = outputs.iter().map(|(i, t)| {
            let h = wire::header(t, pb::TensorRole::Output, r.model_id, 0, *i as u64);
            (h, t.bytes())
        });
        wire::write_with_tensors(send, &m, tensors).await
    }

    async fn serve_fragment(
        self: &Arc<Self>,
        f: pb::Fragment,
        send: &mut quinn::SendStream,
        recv: &mut quinn::RecvStream,
    ) -> Result<(), DistError> {
        let mut weights = BTreeMap::new();
        for _ in 0..f.weight_count {
            let (h, payload) = wire::read_tensor(recv).await?;
            if h.role() != pb::TensorRole::Weight || h.model_id != f.model_id {
                return Err(DistError::Protocol(
                    "expected the fragment's weights".into(),
                ));
            }
            weights.insert(h.edge_id as ValueId, wire::tensor(&h, payload)?);
        }
        let ranges: Vec<pb::WeightRange> = f
            .external
            .iter()
            .map(|r| r.range.clone().unwrap_or_default())
            .collect();
        let from = format!("submitter {}", f.submitter);
        let all: Vec<usize> = (0..ranges.len()).collect();
        let found = self.take_weights(&ranges, &all, send, recv, &from).await?;
        for (r, bytes) in f.external.iter().zip(found) {
            let v = r.value as usize;
            let t = match f.types.get(v) {
                Some(t) => wire::tensor_of(t, bytes)?,
                None => {
                    return Err(DistError::Protocol(format!(
                        "weight for value {v}, which the fragment does not have"
                    )));
                }
            };
            weights.insert(v, t);
        }
        let p = self.participant.clone();
        let model = f.model_id;
        let r = crate::priority::heavy(move || p.load(&f, weights))
            .await
            .map_err(|e| DistError::Protocol(e.to_string()))?;
        let ack = pb::LoadAck {
            model_id: model,
            ok: r.is_ok(),
            reason: r.err().map(|e| e.to_string()).unwrap_or_default(),
            inventory: Some(self.cluster.own_inventory()),
        };
        transport::write_message(send, &Message::LoadAck(ack)).await?;
        Ok(())
    }
}

impl Exec {
    /// The bytes of `ranges` (a model's external weights): those this node holds already
    /// (cache, models folder) are taken from there; the others are asked for with one
    /// WeightsWanted, received from `recv` in that order, checked against their hashes and
    /// kept. `from` names the sender in messages.
    async fn take_weights(
        &self,
        ranges: &[pb::WeightRange],
        needed: &[usize],
        send: &mut quinn::SendStream,
        recv: &mut quinn::RecvStream,
        from: &str,
    ) -> Result<Vec<Bytes>, DistError> {
        // With nothing offered, nothing is asked (and no answer awaited).
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        for r in ranges {
            weights::blob_id(r)?;
            crate::onnx::check_location(&r.location)
                .map_err(|e| DistError::Weights(format!("{} (from {from}): {e}", r.location)))?;
        }
        let subset: Vec<pb::WeightRange> = needed.iter().map(|&i| ranges[i].clone()).collect();
        let found = self.weights.find_all(&subset, true).await?;
        let indices: Vec<u32> = needed
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(&i, _)| i as u32)
            .collect();
        let m = Message::WeightsWanted(pb::WeightsWanted { indices, source: 0 });
        transport::write_message(send, &m).await?;
        self.weights
            .receive_missing(&subset, found, recv, from, |_| {})
            .await
    }
}

/// External tensors up to this size go to the node submitted to before it plans (with those
/// outside the main graph's initializers): small constants are what shape rules and kernel
/// choices read (a Reshape's shape, a Slice's starts), so planning folds them as a single
/// node would. Larger initializers are planned by type alone and go only where they are read.
const PLANNED_WITH_BYTES: u64 = 4 << 10;

/// Of a submission's external weights, those its node must have before it plans (indices,
/// increasing): see [`PLANNED_WITH_BYTES`].
fn planning_needs(model: &Bytes, offered: &[pb::WeightRange]) -> Result<Vec<usize>, DistError> {
    let tensors = crate::onnx::external_tensors(model).map_err(|e| DistError::Runtime(e.into()))?;
    let mut fixed: std::collections::BTreeSet<(&str, u64)> = std::collections::BTreeSet::new();
    for t in tensors.iter().filter(|t| !t.deferrable) {
        fixed.insert((t.location.as_str(), t.offset));
    }
    Ok((0..offered.len())
        .filter(|&i| {
            let r = &offered[i];
            r.length <= PLANNED_WITH_BYTES || fixed.contains(&(r.location.as_str(), r.offset))
        })
        .collect())
}

fn owner_name(conn: &quinn::Connection) -> String {
    format!("client at {}", conn.remote_address())
}

/// Feeds membership changes to the machines until the node is gone.
async fn watch_members(e: Arc<Exec>, mut events: tokio::sync::broadcast::Receiver<MemberEvent>) {
    loop {
        match events.recv().await {
            Ok(ev) => match ev.state {
                MemberState::Dead | MemberState::Left => {
                    e.participant.member_down(&ev.name, ev.generation);
                    e.submitter
                        .member_down(&ev.name, ev.generation, ev.state.as_str());
                }
                MemberState::Alive => {
                    e.participant.member_up(&ev.name, ev.generation);
                    e.submitter.member_up(&ev.name, ev.generation);
                }
                MemberState::Suspect => {}
            },
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("missed {n} membership events");
            }
            Err(_) => return,
        }
    }
}

fn one_way() -> DistError {
    DistError::Protocol("this request needs a bidirectional stream".into())
}

#[cfg(test)]
mod tests;
