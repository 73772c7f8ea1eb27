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
//! - [`names`]: what a node may be called.
//!
//! docs/CLUSTER.md explains the choices.

pub mod client;
pub mod faults;
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
use vkml_protocol::{Message, datagram, error_code, pb};

use crate::tuning::Tuning;

pub use faults::Faults;
pub use membership::NodeId;
pub use secret::Secret;
pub use tensors::{ArrivedTensor, DroppedTensor};
pub use view::{MemberEvent, MemberInfo, MemberState};

pub use faults::FaultConfig;
use faults::Verdict;
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

impl Inner {
    fn read_view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_view(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, events: Vec<MemberEvent>) {
        for e in events {
            tracing::info!("{e}");
            let _ = self.events.send(e);
        }
    }

    fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Relaxed);
        lock(&self.inventory).generation = generation;
        self.life.send_replace(generation);
    }

    /// This node must stop: another live node has its name.
    pub(crate) fn fail(&self, why: String) {
        tracing::error!("{why}");
        self.fatal.send_if_modified(|v| {
            let first = v.is_none();
            if first {
                *v = Some(why);
            }
            first
        });
    }

    /// Whether another node answers to the name a member's hello claims: a live member of
    /// that name at another address, of an older life, that answers now. A newcomer with a
    /// taken name is refused, so that it does not replace the other in this node's table (a
    /// node restarted elsewhere is not refused: its former life no longer answers).
    pub(crate) async fn name_taken(
        self: &Arc<Self>,
        h: &pb::Hello,
        from: SocketAddr,
    ) -> Option<String> {
        if h.role() != pb::Role::Member || h.name == self.name {
            return None;
        }
        let m = self.read_view().live(&h.name)?;
        if m.addr == from || h.generation <= m.generation {
            return None;
        }
        // A fresh connection: a cached one may outlive its peer by the idle timeout.
        let addr = self.data_addr_of(&h.name, m.addr);
        let probe = tokio::time::timeout(NAME_PROBE, self.dial_data(addr)).await;
        if let Ok(Ok(c)) = &probe {
            c.close(VarInt::from_u32(error_code::OK), b"name probe");
        }
        matches!(probe, Ok(Ok(_))).then(|| {
            format!(
                "a node named {:?} runs at {} and started earlier: node names must be unique",
                h.name, m.addr
            )
        })
    }

    pub(crate) fn exec_status(&self) -> ExecStatus {
        let f = lock(&self.status_source).clone();
        f.map(|f| f()).unwrap_or_default()
    }

    fn member_up(self: &Arc<Self>, id: &NodeId) {
        if let Err(e) = names::check(&id.name) {
            tracing::warn!(
                "gossip names a member at {} that cannot be one: {e}",
                id.addr
            );
            return;
        }
        if id.name == self.name && id.addr != self.addr {
            // Gossip says another node has our name: ask it (the hello decides who yields).
            let inner = self.clone();
            let addr = id.addr;
            tokio::spawn(async move {
                if let Err(e) = inner.dial(addr).await {
                    tracing::debug!(
                        "checking the other node named {} at {addr}: {e}",
                        inner.name
                    );
                }
            });
            return;
        }
        let events = self.write_view().up(id);
        let fresh = !events.is_empty();
        self.publish(events);
        if fresh {
            // A newcomer may have missed our inventory broadcast: hand it over directly.
            let inner = self.clone();
            let name = id.name.clone();
            self.main.spawn(async move {
                let inv = lock(&inner.inventory).clone();
                let r = async {
                    let mut s = inner
                        .connection_to(&name)
                        .await?
                        .open_uni()
                        .await
                        .map_err(|e| ClusterError::Peer(e.to_string()))?;
                    transport::write_message(&mut s, &Message::Inventory(inv)).await?;
                    s.finish().map_err(|e| ClusterError::Peer(e.to_string()))
                };
                if let Err(e) = r.await {
                    tracing::debug!("cannot send our inventory to {name}: {e}");
                }
            });
        }
    }

    fn member_down(&self, id: &NodeId) {
        let data = self.read_view().data_addr(&id.name);
        let events = self.write_view().down(id);
        self.publish(events);
        let mut peers = lock(&self.peers);
        for addr in std::iter::once(id.addr).chain(data) {
            if let Some(PeerSlot::Up(c)) = peers.remove(&(addr, id.generation)) {
                c.close(VarInt::from_u32(error_code::OK), b"down");
            }
        }
    }

    fn sync_suspicion(&self, members: impl Iterator<Item = (NodeId, bool)>) {
        let events = self.write_view().suspicion(members);
        self.publish(events);
    }

    fn store_inventory(&self, inv: pb::Inventory) {
        self.write_view().inventory(inv);
    }

    fn mark_left(&self, node: &str, generation: u64) {
        let events = self.write_view().left(node, generation);
        self.publish(events);
    }

    /// Gossip to one member: through the cached connection, or queued while one is made.
    fn send_gossip(self: &Arc<Self>, to: NodeId, data: Bytes) {
        let (delay, copies) = match self.faults.as_ref().map(|f| f.datagram(&to.name, true)) {
            Some(Verdict::Drop) => return,
            Some(Verdict::Pass { delay, copies }) => (delay, copies),
            None => (Duration::ZERO, 1),
        };
        let payload = Bytes::from(datagram::encode(datagram::GOSSIP, &data));
        let key = (to.addr, to.generation);
        let mut peers = lock(&self.peers);
        match peers.get_mut(&key) {
            Some(PeerSlot::Up(conn)) if conn.close_reason().is_none() => {
                let conn = conn.clone();
                drop(peers);
                send_datagram(conn, payload, delay, copies);
            }
            Some(PeerSlot::Connecting(queue)) => {
                if queue.len() < 64 {
                    queue.push(payload);
                }
            }
            Some(PeerSlot::Failed(at)) if at.elapsed() < Duration::from_millis(500) => {}
            _ => {
                peers.insert(key, PeerSlot::Connecting(vec![payload]));
                drop(peers);
                let inner = self.clone();
                tokio::spawn(async move {
                    let r = inner.dial(to.addr).await;
                    let mut peers = lock(&inner.peers);
                    let queued = match peers.remove(&key) {
                        Some(PeerSlot::Connecting(q)) => q,
                        _ => Vec::new(),
                    };
                    match r {
                        Ok(conn) => {
                            peers.insert(key, PeerSlot::Up(conn.clone()));
                            drop(peers);
                            for p in queued {
                                send_datagram(conn.clone(), p, delay, copies);
                            }
                        }
                        Err(e) => {
                            peers.insert(key, PeerSlot::Failed(Instant::now()));
                            match e {
                                ClusterError::Refused(_) => tracing::warn!("{e}"),
                                _ => tracing::debug!("gossip to {}: {e}", to.addr),
                            }
                        }
                    }
                });
            }
        }
    }

    /// A new gossip connection to `addr` (from the gossip endpoint), hello done, served for
    /// anything the peer opens on it.
    async fn dial(self: &Arc<Self>, addr: SocketAddr) -> Result<Connection, ClusterError> {
        self.dial_from(&self.endpoint, addr).await
    }

    /// A new data connection to `addr` (from the data endpoint).
    async fn dial_data(self: &Arc<Self>, addr: SocketAddr) -> Result<Connection, ClusterError> {
        self.dial_from(&self.data, addr).await
    }

    async fn dial_from(
        self: &Arc<Self>,
        endpoint: &Endpoint,
        addr: SocketAddr,
    ) -> Result<Connection, ClusterError> {
        let hello = vkml_protocol::hello(
            &self.name,
            pb::Role::Member,
            self.generation.load(Ordering::Relaxed),
        );
        let (conn, peer) = match transport::connect(endpoint, addr, hello).await {
            Err(ClusterError::DuplicateName(why)) => {
                self.fail(why.clone());
                return Err(ClusterError::DuplicateName(why));
            }
            r => r?,
        };
        tokio::spawn(service::serve(self.clone(), conn.clone(), peer));
        Ok(conn)
    }

    /// Where to open data streams to `member`: its data endpoint once its inventory says
    /// where, else its gossip address (which serves streams too).
    fn data_addr_of(&self, member: &str, gossip: SocketAddr) -> SocketAddr {
        self.read_view().data_addr(member).unwrap_or(gossip)
    }

    /// The connection to a live member by name (cached; made when missing).
    async fn connection_to(self: &Arc<Self>, member: &str) -> Result<Connection, ClusterError> {
        let info = self
            .read_view()
            .live(member)
            .ok_or_else(|| ClusterError::NoSuchMember(member.to_string()))?;
        if let Some(f) = &self.faults {
            if f.partitioned(member) {
                return Err(ClusterError::Partitioned(member.to_string()));
            }
            tokio::time::sleep(f.delay(member)).await;
        }
        let addr = self.data_addr_of(member, info.addr);
        let key = (addr, info.generation);
        if let Some(PeerSlot::Up(c)) = lock(&self.peers).get(&key)
            && c.close_reason().is_none()
        {
            return Ok(c.clone());
        }
        let conn = self.dial_data(addr).await?;
        let mut peers = lock(&self.peers);
        if !matches!(peers.get(&key), Some(PeerSlot::Up(c)) if c.close_reason().is_none()) {
            peers.insert(key, PeerSlot::Up(conn.clone()));
        }
        Ok(conn)
    }
}

fn send_datagram(conn: Connection, payload: Bytes, delay: Duration, copies: u32) {
    let send = move || {
        for _ in 0..copies {
            if let Err(e) = conn.send_datagram(payload.clone()) {
                tracing::debug!("datagram to {}: {e}", conn.remote_address());
            }
        }
    };
    if delay.is_zero() {
        send();
    } else {
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            send();
        });
    }
}
