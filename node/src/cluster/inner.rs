//! The node's shared cluster state at work: the membership view read and published, members
//! coming up and going down, gossip sent over datagrams, and connections to peers dialled
//! and kept.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::{Connection, Endpoint, VarInt};
use vkml_protocol::{Message, datagram, error_code, pb};

use super::faults::Verdict;
use super::membership::NodeId;
use super::view::{MemberEvent, View};
use super::{
    ClusterError, ExecStatus, Inner, NAME_PROBE, PeerSlot, lock, names, service, transport,
};

impl Inner {
    pub(super) fn read_view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn write_view(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn publish(&self, events: Vec<MemberEvent>) {
        for e in events {
            tracing::info!("{e}");
            let _ = self.events.send(e);
        }
    }

    pub(super) fn set_generation(&self, generation: u64) {
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

    pub(super) fn member_up(self: &Arc<Self>, id: &NodeId) {
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

    pub(super) fn member_down(&self, id: &NodeId) {
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

    pub(super) fn sync_suspicion(&self, members: impl Iterator<Item = (NodeId, bool)>) {
        let events = self.write_view().suspicion(members);
        self.publish(events);
    }

    pub(super) fn store_inventory(&self, inv: pb::Inventory) {
        self.write_view().inventory(inv);
    }

    pub(super) fn mark_left(&self, node: &str, generation: u64) {
        let events = self.write_view().left(node, generation);
        self.publish(events);
    }

    /// Gossip to one member: through the cached connection, or queued while one is made.
    pub(super) fn send_gossip(self: &Arc<Self>, to: NodeId, data: Bytes) {
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
    pub(super) async fn dial(
        self: &Arc<Self>,
        addr: SocketAddr,
    ) -> Result<Connection, ClusterError> {
        self.dial_from(&self.endpoint, addr).await
    }

    /// A new data connection to `addr` (from the data endpoint).
    pub(super) async fn dial_data(
        self: &Arc<Self>,
        addr: SocketAddr,
    ) -> Result<Connection, ClusterError> {
        self.dial_from(&self.data, addr).await
    }

    pub(super) async fn dial_from(
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
    pub(super) fn data_addr_of(&self, member: &str, gossip: SocketAddr) -> SocketAddr {
        self.read_view().data_addr(member).unwrap_or(gossip)
    }

    /// The connection to a live member by name (cached; made when missing).
    pub(super) async fn connection_to(
        self: &Arc<Self>,
        member: &str,
    ) -> Result<Connection, ClusterError> {
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
