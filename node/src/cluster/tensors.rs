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
//! Memory is bounded by refusing inconsistent claims (a stripe past the total, a total over
//! MAX_TENSOR_PAYLOAD, totals or layouts that disagree, a stripe sent twice), by an allocation
//! that fails instead of aborting, and by dropping partial tensors whose sender went down or
//! which made no progress for [`STALL`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn::{Connection, RecvStream, SendStream, VarInt};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;
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
/// The most stripes a receiver accepts for one tensor.
pub const MAX_STRIPES: u32 = 64;
/// The most lanes VKML_TENSOR_LANES may ask for.
const MAX_LANES: usize = 16;
/// A partial tensor, or a stripe stream, that makes no progress for this long is dropped.
pub const STALL: Duration = Duration::from_secs(60);
/// How often partial tensors are checked against [`STALL`].
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// Payload is handed to quinn in slices of this size (zero-copy `Bytes` slices).
const WRITE_CHUNK: usize = 1 << 20;
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

/// How `total` bytes are cut into at most `wanted` stripes: (stripe length, stripe count).
/// Every stripe but the last is `stripe length` long, and none is empty; sender and receiver
/// both derive the layout from (total, count), so a stripe's claims can be checked.
pub fn layout(total: u64, wanted: u32) -> (u64, u32) {
    if total == 0 {
        return (0, 1);
    }
    let len = total.div_ceil(u64::from(wanted.max(1)));
    (len, total.div_ceil(len) as u32)
}

/// Lanes from VKML_TENSOR_LANES, else min(4, cores). Measured on loopback with a 256 MiB
/// tensor (BENCHMARKS.md "transport" and docs/CLUSTER.md): on 16 cores 1 lane reaches 43 % of
/// TCP, 2 lanes 61 %, 4 lanes 76 %. Each lane is one more connection-driver task, so lanes
/// beyond the cores only add contention: on the 2-core VM 1, 2 and 4 lanes all took
/// 0.27-0.32 s per tensor (the cores are the limit there).
pub fn lanes_from_env() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match std::env::var("VKML_TENSOR_LANES") {
        Ok(s) => match s.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_LANES).contains(&n) => n,
            _ => {
                tracing::warn!(
                    "VKML_TENSOR_LANES={s:?} is not a number in 1..={MAX_LANES}; ignored"
                );
                cores.min(4)
            }
        },
        Err(_) => cores.min(4),
    }
}

/// Which tensor a stripe belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    peer: String,
    model_id: u64,
    run_id: u64,
    edge_id: u64,
    role: i32,
    transfer: u64,
}

enum Piece {
    /// Not yet claimed: capacity for the stripe, empty.
    Free(BytesMut),
    /// A stream is filling it.
    Reading,
    Done(BytesMut),
}

/// A tensor whose stripes are arriving.
struct Assembly {
    /// Tells a stripe finishing late that its assembly was dropped and replaced.
    id: u64,
    header: pb::TensorHeader,
    total: u64,
    pieces: Vec<Piece>,
    done: usize,
    /// Stripes being read now (each bounded by its own read timeout).
    active: usize,
    last_progress: Instant,
}

/// A stripe accepted for reading: its piece of the buffer, and where to return it.
struct Claim {
    key: Key,
    id: u64,
    index: usize,
    len: usize,
    piece: BytesMut,
}

/// The node's tensor traffic: counters, the taker, partial tensors, lanes.
pub(crate) struct TensorState {
    lanes: AtomicUsize,
    sent: AtomicU64,
    received: AtomicU64,
    next_transfer: AtomicU64,
    next_assembly: AtomicU64,
    taker: Mutex<Option<mpsc::Sender<ArrivedTensor>>>,
    assemblies: Mutex<HashMap<Key, Assembly>>,
    /// Tensors dropped recently, and when: their late stripes are refused instead of starting
    /// a new buffer that could never complete.
    dropped: Mutex<HashMap<Key, Instant>>,
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
            next_assembly: AtomicU64::new(1),
            taker: Mutex::new(None),
            assemblies: Mutex::new(HashMap::new()),
            dropped: Mutex::new(HashMap::new()),
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

    /// Checks a stripe's claims and hands it its piece of the tensor's buffer (allocated on
    /// the tensor's first stripe). The error says what was wrong with the claim.
    fn claim(&self, from: &str, h: &pb::TensorHeader) -> Result<Claim, String> {
        let whole = h.stripes == 0 && h.total_bytes == 0 && h.stripe_offset == 0;
        let (offset, total, stripes) = if whole {
            (0, h.payload_bytes, 1)
        } else {
            (h.stripe_offset, h.total_bytes, h.stripes)
        };
        if total > MAX_TENSOR_PAYLOAD {
            return Err(format!(
                "a tensor of {total} bytes is over the {MAX_TENSOR_PAYLOAD}-byte limit"
            ));
        }
        if stripes == 0 || stripes > MAX_STRIPES {
            return Err(format!("{stripes} stripes (at most {MAX_STRIPES})"));
        }
        let (len, count) = layout(total, stripes);
        if count != stripes {
            return Err(format!(
                "{total} bytes cannot be cut into {stripes} stripes"
            ));
        }
        if offset
            .checked_add(h.payload_bytes)
            .is_none_or(|end| end > total)
        {
            return Err(format!(
                "a stripe of {} bytes at offset {offset} runs past the tensor's {total} bytes",
                h.payload_bytes
            ));
        }
        let index = offset.checked_div(len).unwrap_or(0);
        if index * len != offset || h.payload_bytes != len.min(total - offset) {
            return Err(format!(
                "a stripe of {} bytes at offset {offset} is not one of {stripes} stripes of {total} bytes",
                h.payload_bytes
            ));
        }
        let key = Key {
            peer: from.to_string(),
            model_id: h.model_id,
            run_id: h.run_id,
            edge_id: h.edge_id,
            role: h.role,
            transfer: h.transfer,
        };
        if lock(&self.dropped).contains_key(&key) {
            return Err("its tensor was already dropped".into());
        }
        let mut map = lock(&self.assemblies);
        if !map.contains_key(&key) {
            let a = self.new_assembly(h, total, len, stripes)?;
            map.insert(key.clone(), a);
        }
        let a = map.get_mut(&key).expect("inserted above");
        if a.total != total
            || a.pieces.len() != stripes as usize
            || a.header.dtype != h.dtype
            || a.header.shape != h.shape
        {
            return Err(format!(
                "a stripe claims {total} bytes in {stripes} stripes ({} {:?}), its tensor {} bytes in {} ({} {:?})",
                h.dtype,
                h.shape,
                a.total,
                a.pieces.len(),
                a.header.dtype,
                a.header.shape
            ));
        }
        let index = index as usize;
        let piece = match std::mem::replace(&mut a.pieces[index], Piece::Reading) {
            Piece::Free(p) => p,
            other => {
                a.pieces[index] = other;
                return Err(format!("stripe {index} of {stripes} arrived twice"));
            }
        };
        a.active += 1;
        a.last_progress = Instant::now();
        Ok(Claim {
            key,
            id: a.id,
            index,
            len: (len.min(total - offset)) as usize,
            piece,
        })
    }

    /// One allocation for the whole tensor (refused, not aborted, when memory is short), cut
    /// into the stripes' pieces.
    fn new_assembly(
        &self,
        h: &pb::TensorHeader,
        total: u64,
        len: u64,
        stripes: u32,
    ) -> Result<Assembly, String> {
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
        let mut pieces = Vec::with_capacity(stripes as usize);
        for _ in 1..stripes {
            let tail = rest.split_off(len as usize);
            pieces.push(Piece::Free(rest));
            rest = tail;
        }
        pieces.push(Piece::Free(rest));
        Ok(Assembly {
            id: self.next_assembly.fetch_add(1, Ordering::Relaxed),
            header: h.clone(),
            total,
            pieces,
            done: 0,
            active: 0,
            last_progress: Instant::now(),
        })
    }

    /// Returns a stripe's filled piece; the whole tensor when it was the last.
    fn complete(&self, claim: Claim) -> Result<Option<(pb::TensorHeader, Bytes)>, String> {
        let mut map = lock(&self.assemblies);
        let a = match map.get_mut(&claim.key) {
            Some(a) if a.id == claim.id => a,
            _ => return Err("its tensor was dropped while the stripe arrived".into()),
        };
        a.pieces[claim.index] = Piece::Done(claim.piece);
        a.done += 1;
        a.active -= 1;
        a.last_progress = Instant::now();
        if a.done < a.pieces.len() {
            return Ok(None);
        }
        let a = map.remove(&claim.key).expect("found above");
        drop(map);
        let mut whole = BytesMut::new();
        for p in a.pieces {
            if let Piece::Done(p) = p {
                // Adjacent pieces of one allocation: joins without copying.
                whole.unsplit(p);
            }
        }
        debug_assert_eq!(whole.len() as u64, a.total);
        let mut header = a.header;
        header.payload_bytes = a.total;
        header.stripe_offset = 0;
        header.total_bytes = 0;
        header.stripes = 0;
        header.transfer = 0;
        self.received.fetch_add(a.total, Ordering::Relaxed);
        Ok(Some((header, pool::freeze(whole, &self.pool))))
    }

    /// A stripe failed: its tensor can no longer complete.
    fn abandon(&self, claim: &Claim, why: &str) {
        let mut map = lock(&self.assemblies);
        if map.get(&claim.key).is_some_and(|a| a.id == claim.id) {
            map.remove(&claim.key);
            lock(&self.dropped).insert(claim.key.clone(), Instant::now());
            tracing::warn!(
                "dropped a partial tensor from {} (run {}, edge {}): {why}",
                claim.key.peer,
                claim.key.run_id,
                claim.key.edge_id
            );
        }
    }

    /// Drops the partial tensors from `peer` (it went down) and its lanes.
    fn peer_down(&self, e: &MemberEvent) {
        let mut map = lock(&self.assemblies);
        let before = map.len();
        map.retain(|k, _| k.peer != e.name);
        if map.len() < before {
            tracing::warn!(
                "dropped {} partial tensor(s) from {}: it is {}",
                before - map.len(),
                e.name,
                e.state
            );
        }
        drop(map);
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

    /// Drops partial tensors that no stripe is filling and that made no progress for `stall`.
    fn sweep(&self, stall: Duration) {
        lock(&self.dropped).retain(|_, at| at.elapsed() < stall);
        self.pool.sweep(pool::IDLE.min(stall));
        let mut gone = Vec::new();
        lock(&self.assemblies).retain(|k, a| {
            let keep = a.active > 0 || a.last_progress.elapsed() < stall;
            if !keep {
                gone.push(k.clone());
                tracing::warn!(
                    "dropped a partial tensor from {} (run {}, edge {}): {} of {} stripes, none for {stall:?}",
                    k.peer,
                    k.run_id,
                    k.edge_id,
                    a.done,
                    a.pieces.len()
                );
            }
            keep
        });
        let now = Instant::now();
        lock(&self.dropped).extend(gone.into_iter().map(|k| (k, now)));
    }

    #[cfg(test)]
    fn partial(&self) -> usize {
        lock(&self.assemblies).len()
    }
}

/// Drops what a peer's departure leaves behind, and sweeps stalled tensors, until the node is
/// gone.
pub(crate) async fn watch(inner: Weak<Inner>, mut events: broadcast::Receiver<MemberEvent>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(e) if !e.state.is_live() => match inner.upgrade() {
                    Some(i) => i.tensors.peer_down(&e),
                    None => return,
                },
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => match inner.upgrade() {
                Some(i) => i.tensors.sweep(STALL),
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
            refuse(send.as_mut(), &mut recv, &why).await;
            return;
        }
    };
    let piece = std::mem::take(&mut claim.piece);
    match read_stripe(&mut recv, piece, claim.len).await {
        Ok(piece) => claim.piece = piece,
        Err(why) => {
            state.abandon(&claim, &why);
            refuse(send.as_mut(), &mut recv, &why).await;
            return;
        }
    }
    let whole = match state.complete(claim) {
        Ok(w) => w,
        Err(why) => {
            refuse(send.as_mut(), &mut recv, &why).await;
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
        let (addr, generation) = (info.addr, info.generation);
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

    /// Payload bytes this node has sent with `send_tensor` since it started (all peers).
    pub fn tensor_bytes_sent(&self) -> u64 {
        self.inner.tensors.bytes_sent()
    }

    /// Payload bytes of the whole tensors this node has reassembled since it started.
    pub fn tensor_bytes_received(&self) -> u64 {
        self.inner.tensors.bytes_received()
    }

    /// How many connections a large tensor is striped over (VKML_TENSOR_LANES).
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
    match inner.dial(addr).await {
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
        send.write_all(&frame).await.map_err(|e| e.to_string())?;
        let mut off = 0;
        while off < data.len() {
            let end = (off + WRITE_CHUNK).min(data.len());
            send.write_chunk(data.slice(off..end))
                .await
                .map_err(|e| e.to_string())?;
            off = end;
        }
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
