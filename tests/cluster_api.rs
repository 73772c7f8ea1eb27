//! The `Cluster` API the execution layer builds on, in one process: join, members, snapshot,
//! membership events, a stream to a member by name answered through `incoming()`, and leave.

use std::time::Duration;

use tokio::time::timeout;
use vkml::cluster::{Cluster, ClusterConfig, MemberState, Secret, transport};
use vkml_protocol::{Message, pb};

fn config(name: &str, join: Vec<String>, secret: &Secret, budget: u64) -> ClusterConfig {
    ClusterConfig {
        name: name.into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
        secret: secret.clone(),
        devices: vec![pb::Device {
            name: "cpu".into(),
            kind: pb::DeviceKind::Cpu as i32,
            vendor: "test".into(),
            memory_budget: budget,
            flops_per_us: 10,
            op_overhead_ns: 300,
            features: 0,
            reserved: 0,
            bytes_per_us: 0,
        }],
        tuning: Default::default(),
        tensor_lanes: vkml::cluster::tensors::default_lanes(),
        faults: None,
        lease_grace: vkml::cluster::DEFAULT_LEASE_GRACE,
        sequence_idle: vkml::cluster::DEFAULT_SEQUENCE_IDLE,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_snapshot_stream_and_leave() {
    let secret = Secret::generate().unwrap();
    let a = Cluster::start(config("a", vec![], &secret, 1000))
        .await
        .unwrap();
    let mut events = a.subscribe();
    let b = Cluster::start(config("b", vec![a.addr().to_string()], &secret, 2000))
        .await
        .unwrap();

    let ev = timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("no membership event within 10 s")
        .unwrap();
    assert_eq!((ev.name.as_str(), ev.state), ("b", MemberState::Alive));

    // Both see both, with each other's inventory.
    for c in [&a, &b] {
        eventually("a full snapshot", || c.snapshot().nodes.len() == 2).await;
        let s = c.snapshot();
        assert_eq!(s.nodes["a"][0].memory_budget, 1000);
        assert_eq!(s.nodes["b"][0].memory_budget, 2000);
        let names: Vec<_> = c.members().into_iter().map(|m| m.name).collect();
        assert_eq!(names, vec!["a", "b"]);
    }

    // A stream from b to a by name; a takes it from incoming() and answers.
    let mut incoming = a.incoming();
    let (mut send, mut recv) = b.open_bi("a").await.unwrap();
    let payload = vec![7u8; 3 * 4];
    let header = pb::TensorHeader {
        run_id: 9,
        edge_id: 4,
        dtype: "float32".into(),
        shape: vec![3],
        payload_bytes: payload.len() as u64,
        ..Default::default()
    };
    transport::write_message(&mut send, &Message::Tensor(header.clone()))
        .await
        .unwrap();
    send.write_all(&payload).await.unwrap();
    send.finish().unwrap();
    let mut got = timeout(Duration::from_secs(10), incoming.recv())
        .await
        .expect("no incoming stream within 10 s")
        .unwrap();
    assert_eq!(got.peer, "b");
    assert_eq!(got.first, Message::Tensor(header));
    let mut body = vec![0u8; 12];
    got.recv.read_exact(&mut body).await.unwrap();
    assert_eq!(body, payload);
    let reply = got.send.as_mut().unwrap();
    transport::write_message(
        reply,
        &Message::Error(pb::ErrorReply {
            code: 0,
            message: "ok".into(),
        }),
    )
    .await
    .unwrap();
    reply.finish().unwrap();
    match transport::read_message(&mut recv).await.unwrap() {
        Some(Message::Error(e)) => assert_eq!(e.message, "ok"),
        other => panic!("unexpected reply {other:?}"),
    }

    // Nobody by that name.
    assert!(b.open_uni("nobody").await.is_err());

    // b leaves: a says "left", and b is out of a's snapshot.
    b.leave().await;
    eventually("b to be left", || {
        a.members()
            .iter()
            .any(|m| m.name == "b" && m.state == MemberState::Left)
    })
    .await;
    assert_eq!(a.snapshot().nodes.len(), 1);
}
