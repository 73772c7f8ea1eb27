//! QUIC (the cluster transport, with its tuned settings and full mutual TLS) against plain
//! TCP on loopback, in the same run: a 256 MiB tensor and the round trip of a 4 KiB message on
//! an open stream / socket. The QUIC tensor takes the node's real path: two `Cluster` nodes,
//! `send_tensor` (striped over several connections) to `tensors()` on the other, timed until
//! the reassembled tensor is delivered; TCP sends header + payload on one socket, acked.
//!
//!     cargo bench --bench transport            # prints a table; BENCHMARKS.md has results
//!
//! Environment: VKML_BENCH_MIB (tensor size, default 256), VKML_BENCH_REPS (default 5),
//! VKML_TENSOR_LANES (the node's lanes, default min(4, cores)).

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vkml::cluster::tls::NodeTls;
use vkml::cluster::{Cluster, ClusterConfig, MemberState, Secret, transport};
use vkml_protocol::{Message, pb};

const RTT_ROUNDS: usize = 2000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn fmt_runs(v: &[f64]) -> String {
    v.iter()
        .map(|s| format!("{s:.3}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn header(bytes: usize) -> Vec<u8> {
    Message::Tensor(pb::TensorHeader {
        run_id: 1,
        edge_id: 1,
        dtype: "float32".into(),
        shape: vec![bytes as u64 / 4],
        payload_bytes: bytes as u64,
        ..Default::default()
    })
    .encode()
    .unwrap()
}

/// The lanes to stripe over: VKML_TENSOR_LANES (this bench's own setting, as the node binary
/// reads it) or the node's default.
fn lanes() -> usize {
    std::env::var("VKML_TENSOR_LANES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(vkml::cluster::tensors::default_lanes)
}

/// The node's own path: two `Cluster` nodes on loopback, `send_tensor` on one, `tensors()` on
/// the other (striped over VKML_TENSOR_LANES connections, default min(4, cores)), timed until
/// the reassembled tensor is in the receiver's hands.
async fn quic_tensor(payload: Bytes, reps: usize) -> (Vec<f64>, usize) {
    let secret = Secret::generate().unwrap();
    let config = |name: &str, join: Vec<String>| ClusterConfig {
        name: name.into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
        secret: secret.clone(),
        devices: vec![],
        tuning: Default::default(),
        tensor_lanes: lanes(),
        faults: None,
        lease_grace: vkml::cluster::DEFAULT_LEASE_GRACE,
        sequence_idle: vkml::cluster::DEFAULT_SEQUENCE_IDLE,
        data_listen: None,
    };
    let a = Cluster::start(config("sender", vec![])).await.unwrap();
    let b = Cluster::start(config("receiver", vec![a.addr().to_string()]))
        .await
        .unwrap();
    let mut rx = b.tensors();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !a
        .members()
        .iter()
        .any(|m| m.name == "receiver" && m.state == MemberState::Alive)
    {
        assert!(
            Instant::now() < deadline,
            "the nodes did not join within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let h = pb::TensorHeader {
        run_id: 1,
        edge_id: 1,
        dtype: "float32".into(),
        shape: vec![payload.len() as u64 / 4],
        payload_bytes: payload.len() as u64,
        ..Default::default()
    };
    // Dials the lanes before timing (as the raw version connected before timing).
    let warm = payload.slice(..payload.len().min(16 << 20));
    a.send_tensor("receiver", h.clone(), warm).await.unwrap();
    rx.recv().await.unwrap();
    let mut secs = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        a.send_tensor("receiver", h.clone(), payload.clone())
            .await
            .unwrap();
        let got = rx.recv().await.unwrap();
        secs.push(t.elapsed().as_secs_f64());
        assert_eq!(got.payload.len(), payload.len());
    }
    let lanes = a.tensor_lanes();
    b.leave().await;
    a.leave().await;
    (secs, lanes)
}

/// The 4 KiB round trip on one open QUIC stream (endpoints with the cluster's settings and TLS).
async fn quic_rtt() -> Vec<f64> {
    let secret = Secret::generate().unwrap();
    let server_tls = NodeTls::new(&secret, "server").unwrap();
    let client_tls = NodeTls::new(&secret, "client").unwrap();
    let server = transport::endpoint(&server_tls, "127.0.0.1:0".parse().unwrap(), true).unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            tokio::spawn(serve(incoming));
        }
    });
    let client = transport::endpoint(&client_tls, "127.0.0.1:0".parse().unwrap(), false).unwrap();
    let (conn, _) = transport::connect(
        &client,
        addr,
        vkml_protocol::hello("client", pb::Role::Member, 1),
    )
    .await
    .unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(
        &Message::StatusRequest(pb::StatusRequest {})
            .encode()
            .unwrap(),
    )
    .await
    .unwrap();
    let msg = vec![7u8; 4096];
    let mut back = vec![0u8; 4096];
    let mut rtts = Vec::with_capacity(RTT_ROUNDS);
    for _ in 0..RTT_ROUNDS {
        let t = Instant::now();
        send.write_all(&msg).await.unwrap();
        recv.read_exact(&mut back).await.unwrap();
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    conn.close(0u32.into(), b"done");
    rtts
}

async fn serve(incoming: quinn::Incoming) {
    {
        let conn = incoming.await.unwrap();
        transport::accept_hello(&conn, "server", 1).await.unwrap();
        // Each stream: a ping-pong session echoing 4 KiB messages.
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            tokio::spawn(async move {
                let _ = transport::read_message(&mut recv).await;
                let mut buf = vec![0u8; 4096];
                while recv.read_exact(&mut buf).await.is_ok() {
                    if send.write_all(&buf).await.is_err() {
                        break;
                    }
                }
            });
        }
    }
}

async fn tcp(payload: Bytes, reps: usize) -> (Vec<f64>, Vec<f64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let n = payload.len();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            s.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let mut kind = [0u8; 1];
                if s.read_exact(&mut kind).await.is_err() {
                    return;
                }
                if kind[0] == 1 {
                    let mut h = vec![0u8; header(n).len() - 1];
                    s.read_exact(&mut h).await.unwrap();
                    let mut buf = vec![0u8; 1 << 20];
                    let mut got = 0;
                    while got < n {
                        let k = s.read(&mut buf).await.unwrap();
                        if k == 0 {
                            break;
                        }
                        got += k;
                    }
                    s.write_all(&[1]).await.unwrap();
                } else {
                    let mut buf = vec![0u8; 4096];
                    while s.read_exact(&mut buf).await.is_ok() {
                        if s.write_all(&buf).await.is_err() {
                            break;
                        }
                    }
                }
            });
        }
    });
    let mut secs = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(&[1]).await.unwrap();
        s.write_all(&header(n)[1..]).await.unwrap();
        s.write_all(&payload).await.unwrap();
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack).await.unwrap();
        secs.push(t.elapsed().as_secs_f64());
    }
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(&[0]).await.unwrap();
    let msg = vec![7u8; 4096];
    let mut back = vec![0u8; 4096];
    let mut rtts = Vec::with_capacity(RTT_ROUNDS);
    for _ in 0..RTT_ROUNDS {
        let t = Instant::now();
        s.write_all(&msg).await.unwrap();
        s.read_exact(&mut back).await.unwrap();
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (secs, rtts)
}

fn main() {
    let mib: usize = std::env::var("VKML_BENCH_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let reps: usize = std::env::var("VKML_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let payload = Bytes::from(vec![0x5au8; mib << 20]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (q_secs, lanes) = rt.block_on(quic_tensor(payload.clone(), reps));
    let q_rtt = rt.block_on(quic_rtt());
    let (t_secs, t_rtt) = rt.block_on(tcp(payload, reps));
    rt.shutdown_timeout(Duration::from_secs(1));
    let mbps = |s: f64| (mib as f64) / s;
    let (qs, ts) = (median(q_secs.clone()), median(t_secs.clone()));
    let (qr, tr) = (median(q_rtt), median(t_rtt));
    println!(
        "transport on loopback, {mib} MiB tensor x {reps}, 4 KiB round trip x {RTT_ROUNDS} (medians)"
    );
    println!(
        "QUIC tensor: Cluster::send_tensor -> tensors(), {lanes} lane(s) (VKML_TENSOR_LANES), runs (s): {}",
        fmt_runs(&q_secs)
    );
    println!("TCP tensor runs (s): {}", fmt_runs(&t_secs));
    println!(
        "{:<6} {:>12} {:>12} {:>16}",
        "", "tensor s", "MiB/s", "4 KiB RTT us"
    );
    println!("{:<6} {:>12.3} {:>12.0} {:>16.1}", "QUIC", qs, mbps(qs), qr);
    println!("{:<6} {:>12.3} {:>12.0} {:>16.1}", "TCP", ts, mbps(ts), tr);
    println!(
        "QUIC/TCP throughput {:.0}%, RTT ratio {:.2}x",
        100.0 * ts / qs,
        qr / tr
    );
}
