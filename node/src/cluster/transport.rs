//! The QUIC side: one endpoint per node, its transport settings, the hello exchange that opens
//! every connection, and frames on streams.
//!
//! Settings, and why (a tensor is tens to hundreds of MiB; gossip is a few hundred bytes):
//! - Stream window 64 MiB, connection window 128 MiB, send window 128 MiB: at 10 Gbit/s that
//!   keeps a 50 ms round trip full without waiting on flow-control credit (quinn's defaults,
//!   1.25 MB per stream, cap one stream near 100 MB/s at 10 ms RTT).
//! - UDP socket buffers asked at 8 MiB: a burst of full-size packets otherwise overflows the
//!   kernel's default ~200 KiB receive buffer, and every drop costs a congestion-window cut.
//!   The kernel caps the request at net.core.rmem_max / wmem_max; we log what we got.
//! - Packets up to 6400 bytes: MTU discovery searches up to there (quinn stops at 1452 by
//!   default) on jumbo-frame networks, and loopback endpoints start there. Packet size is what
//!   bounds a QUIC connection's rate: quinn's pacer releases at most 256 packets per burst, and
//!   every packet costs its own crypto and bookkeeping; 1200-byte packets capped loopback at
//!   ~250 MiB/s, 6400-byte ones reach 1-2 GiB/s (BENCHMARKS.md). 6400 is the GSO limit.
//! - Idle timeout 10 s with keep-alives every 2 s: a connection to a vanished peer is dropped
//!   in bounded time; SWIM, not the idle timeout, is what declares a node dead (within 3 s).
//! - Datagram buffers 1 MiB: gossip must not be dropped by our own queue when a peer is slow.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, Endpoint, RecvStream, SendStream, VarInt};
use vkml_protocol::{FrameError, FrameHeader, HEADER_LEN, Message, error_code, pb};

use super::ClusterError;
use super::tls::{NodeTls, SERVER_NAME};

const MIB: u32 = 1024 * 1024;
/// The largest packet we send. quinn hands the kernel up to 10 packets per GSO call, and one
/// call carries at most 64 KiB: with larger packets every batch fails with EMSGSIZE and the
/// connection stalls (measured: 6400 runs, 6600 stalls). So not 8952 even on jumbo frames.
const MAX_MTU: u16 = 6400;
/// The largest UDP payload we accept: what our peers send at most. quinn sizes an endpoint's
/// receive buffer by it (times 64 coalesced segments times 32 datagrams a call): the
/// protocol's maximum, 65,527, made that 134 MB an endpoint, two a node, which held most of a
/// loaded node's RSS (about 270 MiB, in steps of 35 MiB in the soak, against 77-94 MiB with
/// this limit; BENCHMARKS.md session 24); 6,400 makes it 13 MB.
const MAX_UDP_PAYLOAD: u16 = MAX_MTU;
/// How long a hello exchange may take before the connection is given up.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

pub fn transport_config(loopback: bool) -> Arc<quinn::TransportConfig> {
    Arc::new(settings(
        loopback,
        Duration::from_secs(2),
        Duration::from_secs(10),
    ))
}

/// A tool's connection to a node (`submit`, the client API): keep-alives every second and
/// a 4 s idle timeout, so a client whose node died is told within 4 s instead of 10, and the
/// node sees a vanished client as soon (its models are leased to the connection).
pub fn tool_transport_config(loopback: bool) -> Arc<quinn::TransportConfig> {
    Arc::new(settings(loopback, Duration::from_secs(1), TOOL_IDLE))
}

/// How long a tool's connection may hear nothing from its node before it is given up.
pub const TOOL_IDLE: Duration = Duration::from_secs(4);

fn settings(loopback: bool, keep_alive: Duration, idle: Duration) -> quinn::TransportConfig {
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_MTU);
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(VarInt::from_u32(64 * MIB))
        .receive_window(VarInt::from_u32(128 * MIB))
        .send_window(128 * u64::from(MIB))
        .max_concurrent_bidi_streams(VarInt::from_u32(1024))
        .max_concurrent_uni_streams(VarInt::from_u32(1024))
        .datagram_receive_buffer_size(Some(MIB as usize))
        .datagram_send_buffer_size(MIB as usize)
        .keep_alive_interval(Some(keep_alive))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(idle).expect("seconds are a valid timeout"),
        ))
        .mtu_discovery_config(Some(mtu));
    if loopback {
        // Loopback's MTU is 64 KiB: no discovery needed, and nothing to fall back to.
        t.initial_mtu(MAX_MTU).min_mtu(MAX_MTU);
    }
    t
}

/// A UDP socket with large buffers, bound to `addr`.
fn udp_socket(addr: SocketAddr) -> Result<std::net::UdpSocket, ClusterError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let io = |e: std::io::Error| ClusterError::Io(format!("UDP socket on {addr}: {e}"));
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(io)?;
    for (what, r) in [
        ("receive", s.set_recv_buffer_size(8 << 20)),
        ("send", s.set_send_buffer_size(8 << 20)),
    ] {
        if let Err(e) = r {
            tracing::debug!("cannot set the UDP {what} buffer: {e}");
        }
    }
    tracing::debug!(
        "UDP buffers: receive {:?}, send {:?} bytes",
        s.recv_buffer_size().ok(),
        s.send_buffer_size().ok()
    );
    s.bind(&addr.into()).map_err(io)?;
    Ok(s.into())
}

/// The node's endpoint: serves (when `serve`) and connects, both with the cluster's TLS.
pub fn endpoint(tls: &NodeTls, addr: SocketAddr, serve: bool) -> Result<Endpoint, ClusterError> {
    let loopback = addr.ip().is_loopback();
    let server = if serve {
        Some(tls.server_config(loopback)?)
    } else {
        None
    };
    let runtime = quinn::default_runtime()
        .ok_or_else(|| ClusterError::Io("no async runtime for QUIC".into()))?;
    let mut config = quinn::EndpointConfig::default();
    config
        .max_udp_payload_size(MAX_UDP_PAYLOAD)
        .map_err(|e| ClusterError::Config(format!("UDP payload size: {e}")))?;
    let mut ep = Endpoint::new(config, server, udp_socket(addr)?, runtime)
        .map_err(|e| ClusterError::Io(format!("QUIC endpoint on {addr}: {e}")))?;
    ep.set_default_client_config(tls.client_config(loopback)?);
    Ok(ep)
}

/// Writes one frame.
pub async fn write_message(send: &mut SendStream, m: &Message) -> Result<(), ClusterError> {
    let frame = m
        .encode()
        .map_err(|e| ClusterError::Protocol(e.to_string()))?;
    send.write_all(&frame)
        .await
        .map_err(|e| ClusterError::Peer(format!("write: {e}")))
}

/// Reads one frame: `Ok(None)` at a clean end of stream. The header is checked (kind, cap)
/// before the body is allocated; a bad frame stops the stream with BAD_FRAME.
pub async fn read_message(recv: &mut RecvStream) -> Result<Option<Message>, ClusterError> {
    let mut h = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match recv.read(&mut h[got..]).await {
            Ok(Some(n)) => got += n,
            Ok(None) if got == 0 => return Ok(None),
            Ok(None) => return Err(bad_frame(recv, FrameError::Truncated)),
            Err(e) => return Err(ClusterError::Peer(format!("read: {e}"))),
        }
    }
    let header = FrameHeader::parse(h).map_err(|e| bad_frame(recv, e))?;
    let mut body = vec![0u8; header.len as usize];
    recv.read_exact(&mut body).await.map_err(|e| match e {
        quinn::ReadExactError::FinishedEarly(_) => bad_frame(recv, FrameError::Truncated),
        quinn::ReadExactError::ReadError(e) => ClusterError::Peer(format!("read: {e}")),
    })?;
    Message::decode(header.kind, body.into())
        .map(Some)
        .map_err(|e| bad_frame(recv, e))
}

fn bad_frame(recv: &mut RecvStream, e: FrameError) -> ClusterError {
    let _ = recv.stop(VarInt::from_u32(error_code::BAD_FRAME));
    ClusterError::Protocol(e.to_string())
}

/// Who is on the other end of a connection, as its hello said.
#[derive(Debug, Clone)]
pub struct PeerHello {
    pub name: String,
    pub generation: u64,
    pub role: pb::Role,
    pub version: u32,
    /// Where the peer serves data streams ("" when on the address dialled).
    pub data_addr: String,
}

/// Connects and says hello. Fails on TLS refusal (wrong key), version refusal, or timeout.
pub async fn connect(
    ep: &Endpoint,
    addr: SocketAddr,
    hello: pb::Hello,
) -> Result<(Connection, PeerHello), ClusterError> {
    let work = async {
        let conn = ep
            .connect(addr, SERVER_NAME)
            .map_err(|e| ClusterError::Peer(format!("connect to {addr}: {e}")))?
            .await
            .map_err(|e| ClusterError::Peer(format!("handshake with {addr}: {e}")))?;
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|e| ClusterError::Peer(format!("{addr}: {e}")))?;
        let role = hello.role();
        write_message(&mut send, &Message::Hello(hello)).await?;
        let _ = send.finish();
        match read_message(&mut recv).await? {
            Some(Message::Welcome(w)) => Ok((
                conn,
                PeerHello {
                    name: w.name,
                    generation: w.generation,
                    role,
                    version: w.version,
                    data_addr: w.data_addr,
                },
            )),
            Some(Message::Refused(r)) => {
                conn.close(VarInt::from_u32(error_code::VERSION), b"refused");
                if r.duplicate_name {
                    return Err(ClusterError::DuplicateName(format!(
                        "{addr} refused us: {}; give this node another --name",
                        r.reason
                    )));
                }
                Err(ClusterError::Refused(format!(
                    "{addr} refused us: {}",
                    r.reason
                )))
            }
            other => Err(ClusterError::Protocol(format!(
                "{addr} answered the hello with {other:?}"
            ))),
        }
    };
    tokio::time::timeout(HELLO_TIMEOUT, work)
        .await
        .map_err(|_| {
            ClusterError::Peer(format!("no answer from {addr} within {HELLO_TIMEOUT:?}"))
        })?
}

/// The acceptor's half of the hello: reads the Hello on the first stream, answers Welcome or
/// Refused. Nothing else on the connection is read before this succeeds.
///
/// A hello whose name cannot be a node's is refused (it would be printed in our logs). A
/// member hello with our own name from another life than ours is another node with our
/// name: the younger of the two (the larger generation: started later) must give up. When
/// that is the peer, it is refused saying so (`duplicate_name`); when it is us, the error
/// is [`ClusterError::DuplicateName`] and the peer is refused plainly.
pub async fn accept_hello(
    conn: &Connection,
    me: &str,
    generation: u64,
) -> Result<PeerHello, ClusterError> {
    accept_hello_checked(conn, me, generation, "", |_| async { None }).await
}

/// [`accept_hello`], where `taken` says whether another live member already has the hello's
/// name (a newcomer must not take it over in this node's table): the newcomer is then
/// refused, saying so.
pub async fn accept_hello_checked<F, Fut>(
    conn: &Connection,
    me: &str,
    generation: u64,
    data_addr: &str,
    taken: F,
) -> Result<PeerHello, ClusterError>
where
    F: FnOnce(pb::Hello) -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let work = async {
        let (mut send, mut recv) = conn
            .accept_bi()
            .await
            .map_err(|e| ClusterError::Peer(e.to_string()))?;
        let Some(Message::Hello(h)) = read_message(&mut recv).await? else {
            conn.close(VarInt::from_u32(error_code::NO_HELLO), b"expected a hello");
            return Err(ClusterError::Protocol("first frame was not a hello".into()));
        };
        let remote = conn.remote_address();
        let refusal = if let Err(e) = super::names::check(&h.name) {
            Some((e, false, None))
        } else if h.role() == pb::Role::Member && h.name == me && h.generation != generation {
            if h.generation > generation {
                let why = format!(
                    "the node named {me:?} there started earlier: node names must be unique"
                );
                Some((why, true, None))
            } else {
                let ours = ClusterError::DuplicateName(format!(
                    "another node named {me:?} runs at {remote} and started earlier: node \
                     names must be unique; give this node another --name"
                ));
                let why = format!("this node is named {me:?} too, and started later: it stops");
                Some((why, false, Some(ours)))
            }
        } else {
            taken(h.clone()).await.map(|why| (why, true, None))
        };
        if let Some((reason, duplicate_name, ours)) = refusal {
            let r = pb::Refused {
                reason: reason.clone(),
                duplicate_name,
            };
            write_message(&mut send, &Message::Refused(r)).await?;
            let _ = send.finish();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.closed()).await;
            conn.close(VarInt::from_u32(error_code::VERSION), b"refused");
            return Err(ours.unwrap_or(ClusterError::Refused(reason)));
        }
        match vkml_protocol::negotiate(&h) {
            Ok(version) => {
                let w = pb::Welcome {
                    version,
                    name: me.to_string(),
                    generation,
                    data_addr: data_addr.to_string(),
                };
                write_message(&mut send, &Message::Welcome(w)).await?;
                let _ = send.finish();
                Ok(PeerHello {
                    role: h.role(),
                    name: h.name,
                    generation: h.generation,
                    version,
                    data_addr: String::new(),
                })
            }
            Err(e) => {
                let reason = e.to_string();
                write_message(
                    &mut send,
                    &Message::Refused(pb::Refused {
                        reason: reason.clone(),
                        duplicate_name: false,
                    }),
                )
                .await?;
                let _ = send.finish();
                // Let the refusal reach the peer (it closes on reading it), then close.
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.closed()).await;
                conn.close(VarInt::from_u32(error_code::VERSION), b"version");
                Err(ClusterError::Refused(reason))
            }
        }
    };
    tokio::time::timeout(HELLO_TIMEOUT, work)
        .await
        .map_err(|_| ClusterError::Peer("no hello within the time limit".into()))?
}
