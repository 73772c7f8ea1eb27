//! How the execution layer reaches other nodes: tensors, run starts and control messages,
//! with messages for this node itself handed over in process (the submitter is usually a
//! participant too).

use std::sync::{OnceLock, Weak};

use bytes::Bytes;
use tokio::runtime::Handle;
use vkml_protocol::{Message, pb};

use super::participant::Step;
use super::{DistError, Exec, wire};
use crate::cluster::{Cluster, transport};
use crate::tensor::Tensor;

/// Sends of a message that must be answered, before it is given up.
const ANSWER_TRIES: u32 = 60;
/// How long an answer may take before the message counts as lost (a live peer answers in
/// milliseconds).
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Link {
    cluster: Cluster,
    me: String,
    local: OnceLock<Weak<Exec>>,
    /// Sends start from threads outside the runtime too (a run's completion thread).
    rt: Handle,
}

impl Link {
    /// Call inside the tokio runtime.
    /// Gossips what loaded parts reserve on this node's devices (see `Cluster::set_reserved`).
    pub fn publish_reserved(&self, reserved: &[u64]) {
        self.cluster.set_reserved(reserved);
    }

    pub fn new(cluster: Cluster) -> Link {
        Link {
            me: cluster.name().to_string(),
            cluster,
            local: OnceLock::new(),
            rt: Handle::current(),
        }
    }

    /// The op fault injection makes panic here (tests).
    pub(super) fn panic_op(&self) -> Option<String> {
        self.cluster.panic_op()
    }

    pub(super) fn attach(&self, exec: Weak<Exec>) {
        let _ = self.local.set(exec);
    }

    fn local(&self) -> Option<std::sync::Arc<Exec>> {
        self.local.get().and_then(Weak::upgrade)
    }

    /// Sends one tensor to `to` (this node included); resolves once the receiver has it all.
    pub async fn send_tensor(
        &self,
        to: &str,
        h: pb::TensorHeader,
        payload: Bytes,
    ) -> Result<(), DistError> {
        if to == self.me {
            if let Some(exec) = self.local() {
                exec.tensor_arrived(&self.me, &h, payload);
            }
            return Ok(());
        }
        let edge = h.role() == pb::TensorRole::Edge;
        let bytes = payload.len() as u64;
        // Striped over several connections when large; resolves once the peer has it all.
        self.cluster.send_tensor(to, h, payload).await?;
        if edge {
            self.cluster.exec_stats().edge_sent(to, bytes);
        }
        Ok(())
    }

    /// A machine's control message, carried out now: to this node itself at once (in order
    /// with the machine's other actions), to another on a task of its own. A lost message is
    /// only logged: membership or the run deadline settles what it was about.
    pub fn post(&self, to: &str, m: Message) {
        if to == self.me {
            if let Some(exec) = self.local() {
                exec.message_from(&self.me, m);
            }
            return;
        }
        let Some(exec) = self.local() else { return };
        let to = to.to_string();
        self.rt.spawn(async move {
            if let Err(e) = exec.link.send_message(&to, &m).await {
                tracing::debug!("cannot send {:?} to {to}: {e}", m.kind());
            }
        });
    }

    /// A control message to another node, sent again every second until it answers (at
    /// most [`ANSWER_TRIES`] times; by then a node still unreachable has been declared dead,
    /// and the verdict settles what the message was about).
    pub fn post_until_answered(&self, to: &str, m: Message) {
        let Some(exec) = self.local() else { return };
        let to = to.to_string();
        self.rt.spawn(async move {
            for _ in 0..ANSWER_TRIES {
                let sent = tokio::time::timeout(ANSWER_WAIT, exec.link.send_acked(&to, &m)).await;
                match sent {
                    Ok(Ok(_)) => return,
                    Ok(Err(e)) => tracing::debug!("{:?} to {to} not answered: {e}", m.kind()),
                    Err(_) => tracing::debug!("{:?} to {to} not answered in time", m.kind()),
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }

    /// One message on a stream of its own.
    pub async fn send_message(&self, to: &str, m: &Message) -> Result<(), DistError> {
        if to == self.me {
            if let Some(exec) = self.local() {
                exec.message_from(&self.me, m.clone());
            }
            return Ok(());
        }
        let mut s = self.cluster.open_uni(to).await?;
        transport::write_message(&mut s, m).await?;
        s.finish()
            .map_err(|e| DistError::Peer(format!("{to}: {e}")))?;
        Ok(())
    }

    /// An `Unload` or a `RunFailed` to `to`, resolving once `to` answered that it is done (an
    /// error when it could not be reached, refused the stream, or the connection was lost).
    /// The answer is the message itself, or for an `Unload` the node's inventory after it let
    /// the model's memory go.
    pub async fn send_acked(&self, to: &str, m: &Message) -> Result<Message, DistError> {
        let (mut s, mut r) = self.cluster.open_bi(to).await?;
        transport::write_message(&mut s, m).await?;
        s.finish()
            .map_err(|e| DistError::Peer(format!("{to}: {e}")))?;
        match wire::expect_message(&mut r).await? {
            ack if ack.kind() == m.kind() => Ok(ack),
            inv @ Message::Inventory(_) if matches!(m, Message::Unload(_)) => Ok(inv),
            other => Err(DistError::Protocol(format!(
                "{to} answered {:?} to {:?}",
                other.kind(),
                m.kind()
            ))),
        }
    }

    /// Starts run `run` of fragment `model` on `to`, with the graph inputs it reads.
    /// Resolves once `to` answered that the run started: a start it refused, dropped (a
    /// partition) or never got (the connection died) is an error, which fails the run naming
    /// `to`, instead of a run that waits for a part nobody started. The answer is the
    /// application's, not the transport's acknowledgement of the bytes: those can all be
    /// acknowledged before the receiver drops the stream.
    pub async fn start_remote(
        &self,
        to: &str,
        model: u64,
        run: u64,
        inputs: Vec<(usize, Tensor)>,
        step: Option<&Step>,
    ) -> Result<(), DistError> {
        let (mut s, mut r) = self.cluster.open_bi(to).await?;
        let mut m = pb::Run {
            model_id: model,
            run_id: run,
            tensors: inputs.len() as u32,
            ..Default::default()
        };
        if let Some(step) = step {
            m.sequence = step.sequence;
            m.take = step.take.iter().map(|&i| i as u32).collect();
            m.keep = wire::bindings(&step.keep);
        }
        let tensors = inputs.iter().map(|(i, t)| {
            let h = wire::header(t, pb::TensorRole::Input, model, run, *i as u64);
            (h, t.bytes())
        });
        wire::write_with_tensors(&mut s, &Message::Run(m), tensors).await?;
        s.finish()
            .map_err(|e| DistError::Peer(format!("{to}: {e}")))?;
        match wire::expect_message(&mut r).await {
            Ok(Message::Run(_)) => Ok(()),
            Ok(other) => Err(DistError::Protocol(format!(
                "{to} answered {:?} to a run",
                other.kind()
            ))),
            Err(e) => Err(DistError::Peer(format!("{to} did not start the run: {e}"))),
        }
    }
    /// Takes the values `keeper` keeps for inputs `wanted` of this node's sequence `seq`
    /// (docs/CLUSTER.md, "Sequences").
    pub async fn fetch(
        &self,
        keeper: &str,
        seq: u64,
        wanted: &[usize],
    ) -> Result<Vec<(usize, Tensor)>, DistError> {
        let (mut s, mut r) = self.cluster.open_bi(keeper).await?;
        let m = Message::Sequence(pb::SequenceOp {
            sequence: seq,
            op: pb::sequence_op::Op::Fetch as i32,
            inputs: wanted.iter().map(|&i| i as u32).collect(),
            ..Default::default()
        });
        transport::write_message(&mut s, &m).await?;
        s.finish()
            .map_err(|e| DistError::Peer(format!("{keeper}: {e}")))?;
        let n = match wire::expect_message(&mut r).await? {
            Message::Sequence(a) => a.tensors,
            other => {
                return Err(DistError::Protocol(format!(
                    "{keeper} answered {:?} to a fetch",
                    other.kind()
                )));
            }
        };
        let mut values = Vec::new();
        for _ in 0..n {
            let (h, payload) = wire::read_tensor(&mut r).await?;
            values.push((h.edge_id as usize, wire::tensor(&h, payload)?));
        }
        if values.len() != wanted.len() {
            return Err(DistError::Protocol(format!(
                "{keeper} gave {} of {} sequence values",
                values.len(),
                wanted.len()
            )));
        }
        Ok(values)
    }
}
