//! Whole tensors between members, striped over several connections ("lanes") when large.
//!
//! One QUIC connection tops out well below what a TCP socket moves on the same host: every
//! packet is encrypted, paced and acknowledged by the one task that drives the connection, so a
//! single connection is bound to about one core (BENCHMARKS.md, "transport": 43-47 % of TCP on
//! loopback). Several connections are driven by several tasks on several cores, so a payload
//! over [`STRIPE_THRESHOLD`] is cut into equal stripes sent concurrently, one per lane: the main
//! connection is lane 0, the others are extra connections to the same member (each with its own
//! hello, served like any other), cached per (address, generation, lane).
//!
//! Each stripe is one bidirectional stream: a `Tensor` frame whose header says where the
//! stripe lies (fields 8-11 of `TensorHeader`), the stripe's raw bytes, and from the receiver
//! one ACK byte once it has read them all, or an `ErrorReply` frame saying why it refused.
//! The receiver reassembles stripes into one allocation made on the first stripe: each stripe
//! owns a disjoint piece of it (BytesMut::split_off), so lanes fill it without a lock and
//! without a second copy, and the pieces join back for free (unsplit) when the last arrives.
//!
//! Which stripes to accept, when a tensor is whole, and when a partial one is given up (its
//! sender went down, or it made no progress for [`STALL`]) is decided by
//! `vkml_protocol::dist::assembly::Assembler`; this file owns the bytes (one allocation per
//! tensor, that fails instead of aborting, from a pool when one fits), the streams and the
//! lanes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn::{Connection, RecvStream, SendStream, VarInt};
use tokio::sync::{broadcast, mpsc, watch as alarm};
use tokio::task::JoinSet;
use vkml_protocol::dist::Config;
use vkml_protocol::dist::assembly::{Assembler, AssemblyAction, Claim, Layout, StripeError};
use vkml_protocol::{FrameDecoder, MAX_TENSOR_PAYLOAD, Message, error_code, pb};

use super::{Cluster, ClusterError, Inner, MemberEvent, MemberState, lock, transport};

mod pool;
#[cfg(test)]
mod tests;

/// Payloads larger than this are striped; smaller ones go whole on the main connection (a
/// stripe's own stream set-up and ack cost more than a lane gains on a few MiB).
pub const STRIPE_THRESHOLD: usize = 4 << 20;
/// No stripe smaller than this (a 5 MiB tensor is not cut into 16 pieces).
const MIN_STRIPE: usize = 1 << 20;
pub use vkml_protocol::dist::assembly::{MAX_STRIPES, layout};
/// The most lanes a node may be given.
pub const MAX_LANES: usize = 16;
/// A partial tensor, or a stripe stream, that makes no progress for this long is dropped.
pub const STALL: Duration = Duration::from_secs(60);
/// How often idle receive buffers are checked against [`pool::IDLE`].
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// The receiver's answer to a stripe read in full.
const ACK: u8 = 1;
/// Whole tensors waiting for the taker of [`Cluster::tensors`].
const CHANNEL: usize = 256;
/// How long a sender waits for the reason after the receiver stopped its stream.
const REASON_WAIT: Duration = Duration::from_secs(2);

/// A whole tensor that arrived from a peer (stripes reassembled), header as the sender gave it
/// (`payload_bytes` = the whole payload's length; striping fields cleared).
pub struct ArrivedTensor {
    pub from: String,
    pub header: pb::TensorHeader,
    pub payload: Bytes,
}

impl std::fmt::Debug for ArrivedTensor {
    /// The payload's length, not its bytes (a log line must not print 256 MiB).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrivedTensor")
            .field("from", &self.from)
            .field("header", &self.header)
            .field("payload", &format_args!("{} bytes", self.payload.len()))
            .finish()
    }
}

/// The lanes a node takes unless configured otherwise: min(4, cores). Measured on loopback with a 256 MiB
/// tensor (BENCHMARKS.md "transport" and docs/CLUSTER.md): on 16 cores 1 lane reaches 43 % of
/// TCP, 2 lanes 61 %, 4 lanes 76 %. Each lane is one more connection-driver task, so lanes
/// beyond the cores only add contention: on the 2-core VM 1, 2 and 4 lanes all took
/// 0.27-0.32 s per tensor (the cores are the limit there).
pub fn default_lanes() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
}

/// A partial tensor given up (a stripe failed, it stalled, its sender went down): whoever
/// waited for it will not get it.
#[derive(Debug, Clone)]
pub struct DroppedTensor {
    pub from: String,
    pub model_id: u64,
    pub run_id: u64,
    pub edge_id: u64,
    pub role: pb::TensorRole,
    pub why: String,
}

/// The node's tensor traffic: counters, the taker, partial tensors, lanes.
pub(crate) struct TensorState {
    lanes: AtomicUsize,
    sent: AtomicU64,
    received: AtomicU64,
    next_transfer: AtomicU64,
    taker: Mutex<Option<mpsc::Sender<ArrivedTensor>>>,
    /// Who is told of partial tensors given up.
    drops: Mutex<Option<mpsc::UnboundedSender<DroppedTensor>>>,
    /// Partial tensors, from every peer, and those given up recently.
    assembler: Mutex<Assembler<BytesMut>>,
    /// When the assembler next wants `handle_timeout` ([`watch`] waits for it).
    alarm: alarm::Sender<Option<Instant>>,
    pool: Arc<pool::BufferPool>,
    /// Extra connections (lanes 1..) by (address, generation, lane); lane 0 is `Inner::peers`.
    /// One async mutex per slot, so concurrent sends dial a lane once.
    lane_conns: Mutex<LaneMap>,
}

type LaneMap = HashMap<(SocketAddr, u64, usize), Arc<tokio::sync::Mutex<Option<Connection>>>>;

impl TensorState {
    pub(crate) fn new(lanes: usize) -> TensorState {
        TensorState {
            lanes: AtomicUsize::new(lanes.clamp(1, MAX_LANES)),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            next_transfer: AtomicU64::new(1),
            taker: Mutex::new(None),
            drops: Mutex::new(None),
            assembler: Mutex::new(Assembler::new(Config {
                stall: STALL,
                ..Config::default()
            })),
            alarm: alarm::channel(None).0,
            pool: Arc::default(),
            lane_conns: Mutex::new(HashMap::new()),
        }
    }

    /// Whether whole tensors have a taker (else tensor streams go to `incoming()`).
    pub(crate) fn taken(&self) -> bool {
        lock(&self.taker).as_ref().is_some_and(|t| !t.is_closed())
    }

    pub(crate) fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub(crate) fn bytes_received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn set_lanes(&self, lanes: usize) {
        self.lanes
            .store(lanes.clamp(1, MAX_LANES), Ordering::Relaxed);
    }

    /// Calls the assembler, then logs what it gave up and re-arms its timer.
    fn call<R>(&self, f: impl FnOnce(&mut Assembler<BytesMut>, Instant) -> R) -> R {
        let (r, dropped, next) = {
            let mut a = lock(&self.assembler);
            let now = Instant::now();
            let r = f(&mut a, now);
            let dropped: Vec<AssemblyAction> = std::iter::from_fn(|| a.poll_action()).collect();
            (r, dropped, a.poll_timeout())
        };
        self.alarm.send_if_modified(|v| {
            let changed = *v != next;
            *v = next;
            changed
        });
        for AssemblyAction::Dropped {
            key,
            why,
            done,
            stripes,
        } in dropped
        {
            tracing::warn!(
                "dropped a partial tensor from {} (run {}, edge {}), {done} of {stripes} stripes: {why}",
                key.peer,
                key.run_id,
                key.edge_id
            );
            if let Some(tx) = lock(&self.drops).as_ref() {
                let _ = tx.send(DroppedTensor {
                    role: pb::TensorRole::try_from(key.role).unwrap_or(pb::TensorRole::Edge),
                    from: key.peer,
                    model_id: key.model_id,
                    run_id: key.run_id,
                    edge_id: key.edge_id,
                    why,
                });
            }
        }
        r
    }

    /// Checks a stripe's claims and hands it its piece of the tensor's buffer (allocated on
    /// the tensor's first stripe).
    fn claim(&self, from: &str, h: &pb::TensorHeader) -> Result<Claim<BytesMut>, StripeError> {
        self.call(|a, now| a.claim(from, h, now, |l| self.alloc(l)))
    }

    /// One allocation for the whole tensor (refused, not aborted, when memory is short), cut
    /// into the stripes' pieces.
    fn alloc(&self, l: &Layout) -> Result<Vec<BytesMut>, String> {
        let total = l.total;
        let bytes = usize::try_from(total).map_err(|_| format!("{total} bytes do not fit"))?;
        let mut rest = match self.pool.take(bytes) {
            Some(b) => b,
            None => {
                let mut v = Vec::new();
                v.try_reserve_exact(bytes)
                    .map_err(|e| format!("cannot allocate {total} bytes: {e}"))?;
                // Through Bytes so the BytesMut keeps the reserved capacity (no public
                // From<Vec>).
                BytesMut::from(Bytes::from(v))
            }
        };
        let mut pieces = Vec::with_capacity(l.stripes as usize);
        for _ in 1..l.stripes {
            let tail = rest.split_off(l.stripe_len as usize);
            pieces.push(rest);
            rest = tail;
        }
        pieces.push(rest);
        Ok(pieces)
    }

    /// Returns a stripe's filled piece; the whole tensor when it was the last.
    fn complete(
        &self,
        claim: Claim<BytesMut>,
    ) -> Result<Option<(pb::TensorHeader, Bytes)>, StripeError> {
        let Some(w) = self.call(|a, now| a.complete(claim, now))? else {
            return Ok(None);
        };
        let mut whole = BytesMut::new();
        for p in w.pieces {
            // Adjacent pieces of one allocation: joins without copying.
            whole.unsplit(p);
        }
        debug_assert_eq!(whole.len() as u64, w.header.payload_bytes);
        self.received
            .fetch_add(whole.len() as u64, Ordering::Relaxed);
        Ok(Some((w.header, pool::freeze(whole, &self.pool))))
    }

    /// A stripe failed: its tensor can no longer complete.
    fn abandon(&self, claim: Claim<BytesMut>, why: &str) {
        self.call(|a, now| a.abandon(claim, why, now));
    }

    /// Drops the partial tensors from `peer` (it went down) and its lanes.
    fn peer_down(&self, e: &MemberEvent) {
        self.call(|a, now| a.peer_down(&e.name, e.state.as_str(), now));
        let mut lanes = lock(&self.lane_conns);
        lanes.retain(|(addr, generation, _), slot| {
            let gone = *addr == e.addr && *generation == e.generation;
            if gone
                && let Ok(conn) = slot.try_lock()
                && let Some(c) = conn.as_ref()
            {
                c.close(VarInt::from_u32(error_code::OK), b"down");
            }
            !gone
        });
    }

    /// Gives up stalled partial tensors as of `now`.
    fn handle_timeout(&self, now: Instant) {
        self.call(|a, _| a.handle_timeout(now));
    }

    #[cfg(test)]
    fn partial(&self) -> usize {
        lock(&self.assembler).partial()
    }
}

/// Drops what a peer's departure leaves behind, gives up stalled tensors when the assembler
/// says, and sweeps idle buffers, until the node is gone.
pub(crate) async fn watch(inner: Weak<Inner>, mut events: broadcast::Receiver<MemberEvent>) {
    let Some(mut alarm) = inner.upgrade().map(|i| i.tensors.alarm.subscribe()) else {
        return;
    };
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        let at = *alarm.borrow_and_update();
        let due = async {
            match at {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            e = events.recv() => match e {
                Ok(e) if !e.state.is_live() => match inner.upgrade() {
                    Some(i) => i.tensors.peer_down(&e),
                    None => return,
                },
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
            () = due => match inner.upgrade() {
                Some(i) => i.tensors.handle_timeout(Instant::now()),
                None => return,
            },
            changed = alarm.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tick.tick() => match inner.upgrade() {
                Some(i) => i.tensors.pool.sweep(pool::IDLE),
                None => return,
            },
        }
    }
}
/// Serves one tensor stream (a whole small tensor or one stripe) whose header was just read.
pub(crate) async fn receive(
    inner: &Inner,
    from: &str,
    header: pb::TensorHeader,
    mut send: Option<SendStream>,
    mut recv: RecvStream,
) {
    let state = &inner.tensors;
    let mut claim = match state.claim(from, &header) {
        Ok(c) => c,
        Err(why) => {
            tracing::warn!("refused a tensor stripe from {from}: {why}");
            refuse(send.as_mut(), &mut recv, &why.to_string()).await;
            return;
        }
    };
    let piece = std::mem::take(&mut claim.piece);
    match read_stripe(&mut recv, piece, claim.len).await {
        Ok(piece) => claim.piece = piece,
        Err(why) => {
            state.abandon(claim, &why);
            refuse(send.as_mut(), &mut recv, &why).await;
            return;
        }
    }
    let whole = match state.complete(claim) {
        Ok(w) => w,
        Err(why) => {
            refuse(send.as_mut(), &mut recv, &why.to_string()).await;
            return;
        }
    };
    // Acknowledged before delivery: a slow taker must not hold senders (nor, through them,
    // its own sends) hostage.
    if let Some(s) = send.as_mut() {
        if let Err(e) = s.write_all(&[ACK]).await {
            tracing::debug!("tensor ack to {from}: {e}");
        }
        let _ = s.finish();
    }
    if let Some((header, payload)) = whole {
        let tx = lock(&state.taker).clone();
        let arrived = ArrivedTensor {
            from: from.to_string(),
            header,
            payload,
        };
        match tx {
            Some(tx) if tx.send(arrived).await.is_ok() => {}
            _ => tracing::warn!("a tensor from {from} arrived with nobody to take it; dropped"),
        }
    }
}

/// Reads exactly `len` bytes into `piece` (whose capacity is `len`).
async fn read_stripe(
    recv: &mut RecvStream,
    mut piece: BytesMut,
    len: usize,
) -> Result<BytesMut, String> {
    while piece.len() < len {
        let want = len - piece.len();
        match tokio::time::timeout(STALL, recv.read_chunk(want, true)).await {
            Err(_) => return Err(format!("no data for {STALL:?}")),
            Ok(Err(e)) => return Err(format!("read: {e}")),
            Ok(Ok(None)) => {
                return Err(format!(
                    "the stream ended after {} of {len} bytes",
                    piece.len()
                ));
            }
            Ok(Ok(Some(c))) => piece.extend_from_slice(&c.bytes),
        }
    }
    Ok(piece)
}

/// Stops the stream and tells the sender why (on a bidirectional stream).
async fn refuse(send: Option<&mut SendStream>, recv: &mut RecvStream, why: &str) {
    let _ = recv.stop(VarInt::from_u32(error_code::BAD_FRAME));
    if let Some(s) = send {
        let m = Message::Error(pb::ErrorReply {
            code: error_code::BAD_FRAME,
            message: why.chars().take(4000).collect(),
        });
        let _ = transport::write_message(s, &m).await;
        let _ = s.finish();
    }
}

impl Cluster {
    /// Sends one tensor to a live member. Payloads over [`STRIPE_THRESHOLD`] are split into
    /// stripes sent concurrently over several connections ("lanes") to that member; small
    /// ones go on one stream of the main connection. Resolves once the peer has read every
    /// byte (each stream is acknowledged by the receiver), or fails with an error naming the
    /// peer, also when the peer goes down during the transfer.
    pub async fn send_tensor(
        &self,
        to: &str,
        header: pb::TensorHeader,
        payload: Bytes,
    ) -> Result<(), ClusterError> {
        let inner = &self.inner;
        let total = payload.len() as u64;
        if total > MAX_TENSOR_PAYLOAD {
            return Err(ClusterError::Protocol(format!(
                "a tensor of {total} bytes for {to} is over the {MAX_TENSOR_PAYLOAD}-byte limit"
            )));
        }
        // Subscribed before anything, so a departure during the set-up is not missed; the
        // watch covers the fault layer's delays and the dials too.
        let mut events = inner.events.subscribe();
        let generation = inner
            .read_view()
            .live(to)
            .ok_or_else(|| ClusterError::NoSuchMember(to.to_string()))?
            .generation;
        let down = went_down(&mut events, inner, to, generation);
        tokio::select! {
            r = self.send_stripes(to, header, payload) => r?,
            state = down => {
                return Err(ClusterError::Peer(format!(
                    "{to} is {state}: the tensor did not arrive"
                )));
            }
        }
        inner.tensors.sent.fetch_add(total, Ordering::Relaxed);
        Ok(())
    }

    /// `send_tensor`'s work: the stripes, concurrently, each on its lane.
    async fn send_stripes(
        &self,
        to: &str,
        header: pb::TensorHeader,
        payload: Bytes,
    ) -> Result<(), ClusterError> {
        let inner = &self.inner;
        let total = payload.len() as u64;
        let main = inner.connection_to(to).await.map_err(|e| naming(to, e))?;
        let info = inner
            .read_view()
            .live(to)
            .ok_or_else(|| ClusterError::NoSuchMember(to.to_string()))?;
        let wanted = if payload.len() > STRIPE_THRESHOLD {
            let lanes = inner.tensors.lanes.load(Ordering::Relaxed);
            lanes.min(payload.len().div_ceil(MIN_STRIPE)) as u32
        } else {
            1
        };
        let (len, count) = layout(total, wanted);
        let transfer = inner.tensors.next_transfer.fetch_add(1, Ordering::Relaxed);
        let (addr, generation) = (inner.data_addr_of(to, info.addr), info.generation);
        let mut stripes = JoinSet::new();
        for i in 0..count {
            let offset = u64::from(i) * len;
            let end = (offset + len).min(total);
            let mut h = header.clone();
            h.payload_bytes = end - offset;
            h.stripe_offset = offset;
            h.total_bytes = total;
            h.stripes = count;
            h.transfer = transfer;
            let data = payload.slice(offset as usize..end as usize);
            let (inner, main) = (inner.clone(), main.clone());
            let lane = i as usize;
            stripes.spawn(async move {
                let conn = if lane == 0 {
                    main
                } else {
                    lane_conn(&inner, addr, generation, lane, main).await
                };
                send_stripe(conn, h, data).await
            });
        }
        // A failure returns at once; dropping the set aborts the other stripes.
        while let Some(r) = stripes.join_next().await {
            r.map_err(|e| format!("a stripe's task failed: {e}"))
                .and_then(|r| r)
                .map_err(|why| ClusterError::Peer(format!("tensor to {to}: {why}")))?;
        }
        Ok(())
    }

    /// Whole tensors as they arrive, in no particular order. Call once, at start-up; without
    /// a taker, tensor streams are handed to `incoming()`.
    pub fn tensors(&self) -> mpsc::Receiver<ArrivedTensor> {
        let (tx, rx) = mpsc::channel(CHANNEL);
        *lock(&self.inner.tensors.taker) = Some(tx);
        rx
    }

    /// Partial tensors given up from now on, and why. Call once.
    pub fn dropped_tensors(&self) -> mpsc::UnboundedReceiver<DroppedTensor> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.inner.tensors.drops) = Some(tx);
        rx
    }

    /// Payload bytes this node has sent with `send_tensor` since it started (all peers).
    pub fn tensor_bytes_sent(&self) -> u64 {
        self.inner.tensors.bytes_sent()
    }

    /// Payload bytes of the whole tensors this node has reassembled since it started.
    pub fn tensor_bytes_received(&self) -> u64 {
        self.inner.tensors.bytes_received()
    }

    /// How many connections a large tensor is striped over (`ClusterConfig::tensor_lanes`).
    pub fn tensor_lanes(&self) -> usize {
        self.inner.tensors.lanes.load(Ordering::Relaxed)
    }
}

/// Makes an error name the peer it is about.
fn naming(to: &str, e: ClusterError) -> ClusterError {
    match e {
        ClusterError::NoSuchMember(_) | ClusterError::Partitioned(_) => e,
        other if other.to_string().contains(to) => other,
        other => ClusterError::Peer(format!("{to}: {other}")),
    }
}

/// Resolves when the member's life `generation` ends (dead, left, or replaced by a restart).
async fn went_down(
    events: &mut broadcast::Receiver<MemberEvent>,
    inner: &Inner,
    name: &str,
    generation: u64,
) -> MemberState {
    loop {
        match events.recv().await {
            Ok(e) if e.name == name && (!e.state.is_live() || e.generation != generation) => {
                return if e.state.is_live() {
                    MemberState::Dead
                } else {
                    e.state
                };
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => {
                if inner
                    .read_view()
                    .live(name)
                    .is_none_or(|m| m.generation != generation)
                {
                    return MemberState::Dead;
                }
            }
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// Lane `lane` to the member at (addr, generation): cached, dialled when missing. A lane that
/// cannot be made falls back to the main connection (the stripe still goes, more slowly).
async fn lane_conn(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    generation: u64,
    lane: usize,
    main: Connection,
) -> Connection {
    let slot = lock(&inner.tensors.lane_conns)
        .entry((addr, generation, lane))
        .or_default()
        .clone();
    let mut slot = slot.lock().await;
    if let Some(c) = slot.as_ref()
        && c.close_reason().is_none()
    {
        return c.clone();
    }
    match inner.dial_data(addr).await {
        Ok(c) => {
            *slot = Some(c.clone());
            c
        }
        Err(e) => {
            tracing::warn!("lane {lane} to {addr}: {e}; using the main connection");
            main
        }
    }
}

/// One stream: the header, the bytes, then the receiver's ACK (or its reason for refusing).
async fn send_stripe(conn: Connection, h: pb::TensorHeader, data: Bytes) -> Result<(), String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let frame = Message::Tensor(h).encode().map_err(|e| e.to_string())?;
    let wrote = async {
        // One write for the header and the bytes (quinn takes the payload as it can, without
        // a copy): the connection's driver wakes once, and a small tensor leaves in one packet
        // with its header.
        send.write_all_chunks(&mut [Bytes::from(frame), data])
            .await
            .map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())
    }
    .await;
    let reply = match &wrote {
        Ok(()) => recv.read_to_end(64 << 10).await.map_err(|e| e.to_string()),
        // Refused mid-write: the reason follows on the other half, if it comes at all.
        Err(_) => tokio::time::timeout(REASON_WAIT, recv.read_to_end(64 << 10))
            .await
            .map_err(|_| "no answer".to_string())
            .and_then(|r| r.map_err(|e| e.to_string())),
    };
    match reply {
        Ok(r) if r == [ACK] && wrote.is_ok() => Ok(()),
        Ok(r) if !r.is_empty() && r != [ACK] => {
            let mut d = FrameDecoder::new();
            d.push(&r);
            match d.next_message() {
                Ok(Some(Message::Error(e))) => Err(format!("refused: {}", e.message)),
                _ => Err(format!("an answer of {} bytes that is no ack", r.len())),
            }
        }
        Ok(_) => Err(match wrote {
            Err(w) => format!("write: {w}"),
            Ok(()) => "the stream ended without an ack".into(),
        }),
        Err(e) => Err(match wrote {
            Err(w) => format!("write: {w}"),
            Ok(()) => format!("waiting for the ack: {e}"),
        }),
    }
}
