//! QUIC (the cluster transport, with its tuned settings and full mutual TLS) against plain
//! TCP on loopback, in the same run: a 256 MiB tensor (header frame + raw payload, acked by
//! the receiver), and the round trip of a 4 KiB message on an open stream / socket.
//!
//!     cargo bench --bench transport            # prints a table; BENCHMARKS.md has results
//!
//! Environment: VKML_BENCH_MIB (tensor size, default 256), VKML_BENCH_REPS (default 5).

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vkml::cluster::tls::NodeTls;
use vkml::cluster::{Secret, transport};
use vkml_protocol::{Message, pb};

const RTT_ROUNDS: usize = 2000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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

async fn quic(payload: Bytes, reps: usize) -> (Vec<f64>, Vec<f64>) {
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
    let mut lanes = Vec::new();
    for _ in 0..lanes_wanted() {
        let (conn, _) = transport::connect(
            &client,
            addr,
            vkml_protocol::hello("client", pb::Role::Member, 1),
        )
        .await
        .unwrap();
        lanes.push(conn);
    }
    let conn = lanes[0].clone();
    let mut secs = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        // The tensor split evenly over the lanes (one connection each), sent concurrently.
        let part = payload.len().div_ceil(lanes.len());
        let sends: Vec<_> = lanes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let c = c.clone();
                let bytes = payload
                    .slice((i * part).min(payload.len())..((i + 1) * part).min(payload.len()));
                tokio::spawn(send_tensor(c, bytes))
            })
            .collect();
        for s in sends {
            s.await.unwrap();
        }
        secs.push(t.elapsed().as_secs_f64());
    }
    let st = conn.stats();
    println!(
        "QUIC path: {} lane(s), mtu {} B, {} packets sent, {} lost, {} congestion events, cwnd {} B",
        lanes.len(),
        st.path.current_mtu,
        st.path.sent_packets,
        st.path.lost_packets,
        st.path.congestion_events,
        st.path.cwnd
    );
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    // A first frame that is not a tensor makes the server echo.
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
    for c in lanes {
        c.close(0u32.into(), b"done");
    }
    (secs, rtts)
}

/// Connections a tensor is spread over (VKML_BENCH_LANES, default 1).
fn lanes_wanted() -> usize {
    std::env::var("VKML_BENCH_LANES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

async fn send_tensor(conn: quinn::Connection, payload: Bytes) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&header(payload.len())).await.unwrap();
    for off in (0..payload.len()).step_by(1 << 20) {
        let end = (off + (1 << 20)).min(payload.len());
        send.write_chunk(payload.slice(off..end)).await.unwrap();
    }
    let _ = send.finish();
    let mut ack = [0u8; 1];
    recv.read_exact(&mut ack).await.unwrap();
}

async fn serve(incoming: quinn::Incoming) {
    {
        let conn = incoming.await.unwrap();
        transport::accept_hello(&conn, "server", 1).await.unwrap();
        // Each stream: one tensor (header, payload, ack) or a ping-pong session.
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            tokio::spawn(async move {
                match transport::read_message(&mut recv).await {
                    Ok(Some(Message::Tensor(h))) => {
                        let mut got = 0u64;
                        while got < h.payload_bytes {
                            match recv.read_chunk(usize::MAX, true).await {
                                Ok(Some(c)) => got += c.bytes.len() as u64,
                                _ => break,
                            }
                        }
                        send.write_all(&[1]).await.unwrap();
                        let _ = send.finish();
                    }
                    _ => {
                        // Ping-pong: echo 4 KiB messages back.
                        let mut buf = vec![0u8; 4096];
                        while recv.read_exact(&mut buf).await.is_ok() {
                            if send.write_all(&buf).await.is_err() {
                                break;
                            }
                        }
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
    let (q_secs, q_rtt) = rt.block_on(quic(payload.clone(), reps));
    let (t_secs, t_rtt) = rt.block_on(tcp(payload, reps));
    rt.shutdown_timeout(Duration::from_secs(1));
    let mbps = |s: f64| (mib as f64) / s;
    let (qs, ts) = (median(q_secs), median(t_secs));
    let (qr, tr) = (median(q_rtt), median(t_rtt));
    println!(
        "transport on loopback, {mib} MiB tensor x {reps}, 4 KiB round trip x {RTT_ROUNDS} (medians)"
    );
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
