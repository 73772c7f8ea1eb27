//! SWIM membership: foca, a pure state machine, driven by one tokio task. Gossip travels as
//! QUIC datagrams on the node's endpoint; foca's timers become tokio sleeps that feed events
//! back into the same task, so foca is only ever touched from one place.
//!
//! Timings (loopback and LAN; the issue asks that a SIGKILLed node be seen dead within 3 s):
//! - probe every 300 ms, direct ack expected within 150 ms (a loopback round trip is tens of
//!   microseconds; 150 ms leaves room for a loaded 2-core CI machine), then 3 indirect probes;
//! - suspect -> dead after 1 s: long enough for a suspected node to refute (its next gossip
//!   carries a higher incarnation), short enough that detection is about
//!   one probe period + 1 s + dissemination (~0.2 s): about 1.7 s measured on loopback;
//! - gossip every 100 ms to 3 members, each update sent up to 8 times: a 5-node cluster learns
//!   a change in a few hundred milliseconds;
//! - announce to one member every 2 s and to dead members every 1 s: this is how two halves
//!   of a healed partition find each other again;
//! - dead members are remembered for 60 s (so that the announces above have somewhere to go).

use std::net::SocketAddr;
use std::num::{NonZeroU8, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use foca::{
    AccumulatingRuntime, BroadcastHandler, Config, Foca, Identity, Invalidates, OwnedNotification,
    PeriodicParams, PostcardCodec, State, Timer,
};
use prost::Message as _;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use vkml_protocol::pb;

use super::Inner;

/// A node as gossip knows it. `generation` tells a restarted node from its former self: a
/// new process takes the wall clock in milliseconds, a node told it was declared dead takes
/// the next number (foca's `renew`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct NodeId {
    pub name: String,
    pub addr: SocketAddr,
    pub generation: u64,
}

impl Identity for NodeId {
    /// Two identities at one address are one node in two lives: the younger wins.
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(NodeId {
            generation: self.generation + 1,
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

/// Largest gossip payload: under the 1200-byte minimum QUIC datagram room, so it fits before
/// MTU discovery has run.
pub const MAX_GOSSIP: usize = 1100;

pub fn config() -> Config {
    Config {
        probe_period: Duration::from_millis(300),
        probe_rtt: Duration::from_millis(150),
        num_indirect_probes: NonZeroUsize::new(3).expect("non-zero"),
        max_transmissions: NonZeroU8::new(8).expect("non-zero"),
        suspect_to_down_after: Duration::from_secs(1),
        remove_down_after: Some(Duration::from_secs(60)),
        max_packet_size: NonZeroUsize::new(MAX_GOSSIP).expect("non-zero"),
        notify_down_members: true,
        periodic_announce: Some(PeriodicParams {
            frequency: Duration::from_secs(2),
            num_members: NonZeroUsize::new(1).expect("non-zero"),
        }),
        periodic_announce_to_down_members: Some(PeriodicParams {
            frequency: Duration::from_secs(1),
            num_members: NonZeroUsize::new(2).expect("non-zero"),
        }),
        periodic_gossip: Some(PeriodicParams {
            frequency: Duration::from_millis(100),
            num_members: NonZeroUsize::new(3).expect("non-zero"),
        }),
    }
}

/// What the membership task reacts to.
pub enum Input {
    Data(Bytes),
    Timer(Timer<NodeId>),
    /// Join through these addresses, if we know no member yet.
    Announce(Vec<SocketAddr>),
    /// A new version of our own inventory, to gossip.
    Inventory(Vec<u8>),
    /// Leave the cluster, then answer.
    Leave(oneshot::Sender<()>),
}

/// Inventory records as foca custom broadcasts: the key is (node, generation, version), and a
/// record replaces any older one of the same node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryKey {
    node: String,
    rank: (u64, u64),
}

impl Invalidates for InventoryKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.node == other.node && self.rank >= other.rank
    }
}

#[derive(Debug, thiserror::Error)]
#[error("undecodable inventory broadcast: {0}")]
pub struct BroadcastError(String);

struct InventoryBroadcasts {
    seen: std::collections::HashMap<String, (u64, u64)>,
    /// Records newer than what we had, for the task to store after each foca call.
    fresh: Arc<Mutex<Vec<pb::Inventory>>>,
}

impl BroadcastHandler<NodeId> for InventoryBroadcasts {
    type Key = InventoryKey;
    type Error = BroadcastError;

    fn receive_item(
        &mut self,
        data: &[u8],
        sender: Option<&NodeId>,
    ) -> Result<Option<InventoryKey>, BroadcastError> {
        let inv = pb::Inventory::decode(data).map_err(|e| BroadcastError(e.to_string()))?;
        let key = InventoryKey {
            node: inv.node.clone(),
            rank: (inv.generation, inv.version),
        };
        // Our own record (no sender) is always disseminated.
        let newer = self.seen.get(&inv.node).is_none_or(|r| key.rank > *r);
        if sender.is_some() && !newer {
            return Ok(None);
        }
        self.seen.insert(inv.node.clone(), key.rank);
        if sender.is_some() {
            self.fresh
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(inv);
        }
        Ok(Some(key))
    }
}

/// The membership task: runs until the node leaves.
pub(crate) async fn run(
    inner: Arc<Inner>,
    me: NodeId,
    own_inventory: Vec<u8>,
    mut rx: mpsc::UnboundedReceiver<Input>,
) {
    let fresh = Arc::new(Mutex::new(Vec::new()));
    let handler = InventoryBroadcasts {
        seen: Default::default(),
        fresh: fresh.clone(),
    };
    let rng: rand::rngs::StdRng = rand::make_rng();
    let mut foca = Foca::with_custom_broadcast(me, config(), rng, PostcardCodec, handler);
    let mut rt = AccumulatingRuntime::new();
    if let Err(e) = foca.add_broadcast(&own_inventory) {
        tracing::warn!("cannot gossip our inventory ({e}); peers get it directly");
    }
    while let Some(input) = rx.recv().await {
        let mut leaving = None;
        let r = match input {
            Input::Data(d) => foca.handle_data(&d, &mut rt),
            Input::Timer(t) => foca.handle_timer(t, &mut rt),
            Input::Announce(seeds) => {
                let mut r = Ok(());
                if foca.num_members() == 0 {
                    for addr in seeds {
                        let seed = NodeId {
                            name: String::new(),
                            addr,
                            generation: 0,
                        };
                        r = r.and(foca.announce(seed, &mut rt));
                    }
                }
                r
            }
            Input::Inventory(data) => foca.add_broadcast(&data).map(|_| ()),
            Input::Leave(done) => {
                leaving = Some(done);
                foca.leave_cluster(&mut rt)
            }
        };
        if let Err(e) = r {
            tracing::debug!("gossip: {e}");
        }
        drain(&inner, &mut rt, &foca, leaving.is_some());
        let records = std::mem::take(&mut *fresh.lock().unwrap_or_else(|p| p.into_inner()));
        for inv in records {
            inner.store_inventory(inv);
        }
        if let Some(done) = leaving {
            let _ = done.send(());
            return;
        }
    }
}

type Swim = Foca<NodeId, PostcardCodec, rand::rngs::StdRng, InventoryBroadcasts>;

fn drain(inner: &Arc<Inner>, rt: &mut AccumulatingRuntime<NodeId>, foca: &Swim, leaving: bool) {
    while let Some((to, data)) = rt.to_send() {
        inner.send_gossip(to, data);
    }
    while let Some((after, timer)) = rt.to_schedule() {
        let tx = inner.gossip_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(Input::Timer(timer));
        });
    }
    while let Some(n) = rt.to_notify() {
        match n {
            OwnedNotification::MemberUp(id) => inner.member_up(&id),
            OwnedNotification::Rename(old, new) => {
                // The new life first: the old one's end must not read as a death.
                inner.member_up(&new);
                inner.member_down(&old);
            }
            OwnedNotification::MemberDown(id) => inner.member_down(&id),
            OwnedNotification::Rejoin(id) => {
                tracing::info!(
                    "this node had been declared dead; rejoined as generation {}",
                    id.generation
                );
                inner.set_generation(id.generation);
            }
            OwnedNotification::Defunct if leaving => {}
            OwnedNotification::Defunct => {
                tracing::warn!("this node was declared dead and cannot rejoin")
            }
            OwnedNotification::Active => tracing::debug!("gossip: connected to the cluster"),
            OwnedNotification::Idle => tracing::debug!("gossip: no other member known"),
        }
    }
    inner.sync_suspicion(
        foca.iter_members()
            .map(|m| (m.id().clone(), m.state() == State::Suspect)),
    );
}
