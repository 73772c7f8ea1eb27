//! Where the weights of a submitted model are when the node it was submitted to does not hold
//! them: with the client that submitted it. Such a node plans the model from its `.onnx`
//! bytes alone (the large initializers deferred), then takes from the client only its own
//! part, and relays to each other participant the weights it lacks without keeping them, so
//! no node receives more than its part (docs/CLUSTER.md, "Weights that stay put").
//!
//! The client serves them on streams this node opens on the client's connection: a
//! `WeightsWanted` naming the submission (`source`) and the indices (into `Submit.weights`)
//! wanted, answered with their raw bytes in that order.

use std::collections::BTreeMap;
use std::sync::Arc;

use vkml_protocol::{Message, pb};

use super::DistError;
use super::weights::WeightStore;
use crate::cluster::transport;

/// Bytes passed on at a time while relaying.
const CHUNK: usize = 1 << 20;

/// A submission's weights as its client serves them.
pub struct WeightSource {
    conn: quinn::Connection,
    /// The submission's number, as the client knows it (`Submit.source`).
    id: u64,
    /// Each weight's index in the submission's list, by (location, offset).
    index: BTreeMap<(String, u64), u32>,
}

impl WeightSource {
    /// The weights `ranges` (the submission's list) that the client on `conn` serves as
    /// submission `id`.
    pub fn new(conn: quinn::Connection, id: u64, ranges: &[pb::WeightRange]) -> WeightSource {
        let index = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.location.clone(), r.offset), i as u32))
            .collect();
        WeightSource { conn, id, index }
    }

    /// Asks the client for `ranges`; their bytes follow on the stream returned, in order.
    async fn open(&self, ranges: &[&pb::WeightRange]) -> Result<quinn::RecvStream, DistError> {
        let indices = ranges
            .iter()
            .map(|r| {
                self.index
                    .get(&(r.location.clone(), r.offset))
                    .copied()
                    .ok_or_else(|| {
                        DistError::Protocol(format!(
                            "the weight at {} offset {} is not one the client offered",
                            r.location, r.offset
                        ))
                    })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let (mut send, recv) = self.conn.open_bi().await.map_err(|e| self.gone(&e))?;
        let m = Message::WeightsWanted(pb::WeightsWanted {
            indices,
            source: self.id,
        });
        transport::write_message(&mut send, &m).await?;
        let _ = send.finish();
        Ok(recv)
    }

    /// Why the client can serve nothing more.
    fn gone(&self, why: &dyn std::fmt::Display) -> DistError {
        DistError::Peer(format!(
            "the client at {} that submitted the model no longer serves its weights ({why})",
            self.conn.remote_address()
        ))
    }

    fn named(&self, e: DistError) -> DistError {
        match e {
            DistError::Peer(p) => self.gone(&p),
            other => other,
        }
    }

    /// The bytes of `ranges`, this node's own part: from its store when there, else from
    /// the client, kept in the store as they arrive. `progress` hears of the bytes taken.
    pub async fn take(
        &self,
        store: &Arc<WeightStore>,
        ranges: &[pb::WeightRange],
        mut progress: impl FnMut(u64),
    ) -> Result<Vec<bytes::Bytes>, DistError> {
        let found = store.find_all(ranges, true).await?;
        progress(found.iter().flatten().map(|b| b.len() as u64).sum());
        let missing: Vec<&pb::WeightRange> = ranges
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(r, _)| r)
            .collect();
        if missing.is_empty() {
            return Ok(found.into_iter().flatten().collect());
        }
        let mut recv = self.open(&missing).await?;
        store
            .receive_missing(ranges, found, &mut recv, "the client", progress)
            .await
            .map_err(|e| self.named(e))
    }

    /// Sends `ranges` down `send`, in order, for another node: from this node's store when
    /// it has them, else passed on from the client as they arrive, never kept here.
    pub async fn relay(
        &self,
        store: &Arc<WeightStore>,
        ranges: &[pb::WeightRange],
        send: &mut quinn::SendStream,
        mut progress: impl FnMut(u64),
    ) -> Result<(), DistError> {
        let found = store.find_all(ranges, false).await?;
        let missing: Vec<&pb::WeightRange> = ranges
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(r, _)| r)
            .collect();
        let mut from_client = if missing.is_empty() {
            None
        } else {
            Some(self.open(&missing).await?)
        };
        for (r, f) in ranges.iter().zip(found) {
            match (f, from_client.as_mut()) {
                (Some(b), _) => super::wire::send_weights(send, vec![b], &mut progress).await?,
                (None, Some(recv)) => self.pass_on(r, recv, send, &mut progress).await?,
                (None, None) => unreachable!("a stream is opened for every missing weight"),
            }
        }
        Ok(())
    }

    /// Copies one weight's bytes from the client's stream to `send`, chunk by chunk.
    async fn pass_on(
        &self,
        r: &pb::WeightRange,
        recv: &mut quinn::RecvStream,
        send: &mut quinn::SendStream,
        progress: &mut impl FnMut(u64),
    ) -> Result<(), DistError> {
        let mut left = r.length;
        while left > 0 {
            let want = left.min(CHUNK as u64) as usize;
            let chunk = recv
                .read_chunk(want, true)
                .await
                .map_err(|e| self.gone(&e))?
                .ok_or_else(|| self.gone(&"its stream ended early"))?;
            let n = chunk.bytes.len() as u64;
            left -= n;
            send.write_chunk(chunk.bytes)
                .await
                .map_err(|e| DistError::Peer(format!("sending weights: {e}")))?;
            progress(n);
        }
        Ok(())
    }
}
