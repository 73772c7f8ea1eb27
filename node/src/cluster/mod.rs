//! The cluster: nodes that find each other, prove they share a secret, gossip membership and
//! inventories, and open streams to each other by name.
//!
//! - [`secret`], [`tls`]: the key file, and mutual TLS derived from it;
//! - [`transport`]: the QUIC endpoints (gossip's, and data's; settings for tensors), hellos,
//!   frames on streams;
//! - [`faults`]: seeded drop/delay/duplication/partition/stall for tests;
//! - [`membership`]: SWIM (foca) driven from a tokio task over QUIC datagrams, on the
//!   membership thread (`threads`), never the main runtime;
//! - [`inventory`]: this node's devices, and the wire <-> planner records;
//! - [`view`]: the membership table every API reads;
//! - [`service`]: accepting connections and answering requests (status, inventory, leave);
//! - [`tensors`]: whole tensors between members, large ones striped over several connections;
//! - [`client`]: a tool's connection (`vkml-node status`);
//! - [`names`]: what a node may be called;
//! - `inner.rs`: the shared state's work (view, members up and down, gossip, dialling).
//!
//! docs/CLUSTER.md explains the choices.

pub mod client;
pub mod faults;
mod inner;
pub mod inventory;
pub mod membership;
pub mod names;
pub mod secret;
pub mod service;
pub mod tensors;
mod threads;
pub mod tls;
pub mod transport;
pub mod view;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message as _;
use quinn::{Connection, Endpoint, RecvStream, SendStream, VarInt};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use vkml_planner::Snapshot;
use vkml_protocol::{Message, error_code, pb};

use crate::tuning::Tuning;

pub use faults::Faults;
pub use membership::NodeId;
pub use secret::Secret;
pub use tensors::{ArrivedTensor, DroppedTensor};
pub use view::{MemberEvent, MemberInfo, MemberState};

pub use faults::FaultConfig;
use membership::Input;
use tls::NodeTls;
use view::View;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster key: {0}")]
    Key(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Io(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("peer: {0}")]
    Peer(String),
    #[error("refused: {0}")]
    Refused(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("no member named '{0}' is alive")]
    NoSuchMember(String),
    #[error("member '{0}' is cut off by fault injection")]
    Partitioned(String),
    /// Another live node has this node's name.
    #[error("{0}")]
    DuplicateName(String),
}

/// How to start a node.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub name: String,
    pub listen: SocketAddr,
    /// The address others reach us at; defaults to `listen` (which must then be specific).
    pub advertise: Option<SocketAddr>,
    /// Seeds: "host:port" (DNS names are resolved, and re-resolved while joining).
    pub join: Vec<String>,
    pub secret: Secret,
    pub devices: Vec<pb::Device>,
    /// How this node plans and runs models (fusion, kernel choices, arming).
    pub tuning: Tuning,
    /// Connections a large tensor is striped over ([`tensors::default_lanes`] normally).
    pub tensor_lanes: usize,
    /// Injected drops, delays and partitions, for tests (docs/CLUSTER.md, "Faults").
    pub faults: Option<FaultConfig>,
    /// How long a model outlives the client connection that loaded it.
    pub lease_grace: Duration,
    /// How long what a node keeps for an idle sequence (its bound values) outlives its last
    /// step.
    pub sequence_idle: Duration,
    /// Where to serve data streams; None: the listen address's host, a port the system picks
    /// (peers and clients learn it from gossip and the welcome).
    pub data_listen: Option<SocketAddr>,
}

/// How long a node asks a member whether it is alive before letting a newcomer take its name.
const NAME_PROBE: Duration = Duration::from_millis(1500);

/// How long a model outlives the client connection that loaded it, unless configured.
pub const DEFAULT_LEASE_GRACE: Duration = Duration::from_secs(5);

/// [`ClusterConfig::sequence_idle`] unless set: ten minutes.
pub const DEFAULT_SEQUENCE_IDLE: Duration = Duration::from_secs(600);

/// What the execution layer adds to a status reply: the models submitted to this node and
/// the fragments it holds.
#[derive(Debug, Default, Clone)]
pub struct ExecStatus {
    pub models: Vec<pb::ModelStatus>,
    pub fragments: Vec<pb::FragmentStatus>,
    pub weight_bytes_received: u64,
    pub weight_bytes_cached: u64,
    /// Sequences kept here (distributed/kept.rs) and the bytes of their values.
    pub sequences_kept: u64,
    pub sequence_bytes: u64,
    pub sequence_gpu_bytes: u64,
    /// Weights the plans of a model share on this node's GPUs, and those its loads reused.
    pub shared_weight_bytes: u64,
    pub weight_bytes_reused: u64,
}

type StatusSource = Arc<dyn Fn() -> ExecStatus + Send + Sync>;

/// A stream a peer opened with a message this layer does not handle itself (plan fragments,
/// tensors...): for the execution layer, through [`Cluster::incoming`].
pub struct IncomingStream {
    pub peer: String,
    /// Opened by a tool (`vkml-node submit`, the client API), not by a cluster member.
    pub client: bool,
    /// The connection it came on: a client's models are leased to it (its id), and
    /// unloaded once it closes.
    pub conn: Connection,
    pub first: Message,
    pub send: Option<SendStream>,
    pub recv: RecvStream,
}

/// A running node's membership and transport. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

enum PeerSlot {
    Up(Connection),
    /// Gossip waiting for the connection (bounded; gossip may be lost anyway).
    Connecting(Vec<Bytes>),
    /// The last attempt failed at this instant: do not hammer.
    Failed(Instant),
}

pub(crate) struct Inner {
    name: String,
    addr: SocketAddr,
    generation: AtomicU64,
    /// Gossip's endpoint (the listen address), driven by the membership thread.
    endpoint: Endpoint,
    /// The data endpoint (streams: submissions, fragments, runs, tensors), driven by the main
    /// runtime: bulk transfers never queue in front of a probe, in a socket or on a thread.
    data: Endpoint,
    data_addr: SocketAddr,
    /// The main runtime: stream work is spawned here, whichever thread notices it.
    main: tokio::runtime::Handle,
    /// Dropped when the node leaves: the membership thread then ends.
    gossip_stop: Mutex<Option<oneshot::Sender<()>>>,
    faults: Option<Faults>,
    view: RwLock<View>,
    events: broadcast::Sender<MemberEvent>,
    /// Outgoing connections by (address, generation): a restarted peer gets a new one.
    peers: Mutex<HashMap<(SocketAddr, u64), PeerSlot>>,
    gossip_tx: mpsc::UnboundedSender<Input>,
    inventory: Mutex<pb::Inventory>,
    incoming: Mutex<Option<mpsc::Sender<IncomingStream>>>,
    tensors: tensors::TensorState,
    exec_stats: ExecStats,
    tuning: Tuning,
    /// The distributed machines' settings.
    dist: vkml_protocol::dist::Config,
    /// This node's life: changes when it learns it was declared dead and renews.
    life: watch::Sender<u64>,
    /// Why this node must stop (another node has its name), once it must.
    fatal: watch::Sender<Option<String>>,
    status_source: Mutex<Option<StatusSource>>,
}

/// Counters the execution layer keeps and `status` reports.
#[derive(Default)]
pub struct ExecStats {
    /// Payload bytes of values sent to / received from other nodes (a plan's cut edges).
    pub edge_bytes_sent: AtomicU64,
    pub edge_bytes_received: AtomicU64,
    /// The same, per peer: (sent, received).
    peers: Mutex<std::collections::BTreeMap<String, (u64, u64)>>,
}

impl ExecStats {
    /// `bytes` of cut-edge values went to `peer`.
    pub fn edge_sent(&self, peer: &str, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.edge_bytes_sent.fetch_add(bytes, Relaxed);
        lock(&self.peers).entry(peer.to_string()).or_default().0 += bytes;
    }

    /// `bytes` of cut-edge values came from `peer`.
    pub fn edge_received(&self, peer: &str, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.edge_bytes_received.fetch_add(bytes, Relaxed);
        lock(&self.peers).entry(peer.to_string()).or_default().1 += bytes;
    }

    pub fn peers(&self) -> Vec<vkml_protocol::pb::PeerTraffic> {
        lock(&self.peers)
            .iter()
            .map(|(node, &(sent, received))| vkml_protocol::pb::PeerTraffic {
                node: node.clone(),
                edge_bytes_sent: sent,
                edge_bytes_received: received,
            })
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    /// Binds the endpoint, starts gossip, and starts joining through the seeds (in the
    /// background: a seed that is not up yet is retried every second).
    pub async fn start(cfg: ClusterConfig) -> Result<Cluster, ClusterError> {
        names::check(&cfg.name).map_err(ClusterError::Config)?;
        if !(1..=tensors::MAX_LANES).contains(&cfg.tensor_lanes) {
            return Err(ClusterError::Config(format!(
                "{} tensor lanes: give 1 to {}",
                cfg.tensor_lanes,
                tensors::MAX_LANES
            )));
        }
        let faults = cfg.faults.clone().map(|f| {
            tracing::warn!("fault injection is on ({} rules)", f.rules.len());
            Faults::new(f)
        });
        let tls = NodeTls::new(&cfg.secret, &cfg.name)?;
        let (gossip_rt, gossip_stop) = threads::gossip_thread()?;
        let listen = cfg.listen;
        let tls2 = NodeTls::new(&cfg.secret, &cfg.name)?;
        let endpoint = gossip_rt
            .spawn(async move { transport::endpoint(&tls2, listen, true) })
            .await
            .map_err(|e| ClusterError::Io(format!("the membership thread: {e}")))??;
        let data_bind = cfg
            .data_listen
            .unwrap_or(SocketAddr::new(cfg.listen.ip(), 0));
        let data = transport::endpoint(&tls, data_bind, true)?;
        let local = endpoint
            .local_addr()
            .map_err(|e| ClusterError::Io(e.to_string()))?;
        let data_local = data
            .local_addr()
            .map_err(|e| ClusterError::Io(e.to_string()))?;
        let addr = match cfg.advertise {
            Some(a) => a,
            None if local.ip().is_unspecified() => {
                return Err(ClusterError::Config(format!(
                    "listening on {local}: say which address peers should use with --advertise"
                )));
            }
            None => local,
        };
        // Peers reach the data endpoint at the advertised host, on the data port.
        let data_addr = SocketAddr::new(addr.ip(), data_local.port());
        let generation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64);
        let inventory = pb::Inventory {
            node: cfg.name.clone(),
            generation,
            version: 1,
            data_addr: data_addr.to_string(),
            devices: cfg.devices.clone(),
        };
        let (gossip_tx, gossip_rx) = mpsc::unbounded_channel();
        let me = NodeId {
            name: cfg.name.clone(),
            addr,
            generation,
        };
        let inner = Arc::new(Inner {
            name: cfg.name.clone(),
            addr,
            generation: AtomicU64::new(generation),
            endpoint: endpoint.clone(),
            data: data.clone(),
            data_addr,
            main: tokio::runtime::Handle::current(),
            gossip_stop: Mutex::new(Some(gossip_stop)),
            faults,
            view: RwLock::new(View::new(&me)),
            events: broadcast::channel(256).0,
            peers: Mutex::new(HashMap::new()),
            gossip_tx,
            inventory: Mutex::new(inventory.clone()),
            incoming: Mutex::new(None),
            tensors: tensors::TensorState::new(cfg.tensor_lanes),
            exec_stats: ExecStats::default(),
            tuning: cfg.tuning,
            dist: vkml_protocol::dist::Config {
                lease_grace: cfg.lease_grace,
                sequence_idle: cfg.sequence_idle,
                ..Default::default()
            },
            life: watch::channel(generation).0,
            fatal: watch::channel(None).0,
            status_source: Mutex::new(None),
        });
        inner.store_inventory(inventory.clone());
        gossip_rt.spawn(membership::run(
            inner.clone(),
            me,
            inventory.encode_to_vec(),
            gossip_rx,
        ));
        gossip_rt.spawn(service::accept_loop(inner.clone(), endpoint, true));
        tokio::spawn(service::accept_loop(inner.clone(), data, false));
        tokio::spawn(tensors::watch(
            Arc::downgrade(&inner),
            inner.events.subscribe(),
        ));
        if !cfg.join.is_empty() {
            gossip_rt.spawn(join_loop(inner.clone(), cfg.join.clone()));
        }
        if let Some(f) = &cfg.faults {
            threads::stall_windows(&f.stall);
        }
        tracing::info!(
            "node {} listening on {local}, reachable at {addr} (data at {data_addr}), {} device(s)",
            cfg.name,
            cfg.devices.len()
        );
        Ok(Cluster { inner })
    }

    /// How this node plans and runs models.
    pub fn tuning(&self) -> Tuning {
        self.inner.tuning
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The address peers use for us.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Every member ever seen (this node included), by name, with its latest state.
    pub fn members(&self) -> Vec<MemberInfo> {
        self.inner.read_view().members()
    }

    /// The alive members with their devices, frozen: what a plan is made from.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.read_view().snapshot()
    }

    /// The snapshot with whole budgets, as if nothing were loaded.
    pub fn snapshot_gross(&self) -> Snapshot {
        self.inner.read_view().snapshot_of(false)
    }

    pub fn exec_stats(&self) -> &ExecStats {
        &self.inner.exec_stats
    }

    /// The distributed machines' settings (`ClusterConfig::lease_grace` among them).
    /// The op fault injection makes panic in runs here (docs/CLUSTER.md, "Fault injection").
    pub fn panic_op(&self) -> Option<String> {
        self.inner
            .faults
            .as_ref()
            .and_then(|f| f.panic_op().map(str::to_string))
    }

    pub fn dist_config(&self) -> vkml_protocol::dist::Config {
        self.inner.dist.clone()
    }

    /// This node's life (membership generation), which changes when it learns it had been
    /// declared dead and rejoins: every other node then dropped its part of this node's
    /// plans.
    pub fn life(&self) -> watch::Receiver<u64> {
        self.inner.life.subscribe()
    }

    /// Resolves, with the reason, when this node must stop: another live node has its name
    /// and started first.
    pub async fn fatal(&self) -> String {
        let mut rx = self.inner.fatal.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// What the execution layer adds to `status` replies.
    pub fn set_status_source(&self, f: impl Fn() -> ExecStatus + Send + Sync + 'static) {
        *lock(&self.inner.status_source) = Some(Arc::new(f));
    }

    /// Membership changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<MemberEvent> {
        self.inner.events.subscribe()
    }

    /// Streams peers (members and clients) open with messages this layer does not serve.
    /// Call once; without a taker such streams are answered with an UNSUPPORTED error.
    pub fn incoming(&self) -> mpsc::Receiver<IncomingStream> {
        let (tx, rx) = mpsc::channel(64);
        *lock(&self.inner.incoming) = Some(tx);
        rx
    }

    /// A bidirectional stream to a live member.
    pub async fn open_bi(&self, member: &str) -> Result<(SendStream, RecvStream), ClusterError> {
        let conn = self.inner.connection_to(member).await?;
        conn.open_bi()
            .await
            .map_err(|e| ClusterError::Peer(format!("{member}: {e}")))
    }

    /// A unidirectional stream to a live member.
    pub async fn open_uni(&self, member: &str) -> Result<SendStream, ClusterError> {
        let conn = self.inner.connection_to(member).await?;
        conn.open_uni()
            .await
            .map_err(|e| ClusterError::Peer(format!("{member}: {e}")))
    }

    /// The bytes loaded models' parts reserve on each of this node's devices (inventory
    /// order), gossiped when they change so that every submitter plans against free memory.
    pub fn set_reserved(&self, reserved: &[u64]) {
        let devices = {
            let inv = lock(&self.inner.inventory);
            let same = inv.devices.len() == reserved.len()
                && inv
                    .devices
                    .iter()
                    .zip(reserved)
                    .all(|(d, &r)| d.reserved == r);
            if same {
                return;
            }
            let mut devices = inv.devices.clone();
            for (d, &r) in devices.iter_mut().zip(reserved) {
                d.reserved = r;
            }
            devices
        };
        self.set_devices(devices);
    }

    /// This node's inventory as it is now (its devices' reservations included).
    pub fn own_inventory(&self) -> pb::Inventory {
        lock(&self.inner.inventory).clone()
    }

    /// A member's inventory it sent us itself (answering an unload): taken like gossip if
    /// newer than what we know. Only a node's own record is taken from it.
    pub fn learn_inventory(&self, from: &str, inv: pb::Inventory) {
        if inv.node == from {
            self.inner.store_inventory(inv);
        } else {
            tracing::debug!("{from} sent the inventory of {}: ignored", inv.node);
        }
    }

    /// Changes this node's inventory (budgets, devices) and gossips the new version.
    pub fn set_devices(&self, devices: Vec<pb::Device>) {
        let inv = {
            let mut inv = lock(&self.inner.inventory);
            inv.version += 1;
            inv.devices = devices;
            inv.clone()
        };
        self.inner.store_inventory(inv.clone());
        let _ = self
            .inner
            .gossip_tx
            .send(Input::Inventory(inv.encode_to_vec()));
    }

    /// Leaves on purpose: tells every live member (so they say "left", not "dead"), gossips
    /// our departure, and closes the endpoint. Bounded to a few seconds.
    pub async fn leave(self) {
        let inner = self.inner;
        let leave = Message::Leave(pb::Leave {
            node: inner.name.clone(),
            generation: inner.generation.load(Ordering::Relaxed),
        });
        let others: Vec<String> = inner
            .read_view()
            .members()
            .into_iter()
            .filter(|m| m.name != inner.name && m.state.is_live())
            .map(|m| m.name)
            .collect();
        let sends = others.into_iter().map(|name| {
            let inner = inner.clone();
            let leave = leave.clone();
            async move {
                let mut s = inner
                    .connection_to(&name)
                    .await?
                    .open_uni()
                    .await
                    .map_err(|e| ClusterError::Peer(e.to_string()))?;
                transport::write_message(&mut s, &leave).await?;
                let _ = s.finish();
                let _ = s.stopped().await;
                Ok::<(), ClusterError>(())
            }
        });
        let all = futures_join_all(sends);
        let _ = tokio::time::timeout(Duration::from_secs(2), all).await;
        let (tx, rx) = oneshot::channel();
        if inner.gossip_tx.send(Input::Leave(tx)).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(1), rx).await;
        }
        // Let the last datagrams go out before the endpoint closes.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for ep in [&inner.endpoint, &inner.data] {
            ep.close(VarInt::from_u32(error_code::OK), b"leaving");
        }
        let idle = async {
            inner.endpoint.wait_idle().await;
            inner.data.wait_idle().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), idle).await;
        lock(&inner.gossip_stop).take();
        tracing::info!("node {} left the cluster", inner.name);
    }
}

/// Runs futures concurrently and waits for all (tokio has no join_all of its own).
async fn futures_join_all<F: std::future::Future + Send + 'static>(futs: impl Iterator<Item = F>)
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    for h in handles {
        let _ = h.await;
    }
}

/// Announces to the seeds every second while we know no member. DNS names are resolved on
/// each try, so seeds (Kubernetes pods) may come up after us.
async fn join_loop(inner: Arc<Inner>, seeds: Vec<String>) {
    loop {
        let mut addrs = Vec::new();
        for s in &seeds {
            match tokio::net::lookup_host(s.as_str()).await {
                Ok(found) => addrs.extend(found.filter(|a| *a != inner.addr)),
                Err(e) => tracing::debug!("join: cannot resolve {s}: {e}"),
            }
        }
        if inner.gossip_tx.send(Input::Announce(addrs)).is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
