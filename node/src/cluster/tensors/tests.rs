//! Striping, reassembly and their refusals: the layout and the reassembly table on their own,
//! then two or three real nodes on 127.0.0.1 (`Cluster::start`, every wait bounded).

use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;
use vkml_protocol::{FrameDecoder, MAX_TENSOR_PAYLOAD, Message, pb};

use super::super::faults::{FaultConfig, FaultRule};
use super::super::{Cluster, ClusterConfig, ClusterError, Secret, transport};
use super::*;

// ---- the layout and the reassembly table, without a network ----

#[test]
fn layouts_cut_into_equal_stripes_and_a_shorter_last() {
    // 10 bytes in 4: ceil(10/4) = 3, so [0,3) [3,6) [6,9) [9,10).
    assert_eq!(layout(10, 4), (3, 4));
    // 5 bytes in 4: stripes of 2 leave only [0,2) [2,4) [4,5): 3 stripes, never an empty one.
    assert_eq!(layout(5, 4), (2, 3));
    assert_eq!(layout(8, 1), (8, 1));
    assert_eq!(layout(8, 0), (8, 1));
    assert_eq!(layout(0, 4), (0, 1));
    assert_eq!(layout(3 << 20, 2), (3 << 19, 2));
}

fn stripe(offset: u64, len: u64, total: u64, stripes: u32) -> pb::TensorHeader {
    pb::TensorHeader {
        run_id: 5,
        edge_id: 6,
        dtype: "uint8".into(),
        shape: vec![total],
        payload_bytes: len,
        model_id: 7,
        role: pb::TensorRole::Edge as i32,
        stripe_offset: offset,
        total_bytes: total,
        stripes,
        transfer: 1,
    }
}

fn fill(
    state: &TensorState,
    h: &pb::TensorHeader,
    data: &[u8],
) -> Option<(pb::TensorHeader, Bytes)> {
    let mut c = state.claim("p", h).unwrap();
    assert_eq!(c.len, data.len());
    c.piece.extend_from_slice(data);
    state.complete(c).unwrap()
}

#[test]
fn stripes_in_any_order_join_into_one_buffer_without_copying() {
    let state = TensorState::new(4);
    let data: Vec<u8> = (0..10u8).collect();
    // Stripes of 3: claim all (the buffer is made on the first), fill out of order.
    let mut claims: Vec<_> = [0u64, 3, 6, 9]
        .iter()
        .map(|&o| state.claim("p", &stripe(o, 3.min(10 - o), 10, 4)).unwrap())
        .collect();
    let base = claims[0].piece.as_ptr();
    for (i, c) in claims.iter_mut().enumerate() {
        c.piece.extend_from_slice(&data[i * 3..(i * 3 + 3).min(10)]);
    }
    let mut claims: Vec<Option<Claim<BytesMut>>> = claims.into_iter().map(Some).collect();
    let mut order = vec![2, 0, 3, 1];
    let mut whole = None;
    while let Some(i) = order.pop() {
        let r = state.complete(claims[i].take().unwrap()).unwrap();
        assert_eq!(
            r.is_some(),
            order.is_empty(),
            "complete only with the last stripe"
        );
        whole = whole.or(r);
    }
    let (h, payload) = whole.unwrap();
    assert_eq!(&payload[..], &data[..]);
    assert_eq!(payload.as_ptr(), base, "the pieces were copied");
    assert_eq!(
        (
            h.payload_bytes,
            h.stripe_offset,
            h.total_bytes,
            h.stripes,
            h.transfer
        ),
        (10, 0, 0, 0, 0)
    );
    assert_eq!((h.run_id, h.edge_id, h.model_id), (5, 6, 7));
    assert_eq!(state.bytes_received(), 10);
    assert_eq!(state.partial(), 0);
}

#[test]
fn large_buffers_are_reused_once_the_taker_drops_the_tensor() {
    let state = TensorState::new(4);
    let n = STRIPE_THRESHOLD as u64 + 10;
    let (len, count) = layout(n, 3);
    let data = pattern(n as usize, 4);
    let assemble = |transfer: u64| {
        let mut last = None;
        for i in 0..u64::from(count) {
            let off = i * len;
            let mut h = stripe(off, len.min(n - off), n, count);
            h.transfer = transfer;
            last = fill(
                &state,
                &h,
                &data[off as usize..(off + len.min(n - off)) as usize],
            );
        }
        last.unwrap().1
    };
    let first = assemble(1);
    assert!(first == data);
    let at = first.as_ptr();
    let copy = first.clone();
    drop(first);
    assert_eq!(
        state.pool.held().0,
        0,
        "returned while a clone still holds it"
    );
    drop(copy);
    assert_eq!(state.pool.held(), (1, n as usize));
    let second = assemble(2);
    assert!(second == data);
    assert_eq!(second.as_ptr(), at, "the buffer was not reused");
    assert_eq!(state.pool.held().0, 0);
    drop(second);
    state.pool.sweep(Duration::ZERO);
    assert_eq!(state.pool.held().0, 0, "idle buffers are swept");

    // Bounded: at most 8 buffers and 1 GiB idle; small tensors are not pooled.
    let pool = pool::BufferPool::default();
    for _ in 0..10 {
        pool.give(BytesMut::with_capacity(STRIPE_THRESHOLD));
    }
    assert_eq!(pool.held(), (8, 8 * STRIPE_THRESHOLD));
    pool.give(BytesMut::with_capacity(1000));
    assert_eq!(pool.held().0, 8);
    assert!(pool.take(100).is_none());
    assert!(
        pool.take(STRIPE_THRESHOLD * 3).is_none(),
        "too small to hold it"
    );
    assert!(pool.take(STRIPE_THRESHOLD).is_some());
}

#[test]
fn inconsistent_stripes_are_refused() {
    let state = TensorState::new(4);
    let refused = |h: pb::TensorHeader, what: &str| {
        let e = state.claim("p", &h).expect_err(what);
        eprintln!("{what}: {e}");
    };
    refused(stripe(12, 3, 10, 4), "offset past the total");
    refused(stripe(9, 3, 10, 4), "a stripe running past the total");
    refused(stripe(1, 3, 10, 4), "an offset off the layout");
    refused(stripe(3, 2, 10, 4), "a length off the layout");
    refused(stripe(0, 1, 2, 4), "more stripes than bytes");
    refused(stripe(0, 1, 100, MAX_STRIPES + 1), "too many stripes");
    let big = MAX_TENSOR_PAYLOAD + 4;
    refused(stripe(0, big / 4, big, 4), "a total over the limit");
    let mut h = stripe(u64::MAX - 1, 3, 10, 4);
    h.payload_bytes = 5;
    refused(h, "an offset that overflows");
    assert_eq!(
        state.partial(),
        0,
        "a refused first stripe leaves nothing behind"
    );

    // A tensor under way: a stripe with another total, or a second copy of a stripe.
    let first = state.claim("p", &stripe(0, 3, 10, 4)).unwrap();
    refused(stripe(0, 3, 12, 4), "a mismatched total");
    let mut other_shape = stripe(3, 3, 10, 4);
    other_shape.shape = vec![5, 2];
    refused(other_shape, "a mismatched shape");
    let _second = state.claim("p", &stripe(3, 3, 10, 4)).unwrap();
    refused(stripe(3, 3, 10, 4), "a stripe sent twice");
    // The same edge from another peer, or in another transfer, is another tensor.
    assert!(state.claim("q", &stripe(3, 3, 10, 4)).is_ok());
    let mut later = stripe(3, 3, 10, 4);
    later.transfer = 2;
    assert!(state.claim("p", &later).is_ok());
    drop(first);
}

#[test]
fn partial_tensors_are_dropped_when_their_peer_goes_down_or_stalls() {
    let state = TensorState::new(4);
    let c = state.claim("p", &stripe(0, 3, 10, 4)).unwrap();
    // An active stripe keeps its tensor, however old.
    state.handle_timeout(Instant::now() + STALL);
    assert_eq!(state.partial(), 1);
    assert!(fill_claim(&state, c).is_none());
    state.handle_timeout(Instant::now());
    assert_eq!(state.partial(), 1, "recent progress keeps it");
    state.handle_timeout(Instant::now() + STALL);
    assert_eq!(
        state.partial(),
        0,
        "no stripe active and no progress: dropped"
    );
    let late = state.claim("p", &stripe(3, 3, 10, 4)).err().unwrap();
    assert_eq!(late, StripeError::AlreadyDropped, "{late}");
    assert_eq!(state.partial(), 0, "a late stripe made a new buffer");

    let mut next = stripe(0, 3, 10, 4);
    next.transfer = 2;
    let c = state.claim("p", &next).unwrap();
    let _q = state.claim("q", &next).unwrap();
    state.peer_down(&MemberEvent {
        name: "p".into(),
        state: MemberState::Dead,
        addr: "127.0.0.1:1".parse().unwrap(),
        generation: 1,
    });
    assert_eq!(state.partial(), 1, "only p's tensor goes");
    // The stripe still being read when its tensor went finds out on completion.
    let mut c = c;
    c.piece.extend_from_slice(&[1, 2, 3]);
    assert!(state.complete(c).is_err());
}

fn fill_claim(state: &TensorState, mut c: Claim<BytesMut>) -> Option<(pb::TensorHeader, Bytes)> {
    c.piece.extend_from_slice(&vec![9u8; c.len]);
    state.complete(c).unwrap()
}

#[test]
fn a_whole_tensor_header_without_stripe_fields_is_one_stripe() {
    let state = TensorState::new(1);
    let h = pb::TensorHeader {
        run_id: 1,
        payload_bytes: 4,
        ..Default::default()
    };
    let (got, payload) = fill(&state, &h, &[1, 2, 3, 4]).unwrap();
    assert_eq!(&payload[..], &[1, 2, 3, 4]);
    assert_eq!(got.payload_bytes, 4);
    let empty = pb::TensorHeader::default();
    let (_, payload) = fill(&state, &empty, &[]).unwrap();
    assert!(payload.is_empty());
}

// ---- real nodes ----

fn config(name: &str, join: Vec<String>) -> ClusterConfig {
    ClusterConfig {
        name: name.into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
        secret: Secret::insecure(),
        devices: vec![],
        tuning: Default::default(),
        tensor_lanes: super::default_lanes(),
        faults: None,
        lease_grace: crate::cluster::DEFAULT_LEASE_GRACE,
        sequence_idle: crate::cluster::DEFAULT_SEQUENCE_IDLE,
        data_listen: None,
    }
}

/// Polls `f` every 20 ms for up to 10 s.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Nodes named `names`, all joined through the first, each seeing all.
async fn cluster(names: &[&str], faults: Vec<Option<FaultConfig>>) -> Vec<Cluster> {
    let mut nodes: Vec<Cluster> = Vec::new();
    let mut faults = faults.into_iter();
    for n in names {
        let join = nodes
            .first()
            .map(|a| vec![a.addr().to_string()])
            .unwrap_or_default();
        let cfg = ClusterConfig {
            faults: faults.next().flatten(),
            ..config(n, join)
        };
        nodes.push(Cluster::start(cfg).await.unwrap());
    }
    for c in &nodes {
        eventually("every node to see every other", || {
            c.members()
                .iter()
                .filter(|m| m.state == MemberState::Alive)
                .count()
                == names.len()
        })
        .await;
    }
    nodes
}

/// A payload whose every 4-byte word differs with `seed` and its position, so a misplaced
/// stripe or a byte dropped anywhere changes it.
fn pattern(len: usize, seed: u32) -> Bytes {
    let mut v = Vec::with_capacity(len + 4);
    let mut i = 0u32;
    while v.len() < len {
        v.extend_from_slice(&(i.wrapping_mul(2_654_435_761) ^ seed).to_le_bytes());
        i += 1;
    }
    v.truncate(len);
    Bytes::from(v)
}

fn header(run: u64, edge: u64, len: usize) -> pb::TensorHeader {
    pb::TensorHeader {
        run_id: run,
        edge_id: edge,
        dtype: "float32".into(),
        shape: vec![2, (len / 8) as u64],
        payload_bytes: len as u64,
        model_id: 11,
        role: pb::TensorRole::Output as i32,
        ..Default::default()
    }
}

async fn next(rx: &mut mpsc::Receiver<ArrivedTensor>) -> ArrivedTensor {
    timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("no tensor within 20 s")
        .expect("the tensor channel closed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_and_striped_tensors_arrive_whole_and_are_counted() {
    let nodes = cluster(&["src", "dst"], vec![]).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    a.inner.tensors.set_lanes(4);
    let mut rx = b.tensors();

    let small = pattern(1000, 1);
    a.send_tensor("dst", header(1, 2, small.len()), small.clone())
        .await
        .unwrap();
    let got = next(&mut rx).await;
    assert_eq!(got.from, "src");
    assert_eq!(got.header, header(1, 2, small.len()));
    assert_eq!(got.payload, small);

    // 20 MiB + 3 bytes: four stripes over four connections, the last one shorter.
    let big = pattern((20 << 20) + 3, 2);
    a.send_tensor("dst", header(1, 3, big.len()), big.clone())
        .await
        .unwrap();
    let got = next(&mut rx).await;
    assert_eq!(got.header, header(1, 3, big.len()));
    assert!(got.payload == big, "the striped payload differs");
    let lanes = lock(&a.inner.tensors.lane_conns).len();
    assert_eq!(lanes, 3, "lanes 1..4 were dialled");

    let total = (small.len() + big.len()) as u64;
    assert_eq!(a.tensor_bytes_sent(), total);
    assert_eq!(b.tensor_bytes_received(), total);
    assert_eq!((a.tensor_bytes_received(), b.tensor_bytes_sent()), (0, 0));
    // The status reply carries the answering node's counters.
    let reply = super::super::service::status_reply(&b.inner);
    assert_eq!(
        (reply.tensor_bytes_sent, reply.tensor_bytes_received),
        (0, total)
    );
    assert_eq!(b.inner.tensors.partial(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_tensors_to_one_peer() {
    let nodes = cluster(&["a", "b", "c"], vec![]).await;
    for n in &nodes {
        n.inner.tensors.set_lanes(3);
    }
    let mut rx = nodes[2].tensors();
    // From two senders at once, sizes across the striping threshold, one edge id shared by
    // several runs and both senders.
    let mut sends = JoinSet::new();
    let mut expected = HashMap::new();
    let mut total = 0;
    for i in 0..24u32 {
        let len = match i % 4 {
            0 => 0,
            1 => 4096 + i as usize,
            2 => STRIPE_THRESHOLD + 1 + i as usize,
            _ => (6 << 20) + i as usize,
        };
        let from = nodes[(i % 2) as usize].clone();
        let payload = pattern(len, i);
        let h = header(u64::from(i), 1, len);
        expected.insert((from.name().to_string(), u64::from(i)), payload.clone());
        total += len as u64;
        sends.spawn(async move { from.send_tensor("c", h, payload).await });
    }
    while let Some(r) = timeout(Duration::from_secs(60), sends.join_next())
        .await
        .expect("sends did not finish within 60 s")
    {
        r.unwrap().unwrap();
    }
    for _ in 0..24 {
        let got = next(&mut rx).await;
        let want = expected
            .remove(&(got.from.clone(), got.header.run_id))
            .expect("an unexpected or duplicate tensor");
        assert_eq!(got.header.payload_bytes, want.len() as u64);
        assert!(got.payload == want, "run {} differs", got.header.run_id);
    }
    assert!(expected.is_empty());
    assert_eq!(nodes[2].tensor_bytes_received(), total);
    assert_eq!(
        nodes[0].tensor_bytes_sent() + nodes[1].tensor_bytes_sent(),
        total
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sending_to_a_partitioned_or_departed_peer_fails_naming_it() {
    // The sender cuts itself off from "cut-off" 4 s after starting (time to join first).
    let cut = FaultConfig {
        seed: 1,
        rules: vec![FaultRule {
            peer: "cut-off".into(),
            partition: vec![[4.0, 3600.0]],
            ..Default::default()
        }],
        ..Default::default()
    };
    let nodes = cluster(&["sender", "cut-off", "gone-soon"], vec![Some(cut)]).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let _rx = b.tensors();
    let _rx2 = c.tensors();
    let payload = pattern(8 << 20, 3);
    a.send_tensor("cut-off", header(1, 1, payload.len()), payload.clone())
        .await
        .expect("before the partition");

    eventually("the partition to begin", || {
        a.inner.faults.as_ref().unwrap().partitioned("cut-off")
    })
    .await;
    let t = std::time::Instant::now();
    let e = timeout(
        Duration::from_secs(5),
        a.send_tensor("cut-off", header(1, 2, payload.len()), payload.clone()),
    )
    .await
    .expect("a send to a partitioned peer hung")
    .unwrap_err();
    assert!(e.to_string().contains("cut-off"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));

    c.clone().leave().await;
    let e = timeout(
        Duration::from_secs(5),
        a.send_tensor("gone-soon", header(1, 3, 10), Bytes::from_static(&[0; 10])),
    )
    .await
    .expect("a send to a departed peer hung")
    .unwrap_err();
    assert!(
        matches!(&e, ClusterError::NoSuchMember(n) if n == "gone-soon"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_peer_going_down_during_a_send_fails_it_at_once() {
    // Every stream the sender opens to "slow" waits 3 s first (the fault layer's delay): the
    // send is still under way when the membership says "slow" died.
    let delay = FaultConfig {
        seed: 1,
        rules: vec![FaultRule {
            peer: "slow".into(),
            delay_ms: 3000,
            ..Default::default()
        }],
        ..Default::default()
    };
    let nodes = cluster(&["sender", "slow"], vec![Some(delay)]).await;
    let (a, b) = (nodes[0].clone(), &nodes[1]);
    let _rx = b.tensors();
    let send = tokio::spawn(async move {
        let payload = pattern(6 << 20, 5);
        a.send_tensor("slow", header(1, 1, payload.len()), payload)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = std::time::Instant::now();
    let dead = nodes[0]
        .members()
        .into_iter()
        .find(|m| m.name == "slow")
        .unwrap();
    nodes[0].inner.publish(vec![MemberEvent {
        name: dead.name,
        state: MemberState::Dead,
        addr: dead.addr,
        generation: dead.generation,
    }]);
    let e = timeout(Duration::from_secs(2), send)
        .await
        .expect("the send outlived its peer")
        .unwrap()
        .unwrap_err();
    // Either the send's own watch on membership ("slow is dead") or, when a lane is dialled
    // after the news, the view ("no member named 'slow' is alive"): both name the peer, at once.
    let text = e.to_string();
    assert!(
        text.contains("slow is dead") || text.contains("'slow' is alive"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(nodes[0].tensor_bytes_sent(), 0);
}

/// Opens a stream to `to` and writes a tensor header and `body`: the stripe a faulty or
/// hostile peer might send. Returns what came back.
async fn raw_stripe(a: &Cluster, to: &str, h: pb::TensorHeader, body: &[u8]) -> Vec<u8> {
    let (mut send, mut recv) = a.open_bi(to).await.unwrap();
    transport::write_message(&mut send, &Message::Tensor(h))
        .await
        .unwrap();
    let _ = send.write_all(body).await;
    let _ = send.finish();
    timeout(Duration::from_secs(10), recv.read_to_end(1 << 16))
        .await
        .expect("no answer to a bad stripe within 10 s")
        .unwrap_or_default()
}

fn error_text(reply: &[u8]) -> String {
    let mut d = FrameDecoder::new();
    d.push(reply);
    match d.next_message() {
        Ok(Some(Message::Error(e))) => e.message,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_and_truncated_stripes_are_refused_and_the_node_lives_on() {
    let nodes = cluster(&["x", "y"], vec![]).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut rx = b.tensors();

    // An offset past the total.
    let mut h = header(1, 1, 16);
    (h.stripe_offset, h.total_bytes, h.stripes, h.payload_bytes) = (64, 32, 2, 16);
    let why = error_text(&raw_stripe(a, "y", h, &[0; 16]).await);
    assert!(why.contains("offset 64"), "{why}");

    // A stripe that promises 1 MiB and ends after 1000 bytes: refused, not awaited forever.
    let mut h = header(1, 2, 1 << 20);
    (h.stripe_offset, h.total_bytes, h.stripes) = (0, 2 << 20, 2);
    let why = error_text(&raw_stripe(a, "y", h, &[0; 1000]).await);
    assert!(why.contains("ended after 1000"), "{why}");
    assert_eq!(b.inner.tensors.partial(), 0, "the partial tensor was kept");
    // Its other stripe, arriving late, does not start a new buffer.
    let mut h = header(1, 2, 1 << 20);
    (h.stripe_offset, h.total_bytes, h.stripes) = (1 << 20, 2 << 20, 2);
    let why = error_text(&raw_stripe(a, "y", h, &[0; 1000]).await);
    assert!(why.contains("already dropped"), "{why}");
    assert_eq!(b.inner.tensors.partial(), 0);

    // Still serving.
    let ok = pattern(5 << 20, 9);
    a.send_tensor("y", header(2, 1, ok.len()), ok.clone())
        .await
        .unwrap();
    assert!(next(&mut rx).await.payload == ok);
    assert_eq!(b.tensor_bytes_received(), ok.len() as u64);
}
