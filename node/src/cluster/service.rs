//! What a node serves: it accepts connections (TLS has already checked the peer holds the
//! secret), requires a hello first, then feeds gossip datagrams to the membership task and
//! answers the streams peers open. A node has two endpoints: gossip on its listen address,
//! served by the membership thread, and data (submissions, runs, tensors) on another socket,
//! served by the main runtime; both accept the same hellos and streams.

use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, RecvStream, SendStream, VarInt};
use vkml_protocol::{Message, datagram, error_code, pb};

use super::faults::Verdict;
use super::membership::Input;
use super::transport::{self, PeerHello};
use super::{ClusterError, IncomingStream, Inner, lock};

/// How long a peer may take to send the first frame of a stream it opened.
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts on `endpoint` (the gossip one, or the data one) until it closes. On the gossip
/// endpoint the welcome points to the data endpoint.
pub(crate) async fn accept_loop(inner: Arc<Inner>, endpoint: quinn::Endpoint, gossip: bool) {
    while let Some(incoming) = endpoint.accept().await {
        let inner = inner.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            let conn = match incoming.await {
                Ok(c) => c,
                Err(e) => {
                    // A peer without the secret ends here, before any frame is read.
                    tracing::warn!("refused a connection from {remote}: {e}");
                    return;
                }
            };
            let generation = inner.generation.load(std::sync::atomic::Ordering::Relaxed);
            let i = inner.clone();
            let taken = |h: pb::Hello| async move { i.name_taken(&h, remote).await };
            let data = if gossip {
                inner.data_addr.to_string()
            } else {
                String::new()
            };
            let welcome =
                transport::accept_hello_checked(&conn, &inner.name, generation, &data, taken);
            match welcome.await {
                Ok(peer) => serve(inner, conn, peer).await,
                Err(ClusterError::DuplicateName(why)) => inner.fail(why),
                Err(e) => tracing::warn!("dropped a connection from {remote}: {e}"),
            }
        });
    }
}

/// Serves one connection until it closes: datagrams (members only) and streams.
pub(crate) async fn serve(inner: Arc<Inner>, conn: Connection, peer: PeerHello) {
    let member = peer.role == pb::Role::Member;
    loop {
        tokio::select! {
            d = conn.read_datagram() => match d {
                Ok(d) if member => on_datagram(&inner, &peer.name, d),
                Ok(_) => {}
                Err(_) => break,
            },
            // Streams are served on the main runtime, whichever endpoint they came on: the
            // gossip thread only reads datagrams.
            s = conn.accept_bi() => match s {
                Ok((send, recv)) => {
                    let c = conn.clone();
                    inner.main.spawn(on_stream(inner.clone(), peer.clone(), c, Some(send), recv));
                }
                Err(_) => break,
            },
            s = conn.accept_uni() => match s {
                Ok(recv) => {
                    let c = conn.clone();
                    inner.main.spawn(on_stream(inner.clone(), peer.clone(), c, None, recv));
                }
                Err(_) => break,
            },
        }
    }
}

fn on_datagram(inner: &Inner, from: &str, d: bytes::Bytes) {
    if let Some(f) = &inner.faults
        && f.datagram(from, false) == Verdict::Drop
    {
        return;
    }
    match datagram::decode(&d) {
        Some((datagram::GOSSIP, payload)) => {
            let _ = inner.gossip_tx.send(Input::Data(d.slice_ref(payload)));
        }
        Some((tag, _)) => tracing::debug!("datagram with unknown tag {tag} from {from}"),
        None => {}
    }
}

async fn on_stream(
    inner: Arc<Inner>,
    peer: PeerHello,
    conn: Connection,
    mut send: Option<SendStream>,
    mut recv: RecvStream,
) {
    if let Some(f) = &inner.faults
        && f.partitioned(&peer.name)
    {
        let _ = recv.stop(VarInt::from_u32(error_code::OK));
        return;
    }
    let first =
        match tokio::time::timeout(FIRST_FRAME_TIMEOUT, transport::read_message(&mut recv)).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!("bad stream from {}: {e}", peer.name);
                reply_error(send.as_mut(), error_code::BAD_FRAME, &e.to_string()).await;
                return;
            }
            Err(_) => {
                let _ = recv.stop(VarInt::from_u32(error_code::BAD_FRAME));
                return;
            }
        };
    let member = peer.role == pb::Role::Member;
    match first {
        Message::StatusRequest(_) => {
            let reply = status_reply(&inner);
            if let Some(s) = send.as_mut() {
                if let Err(e) =
                    transport::write_message(s, &Message::StatusReply(Box::new(reply))).await
                {
                    tracing::debug!("status reply to {}: {e}", peer.name);
                }
                let _ = s.finish();
            }
        }
        Message::Inventory(inv) if member => {
            if inv.node == peer.name {
                inner.store_inventory(inv);
            } else {
                tracing::warn!("{} sent an inventory for {}; ignored", peer.name, inv.node);
            }
        }
        Message::Leave(l) if member && l.node == peer.name => {
            inner.mark_left(&l.node, l.generation);
        }
        Message::Tensor(h) if member && inner.tensors.taken() => {
            super::tensors::receive(&inner, &peer.name, h, send, recv).await;
        }
        other => {
            let tx = lock(&inner.incoming).clone();
            match tx {
                Some(tx) => {
                    let _ = tx
                        .send(IncomingStream {
                            peer: peer.name.clone(),
                            client: !member,
                            conn,
                            first: other,
                            send,
                            recv,
                        })
                        .await;
                }
                _ => {
                    let why = format!("this node does not serve {:?} requests", other.kind());
                    reply_error(send.as_mut(), error_code::UNSUPPORTED, &why).await;
                }
            }
        }
    }
}

async fn reply_error(send: Option<&mut SendStream>, code: u32, message: &str) {
    if let Some(s) = send {
        let m = Message::Error(pb::ErrorReply {
            code,
            message: message.chars().take(4000).collect(),
        });
        let _ = transport::write_message(s, &m).await;
        let _ = s.finish();
    }
}

pub(crate) fn status_reply(inner: &Inner) -> pb::StatusReply {
    use std::sync::atomic::Ordering::Relaxed;
    let exec = inner.exec_status();
    let (runs_in_flight, runs_finished) = crate::exec::busy::runs();
    pb::StatusReply {
        models: exec.models,
        fragments: exec.fragments,
        weight_bytes_received: exec.weight_bytes_received,
        weight_bytes_cached: exec.weight_bytes_cached,
        sequences_kept: exec.sequences_kept,
        sequence_bytes: exec.sequence_bytes,
        sequence_gpu_bytes: exec.sequence_gpu_bytes,
        shared_weight_bytes: exec.shared_weight_bytes,
        weight_bytes_reused: exec.weight_bytes_reused,
        node: inner.name.clone(),
        edge_bytes_sent: inner.exec_stats.edge_bytes_sent.load(Relaxed),
        edge_bytes_received: inner.exec_stats.edge_bytes_received.load(Relaxed),
        members: inner
            .read_view()
            .members()
            .into_iter()
            .map(|m| pb::MemberStatus {
                name: m.name,
                state: m.state.to_wire() as i32,
                addr: m.addr.to_string(),
                generation: m.generation,
                devices: m.devices,
            })
            .collect(),
        tensor_bytes_sent: inner.tensors.bytes_sent(),
        tensor_bytes_received: inner.tensors.bytes_received(),
        runs_in_flight,
        runs_finished,
        device_loads: crate::exec::busy::loads()
            .into_iter()
            .map(|l| pb::DeviceLoad {
                device: l.device,
                busy_ppm: (l.busy_fraction * 1e6).round() as u32,
                busy_ns: l.busy_ns,
            })
            .collect(),
        peers: inner.exec_stats.peers(),
    }
}
