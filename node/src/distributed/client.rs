//! The tool's side of cluster execution: submit a model to any node, run it many times from
//! many threads, unload it.
//!
//! ```no_run
//! use vkml::cluster::Secret;
//! use vkml::distributed::client::ClusterClient;
//! use vkml::Tensor;
//! let secret = Secret::read(std::path::Path::new("cluster.key"))?;
//! let cluster = ClusterClient::connect("10.0.0.2:7000", &secret)?;
//! let model = cluster.load(std::path::Path::new("model.onnx"), |_| {})?;
//! let x = Tensor::from_vec(vec![1, 4], vec![1.0f32, 2.0, 3.0, 4.0]);
//! let outputs = model.run(&[("x", x)])?;
//! model.unload()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vkml_protocol::{Message, error_code, pb};

use super::side_files::SideWeights;
use super::{DistError, lock, wire};
use crate::cluster::client::Client;
use crate::cluster::{Secret, transport};
use crate::tensor::Tensor;

/// A connection to one node of a cluster, usable from any number of threads.
///
/// Dropping the last handle without [`close`](ClusterClient::close) closes the connection at
/// once, as a killed client's would: the node unloads the models loaded through it after its
/// lease grace, and a model still held fails its runs. `close` lets the models still held
/// finish first: the connection then closes when the last of them goes.
pub struct ClusterClient {
    conn: Arc<Connected>,
    /// Cleared by `close`.
    abrupt: AtomicBool,
}

/// The connection and its runtime, shared by the client and its models.
struct Connected {
    rt: tokio::runtime::Runtime,
    client: Client,
    /// The external weights of the models loaded through this connection, by submission
    /// number: the node takes each node's part from here as it loads it (see `serve`).
    served: Served,
}

type Served = Arc<Mutex<BTreeMap<u64, Arc<SideWeights>>>>;

/// A model live on the cluster under `id`.
pub struct RemoteModel {
    cluster: Arc<Connected>,
    pub id: u64,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Where the plan put it; None when its input sizes are symbolic (planned per run).
    pub placement: Option<pb::Placement>,
    /// Its submission number, under which its external weights are served (0: none).
    source: u64,
    unloaded: bool,
}

/// One run's outputs, in the graph's output order, and whether a node failed during the run
/// and it was retried on a new plan.
pub struct RunOutput {
    pub outputs: Vec<(String, Tensor)>,
    pub retried: bool,
}

impl ClusterClient {
    pub fn connect(addr: &str, secret: &Secret) -> Result<Arc<ClusterClient>, DistError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| DistError::Peer(format!("cannot start the async runtime: {e}")))?;
        let client = rt.block_on(Client::connect(addr, secret))?;
        let served = Served::default();
        rt.spawn(serve(client.conn.clone(), served.clone()));
        Ok(Arc::new(ClusterClient {
            conn: Arc::new(Connected { rt, client, served }),
            abrupt: AtomicBool::new(true),
        }))
    }

    /// Sends the model file to the node, which plans it over the cluster and streams each
    /// node its part. `progress` sees the stages and byte counts as they go.
    pub fn load(
        &self,
        path: &Path,
        progress: impl FnMut(&pb::LoadProgress),
    ) -> Result<RemoteModel, DistError> {
        let data = bytes::Bytes::from(std::fs::read(path).map_err(|e| {
            DistError::Runtime(crate::Error::Input(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        })?);
        self.conn.load(path, data, progress)
    }

    /// [`ClusterClient::load`] for a model whose bytes are given (one rewritten in memory:
    /// generate/window.rs); `path` names it, and its folder holds the model's external data.
    pub fn load_bytes(
        &self,
        path: &Path,
        data: bytes::Bytes,
        progress: impl FnMut(&pb::LoadProgress),
    ) -> Result<RemoteModel, DistError> {
        self.conn.load(path, data, progress)
    }

    /// Closes the connection once no model loaded through it is held (at once when none
    /// is), waiting up to 2 s for the node to hear of it.
    pub fn close(self: Arc<Self>) {
        if let Ok(c) = Arc::try_unwrap(self) {
            c.abrupt.store(false, Ordering::Relaxed);
            let conn = Arc::clone(&c.conn);
            drop(c);
            // Else models hold it: it closes when the last of them is dropped.
            if let Ok(conn) = Arc::try_unwrap(conn) {
                conn.close();
            }
        }
    }
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        if self.abrupt.load(Ordering::Relaxed) {
            self.conn
                .client
                .conn
                .close(0u32.into(), b"the client let go of its connection");
        }
    }
}

impl Connected {
    fn load(
        self: &Arc<Self>,
        path: &Path,
        data: bytes::Bytes,
        mut progress: impl FnMut(&pb::LoadProgress),
    ) -> Result<RemoteModel, DistError> {
        let side = Arc::new(super::side_files::prepare(path, &data, &mut progress)?);
        let name = path
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
        let to = self.client.node.clone();
        // Served from now until the model is unloaded: the node asks for each node's part
        // as it loads it, and again when a node is lost and its part goes elsewhere.
        let source = if side.ranges.is_empty() {
            0
        } else {
            let n = rand::random::<u64>().max(1);
            lock(&self.served).insert(n, side.clone());
            n
        };
        let loaded = self.rt.block_on(self.naming(async {
            let (mut send, mut recv) = self
                .client
                .conn
                .open_bi()
                .await
                .map_err(|e| DistError::Peer(e.to_string()))?;
            let m = Message::Submit(pb::Submit {
                name,
                model_bytes: data.len() as u64,
                weights: side.ranges.clone(),
                source,
            });
            transport::write_message(&mut send, &m).await?;
            let total = data.len() as u64;
            let mut done = 0u64;
            for piece in data.chunks(4 << 20) {
                send.write_all(piece)
                    .await
                    .map_err(|e| DistError::Peer(format!("sending the model: {e}")))?;
                done += piece.len() as u64;
                progress(&pb::LoadProgress {
                    stage: "sending the model".into(),
                    done_bytes: done,
                    total_bytes: total,
                    node: to.clone(),
                });
            }
            if !side.ranges.is_empty() {
                let sent = send_wanted(&mut send, &mut recv, &side, &to, &mut progress).await;
                if let Err(e) = sent {
                    // The node stopped reading: its reply says why, when it sent one.
                    let why = tokio::time::timeout(
                        Duration::from_secs(5),
                        wire::expect_message(&mut recv),
                    );
                    return Err(match why.await {
                        Ok(Err(reply @ DistError::Remote(_))) => reply,
                        _ => e,
                    });
                }
            }
            let _ = send.finish();
            loop {
                match wire::expect_message(&mut recv).await? {
                    Message::LoadProgress(p) => progress(&p),
                    Message::Loaded(l) => break Ok::<_, DistError>(l),
                    other => {
                        return Err(DistError::Protocol(format!(
                            "unexpected answer {:?}",
                            other.kind()
                        )));
                    }
                }
            }
        }));
        let loaded = match loaded {
            Ok(l) => l,
            Err(e) => {
                lock(&self.served).remove(&source);
                return Err(e);
            }
        };
        Ok(RemoteModel {
            cluster: self.clone(),
            id: loaded.model_id,
            inputs: loaded.inputs,
            outputs: loaded.outputs,
            placement: loaded.placement,
            source,
            unloaded: false,
        })
    }

    async fn run_async(
        &self,
        model: u64,
        inputs: Vec<Tensor>,
    ) -> Result<(Vec<Tensor>, bool), DistError> {
        let m = pb::Run {
            model_id: model,
            ..Default::default()
        };
        let (outs, retried) = self.exchange(m, inputs.into_iter().enumerate()).await?;
        Ok((outs.into_values().collect(), retried))
    }

    /// One step of sequence `seq`: the given inputs by index; the outputs that come back,
    /// by index.
    async fn step_async(
        &self,
        model: u64,
        seq: u64,
        bind: &[(usize, usize)],
        given: BTreeMap<usize, Tensor>,
    ) -> Result<BTreeMap<usize, Tensor>, DistError> {
        let m = pb::Run {
            model_id: model,
            sequence: seq,
            bind: wire::bindings(bind),
            ..Default::default()
        };
        Ok(self.exchange(m, given).await?.0)
    }

    /// Sends `m` with `inputs` (graph input index, tensor) on a stream of its own; the
    /// outputs by index, and whether the run was retried.
    async fn exchange(
        &self,
        mut m: pb::Run,
        inputs: impl IntoIterator<Item = (usize, Tensor)>,
    ) -> Result<(BTreeMap<usize, Tensor>, bool), DistError> {
        let (mut send, mut recv) = self
            .client
            .conn
            .open_bi()
            .await
            .map_err(|e| DistError::Peer(e.to_string()))?;
        let inputs: Vec<(usize, Tensor)> = inputs.into_iter().collect();
        m.tensors = inputs.len() as u32;
        let model = m.model_id;
        let tensors = inputs.iter().map(|(i, t)| {
            let h = wire::header(t, pb::TensorRole::Input, model, 0, *i as u64);
            (h, t.bytes())
        });
        wire::write_with_tensors(&mut send, &Message::Run(m), tensors).await?;
        let _ = send.finish();
        let r = match wire::expect_message(&mut recv).await? {
            Message::RunResult(r) => r,
            other => {
                return Err(DistError::Protocol(format!(
                    "unexpected answer {:?}",
                    other.kind()
                )));
            }
        };
        let mut outs = BTreeMap::new();
        for _ in 0..r.tensors {
            let (h, payload) = wire::read_tensor(&mut recv).await?;
            outs.insert(h.edge_id as usize, wire::tensor(&h, payload)?);
        }
        Ok((outs, r.retried))
    }

    /// `work`'s error, or, when the connection to the node is gone, what became of the node
    /// (naming it) instead of a bare "connection lost".
    async fn naming<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, DistError>>,
    ) -> Result<T, DistError> {
        let r = work.await;
        match (r, self.client.lost()) {
            (Err(e @ (DistError::Remote(_) | DistError::Run(_) | DistError::Runtime(_))), _) => {
                Err(e)
            }
            (Err(e), Some(lost)) => Err(DistError::Peer(format!("{lost} ({e})"))),
            (r, _) => r,
        }
    }

    /// Closes the connection, waiting up to 2 s for the node to hear of it.
    fn close(self) {
        let Connected { rt, client, .. } = self;
        rt.block_on(async {
            let _ = tokio::time::timeout(Duration::from_secs(2), client.close()).await;
        });
    }
}

impl RemoteModel {
    /// Runs once with named inputs (every graph input, once). Callable from many threads at
    /// once: concurrent runs pipeline through the cluster's nodes.
    pub fn run(&self, inputs: &[(&str, Tensor)]) -> Result<RunOutput, DistError> {
        let mut by_name: BTreeMap<&str, &Tensor> = BTreeMap::new();
        for (n, t) in inputs {
            if by_name.insert(n, t).is_some() {
                return Err(input_err(format!("'{n}' is given twice")));
            }
        }
        for n in by_name.keys() {
            if !self.inputs.iter().any(|i| i == n) {
                return Err(input_err(format!(
                    "the model has no input named '{n}' (its inputs: {})",
                    self.inputs.join(", ")
                )));
            }
        }
        let ordered = self
            .inputs
            .iter()
            .map(|n| {
                by_name
                    .get(n.as_str())
                    .map(|t| (*t).clone())
                    .ok_or_else(|| input_err(format!("missing input '{n}'")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (outs, retried) = self.cluster.rt.block_on(
            self.cluster
                .naming(self.cluster.run_async(self.id, ordered)),
        )?;
        Ok(RunOutput {
            outputs: self.outputs.iter().cloned().zip(outs).collect(),
            retried,
        })
    }

    /// A sequence of runs in which each output of `pairs` (output name, input name) becomes
    /// that input of the next run, starting from `initial` (one value per pair), with the
    /// values kept on the nodes that make them between runs (docs/CLUSTER.md, "Sequences"):
    /// a language model's caches, of which a step then moves only what crosses each cut.
    pub fn begin_sequence(
        &self,
        pairs: &[(&str, &str)],
        initial: Vec<Tensor>,
    ) -> Result<RemoteSequence, DistError> {
        if pairs.len() != initial.len() {
            return Err(input_err(format!(
                "{} bound pairs but {} initial values",
                pairs.len(),
                initial.len()
            )));
        }
        let index = |names: &[String], n: &str, what: &str| {
            names
                .iter()
                .position(|x| x == n)
                .ok_or_else(|| input_err(format!("the model has no {what} named '{n}'")))
        };
        let mut bind = Vec::with_capacity(pairs.len());
        for &(o, i) in pairs {
            let pair = (
                index(&self.outputs, o, "output")?,
                index(&self.inputs, i, "input")?,
            );
            if bind.iter().any(|&(_, b)| b == pair.1) {
                return Err(input_err(format!("input '{i}' is bound twice")));
            }
            bind.push(pair);
        }
        let initial = bind.iter().map(|&(_, i)| i).zip(initial).collect();
        Ok(RemoteSequence {
            cluster: self.cluster.clone(),
            model: self.id,
            id: rand::random::<u64>().max(1),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            bind,
            initial: Some(initial),
            ended: false,
        })
    }

    /// Frees the model on every node. (Dropping a `RemoteModel` asks for the same without
    /// waiting for the answer.)
    pub fn unload(mut self) -> Result<(), DistError> {
        self.unloaded = true;
        lock(&self.cluster.served).remove(&self.source);
        let cluster = self.cluster.clone();
        cluster
            .rt
            .block_on(cluster.naming(unload(cluster.client.conn.clone(), self.id)))
    }
}

impl Drop for RemoteModel {
    fn drop(&mut self) {
        lock(&self.cluster.served).remove(&self.source);
        if !self.unloaded {
            // Not block_on: a drop may happen inside someone's async context. The task holds
            // the connection, not the client: the last client reference dropped inside its
            // own runtime would panic. Should the client go first, its connection closing
            // ends the model's lease instead.
            let (conn, id) = (self.cluster.client.conn.clone(), self.id);
            self.cluster.rt.spawn(async move {
                if let Err(e) = unload(conn, id).await {
                    tracing::debug!("unloading model {id:016x} on drop: {e}");
                }
            });
        }
    }
}

/// A sequence of runs of a [`RemoteModel`] whose bound values stay on the nodes: see
/// [`RemoteModel::begin_sequence`]. Dropping it ends the sequence without waiting; the nodes
/// also free a sequence idle for their `VKML_SEQUENCE_IDLE`.
pub struct RemoteSequence {
    cluster: Arc<Connected>,
    model: u64,
    id: u64,
    inputs: Vec<String>,
    outputs: Vec<String>,
    /// (graph output, graph input) per binding.
    bind: Vec<(usize, usize)>,
    /// The bound values of the first step, until it has run.
    initial: Option<Vec<(usize, Tensor)>>,
    ended: bool,
}

impl RemoteSequence {
    /// Runs one step: `feeds` are the inputs that are not bound; the outputs that are not
    /// bound come back in graph order. A step that fails ends the sequence (its values may
    /// be half updated on the nodes): begin another to go on.
    pub fn step(&mut self, feeds: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>, DistError> {
        let mut given: BTreeMap<usize, Tensor> = BTreeMap::new();
        for (n, t) in feeds {
            let i = self.inputs.iter().position(|x| x == n).ok_or_else(|| {
                input_err(format!(
                    "the model has no input named '{n}' (its inputs: {})",
                    self.inputs.join(", ")
                ))
            })?;
            if self.bind.iter().any(|&(_, b)| b == i) {
                return Err(input_err(format!(
                    "'{n}' is bound: its value comes from the sequence"
                )));
            }
            if given.insert(i, t.clone()).is_some() {
                return Err(input_err(format!("'{n}' is given twice")));
            }
        }
        for (i, n) in self.inputs.iter().enumerate() {
            if !given.contains_key(&i) && !self.bind.iter().any(|&(_, b)| b == i) {
                return Err(input_err(format!("missing input '{n}'")));
            }
        }
        if let Some(initial) = &self.initial {
            given.extend(initial.iter().cloned());
        }
        let run = self
            .cluster
            .step_async(self.model, self.id, &self.bind, given);
        let outs = self
            .cluster
            .rt
            .block_on(self.cluster.naming(run))
            .inspect_err(|_| self.ended = true)?;
        self.initial = None;
        Ok(outs
            .into_iter()
            .filter_map(|(i, t)| self.outputs.get(i).map(|n| (n.clone(), t)))
            .collect())
    }

    /// Ends the sequence, waiting for the node to pass it on.
    pub fn end(mut self) -> Result<(), DistError> {
        self.ended = true;
        let (conn, model, id) = (self.cluster.client.conn.clone(), self.model, self.id);
        self.cluster
            .rt
            .block_on(self.cluster.naming(end_sequence(conn, model, id)))
    }
}

impl Drop for RemoteSequence {
    fn drop(&mut self) {
        if self.ended || self.initial.is_some() {
            return;
        }
        // Not block_on, as for a model's drop.
        let (conn, model, id) = (self.cluster.client.conn.clone(), self.model, self.id);
        self.cluster.rt.spawn(async move {
            if let Err(e) = end_sequence(conn, model, id).await {
                tracing::debug!("ending sequence {id:016x} on drop: {e}");
            }
        });
    }
}

async fn end_sequence(conn: quinn::Connection, model: u64, id: u64) -> Result<(), DistError> {
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| DistError::Peer(e.to_string()))?;
    let m = Message::Sequence(pb::SequenceOp {
        sequence: id,
        op: pb::sequence_op::Op::End as i32,
        model_id: model,
        ..Default::default()
    });
    transport::write_message(&mut send, &m).await?;
    let _ = send.finish();
    match wire::expect_message(&mut recv).await? {
        Message::Sequence(_) => Ok(()),
        other => Err(DistError::Protocol(format!(
            "unexpected answer {:?}",
            other.kind()
        ))),
    }
}

/// Streams the external weights the node asked for, in its order, from the files' mappings
/// (handing the pages read back as it goes).
async fn send_wanted(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    side: &super::side_files::SideWeights,
    to: &str,
    progress: &mut impl FnMut(&pb::LoadProgress),
) -> Result<(), DistError> {
    let wanted = match wire::expect_message(recv).await? {
        Message::WeightsWanted(w) => w.indices,
        other => {
            return Err(DistError::Protocol(format!(
                "expected the weights the node wants, got {:?}",
                other.kind()
            )));
        }
    };
    let mut picked = Vec::with_capacity(wanted.len());
    for &i in &wanted {
        let b = side.bytes.get(i as usize).ok_or_else(|| {
            DistError::Protocol(format!(
                "the node asked for weight {i}, which was not offered"
            ))
        })?;
        picked.push(b.clone());
    }
    let total: u64 = picked.iter().map(|b| b.len() as u64).sum();
    let mut done = 0u64;
    let mut report = |n: u64| {
        done += n;
        progress(&pb::LoadProgress {
            stage: "sending weights".into(),
            done_bytes: done,
            total_bytes: total,
            node: to.to_string(),
        })
    };
    report(0);
    wire::send_weights(send, picked, report).await
}

/// Serves the weights of this connection's models to the node, on the streams it opens,
/// until the connection closes.
async fn serve(conn: quinn::Connection, served: Served) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        tokio::spawn(serve_one(send, recv, served.clone()));
    }
}

/// One request: a `WeightsWanted` naming a submission, answered with the raw bytes asked
/// for, in order, from the files' mappings. A request for a model no longer held (or any
/// other) is refused by resetting the stream: the node's error says the client stopped
/// serving.
async fn serve_one(mut send: quinn::SendStream, mut recv: quinn::RecvStream, served: Served) {
    let refuse = |send: &mut quinn::SendStream, why: &str| {
        tracing::debug!("a weight request refused: {why}");
        let _ = send.reset(quinn::VarInt::from_u32(error_code::FAILED));
    };
    let wanted = match wire::expect_message(&mut recv).await {
        Ok(Message::WeightsWanted(w)) => w,
        Ok(other) => return refuse(&mut send, &format!("{:?}", other.kind())),
        Err(e) => return refuse(&mut send, &e.to_string()),
    };
    let Some(side) = lock(&served).get(&wanted.source).cloned() else {
        return refuse(&mut send, "no such model");
    };
    let picked: Option<Vec<bytes::Bytes>> = wanted
        .indices
        .iter()
        .map(|&i| side.bytes.get(i as usize).cloned())
        .collect();
    let Some(picked) = picked else {
        return refuse(&mut send, "an index out of range");
    };
    match wire::send_weights(&mut send, picked, |_| {}).await {
        Ok(()) => {
            let _ = send.finish();
        }
        Err(e) => refuse(&mut send, &e.to_string()),
    }
}

async fn unload(conn: quinn::Connection, id: u64) -> Result<(), DistError> {
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| DistError::Peer(e.to_string()))?;
    let m = Message::Unload(pb::Unload {
        model_id: id,
        reason: String::new(),
        keep_weights: false,
    });
    transport::write_message(&mut send, &m).await?;
    let _ = send.finish();
    match wire::expect_message(&mut recv).await? {
        Message::Unload(_) => Ok(()),
        other => Err(DistError::Protocol(format!(
            "unexpected answer {:?}",
            other.kind()
        ))),
    }
}

fn input_err(m: String) -> DistError {
    DistError::Runtime(crate::Error::Input(m))
}
