//! The tensor API as the execution layer sees it (from outside the crate): two nodes on
//! 127.0.0.1, a small and a striped tensor sent at once, and the counters as `vkml-node status
//! --json` reports them. The striping details are tested in node/src/cluster/tensors/tests.rs.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;
use vkml::cluster::{ArrivedTensor, Cluster, ClusterConfig, MemberState, Secret};
use vkml_protocol::pb;

fn config(name: &str, join: Vec<String>) -> ClusterConfig {
    ClusterConfig {
        name: name.into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
        secret: Secret::insecure(),
        devices: vec![],
        tuning: Default::default(),
        tensor_lanes: vkml::cluster::tensors::default_lanes(),
        faults: None,
        lease_grace: vkml::cluster::DEFAULT_LEASE_GRACE,
        sequence_idle: vkml::cluster::DEFAULT_SEQUENCE_IDLE,
        data_listen: None,
    }
}

fn header(edge: u64, len: usize) -> pb::TensorHeader {
    pb::TensorHeader {
        run_id: 3,
        edge_id: edge,
        dtype: "int32".into(),
        shape: vec![(len / 4) as u64],
        payload_bytes: len as u64,
        model_id: 8,
        role: pb::TensorRole::Edge as i32,
        ..Default::default()
    }
}

/// Bytes that differ at every position (i * 7 mod 251), so a misplaced stripe shows.
fn payload(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 7 % 251) as u8)
        .collect::<Vec<_>>()
        .into()
}

/// `vkml-node status --json` asked of `node`, run off the async threads.
async fn status_json(node: &Cluster) -> serde_json::Value {
    let addr = node.addr().to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_vkml-node"))
            .args(["status", "--json", "--insecure", "--to", &addr])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tensors_arrive_whole_and_status_reports_the_counters() {
    let a = Cluster::start(config("left", vec![])).await.unwrap();
    let b = Cluster::start(config("right", vec![a.addr().to_string()]))
        .await
        .unwrap();
    let mut rx = b.tensors();
    for _ in 0..500 {
        if a.members()
            .iter()
            .any(|m| m.name == "right" && m.state == MemberState::Alive)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (small, big) = (payload(4096), payload((9 << 20) + 4));
    let (r1, r2) = tokio::join!(
        a.send_tensor("right", header(1, small.len()), small.clone()),
        a.send_tensor("right", header(2, big.len()), big.clone()),
    );
    r1.unwrap();
    r2.unwrap();
    let mut got: Vec<ArrivedTensor> = Vec::new();
    for _ in 0..2 {
        let t = timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("no tensor within 10 s")
            .unwrap();
        got.push(t);
    }
    got.sort_by_key(|t| t.header.edge_id);
    assert_eq!(got[0].from, "left");
    assert_eq!(got[0].header, header(1, small.len()));
    assert_eq!(got[0].payload, small);
    assert_eq!(got[1].header, header(2, big.len()));
    assert!(got[1].payload == big, "the striped tensor differs");

    let total = (small.len() + big.len()) as u64;
    assert_eq!(
        (a.tensor_bytes_sent(), b.tensor_bytes_received()),
        (total, total)
    );
    let (sa, sb) = (status_json(&a).await, status_json(&b).await);
    assert_eq!(sa["tensor_bytes_sent"], total);
    assert_eq!(sa["tensor_bytes_received"], 0);
    assert_eq!(sb["tensor_bytes_sent"], 0);
    assert_eq!(sb["tensor_bytes_received"], total);
    assert_eq!(sb["members"].as_array().unwrap().len(), 2);

    // Nobody by that name: an error naming it, at once.
    let e = a
        .send_tensor("nobody", header(3, 4), Bytes::from_static(&[1, 2, 3, 4]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("nobody"), "{e}");
}
