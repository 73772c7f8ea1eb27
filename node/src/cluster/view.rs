//! The membership table: one entry per node name, the latest life (generation) of that name
//! wins. Gossip notifications, suspicion sweeps, leave messages and inventory records update
//! it; every public query reads it. Each update returns the events it caused (for logs and
//! subscribers), so "one line per membership change" is true by construction.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;

use vkml_planner::Snapshot;
use vkml_protocol::pb;

use super::membership::NodeId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberState {
    Alive,
    /// Missed its probes; declared dead unless it answers soon.
    Suspect,
    Dead,
    /// Left on purpose.
    Left,
}

impl MemberState {
    pub fn is_live(self) -> bool {
        matches!(self, MemberState::Alive | MemberState::Suspect)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Alive => "alive",
            MemberState::Suspect => "suspect",
            MemberState::Dead => "dead",
            MemberState::Left => "left",
        }
    }

    pub fn to_wire(self) -> pb::MemberState {
        match self {
            MemberState::Alive => pb::MemberState::Alive,
            MemberState::Suspect => pb::MemberState::Suspect,
            MemberState::Dead => pb::MemberState::Dead,
            MemberState::Left => pb::MemberState::Left,
        }
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemberInfo {
    pub name: String,
    pub state: MemberState,
    pub addr: SocketAddr,
    pub generation: u64,
    pub devices: Vec<pb::Device>,
}

/// One change of one member's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberEvent {
    pub name: String,
    pub state: MemberState,
    pub addr: SocketAddr,
    pub generation: u64,
}

impl fmt::Display for MemberEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "member {} at {} (generation {}) is {}",
            self.name, self.addr, self.generation, self.state
        )
    }
}

#[derive(Debug, Clone)]
struct Entry {
    addr: SocketAddr,
    generation: u64,
    state: MemberState,
}

pub struct View {
    me: String,
    members: BTreeMap<String, Entry>,
    inventories: HashMap<String, pb::Inventory>,
    left: HashSet<(String, u64)>,
    /// Grows with every change: the version of snapshots taken from this view.
    version: u64,
}

impl View {
    pub fn new(me: &NodeId) -> View {
        View {
            me: me.name.clone(),
            members: BTreeMap::from([(
                me.name.clone(),
                Entry {
                    addr: me.addr,
                    generation: me.generation,
                    state: MemberState::Alive,
                },
            )]),
            inventories: HashMap::new(),
            left: HashSet::new(),
            version: 0,
        }
    }

    fn set(&mut self, name: &str, e: Entry) -> Vec<MemberEvent> {
        self.version += 1;
        let ev = MemberEvent {
            name: name.to_string(),
            state: e.state,
            addr: e.addr,
            generation: e.generation,
        };
        self.members.insert(name.to_string(), e);
        vec![ev]
    }

    pub fn up(&mut self, id: &NodeId) -> Vec<MemberEvent> {
        if id.name == self.me || id.name.is_empty() {
            return Vec::new();
        }
        if let Some(e) = self.members.get(&id.name) {
            // An older life of a restarted node, or no change at all.
            if e.generation > id.generation
                || (e.generation == id.generation && e.state == MemberState::Alive)
            {
                return Vec::new();
            }
        }
        self.left.remove(&(id.name.clone(), id.generation));
        self.set(
            &id.name,
            Entry {
                addr: id.addr,
                generation: id.generation,
                state: MemberState::Alive,
            },
        )
    }

    pub fn down(&mut self, id: &NodeId) -> Vec<MemberEvent> {
        match self.members.get(&id.name) {
            Some(e) if e.generation == id.generation && e.state.is_live() => {
                let state = if self.left.contains(&(id.name.clone(), id.generation)) {
                    MemberState::Left
                } else {
                    MemberState::Dead
                };
                let e = Entry { state, ..e.clone() };
                self.set(&id.name, e)
            }
            _ => Vec::new(),
        }
    }

    pub fn left(&mut self, name: &str, generation: u64) -> Vec<MemberEvent> {
        self.left.insert((name.to_string(), generation));
        match self.members.get(name) {
            Some(e) if e.generation <= generation && e.state.is_live() && name != self.me => {
                let e = Entry {
                    state: MemberState::Left,
                    ..e.clone()
                };
                self.set(name, e)
            }
            _ => Vec::new(),
        }
    }

    /// Foca's member list after a step: who is suspect, who no longer is.
    pub fn suspicion(&mut self, members: impl Iterator<Item = (NodeId, bool)>) -> Vec<MemberEvent> {
        let mut events = Vec::new();
        for (id, suspect) in members {
            let Some(e) = self.members.get(&id.name) else {
                continue;
            };
            if e.generation != id.generation {
                continue;
            }
            let next = match (e.state, suspect) {
                (MemberState::Alive, true) => MemberState::Suspect,
                (MemberState::Suspect, false) => MemberState::Alive,
                _ => continue,
            };
            let e = Entry {
                state: next,
                ..e.clone()
            };
            events.extend(self.set(&id.name, e));
        }
        events
    }

    /// Keeps the newest record per node.
    pub fn inventory(&mut self, inv: pb::Inventory) {
        let newer = self
            .inventories
            .get(&inv.node)
            .is_none_or(|old| (inv.generation, inv.version) > (old.generation, old.version));
        if newer {
            self.version += 1;
            self.inventories.insert(inv.node.clone(), inv);
        }
    }

    pub fn members(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .map(|(name, e)| MemberInfo {
                name: name.clone(),
                state: e.state,
                addr: e.addr,
                generation: e.generation,
                devices: self
                    .inventories
                    .get(name)
                    .map(|i| i.devices.clone())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Where a member serves data streams, as its inventory says (None before its inventory
    /// arrives, or for a node that serves everything on its gossip address).
    pub fn data_addr(&self, name: &str) -> Option<SocketAddr> {
        self.inventories.get(name)?.data_addr.parse().ok()
    }

    /// A live member other than us: its address and generation.
    pub fn live(&self, name: &str) -> Option<MemberInfo> {
        if name == self.me {
            return None;
        }
        self.members()
            .into_iter()
            .find(|m| m.name == name && m.state.is_live())
    }

    /// Live members whose inventory we have, as the planner takes them: each device's budget
    /// less what loaded models' parts reserve on it.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_of(true)
    }

    /// [`View::snapshot`], with whole budgets when `net` is false.
    pub fn snapshot_of(&self, net: bool) -> Snapshot {
        Snapshot {
            version: self.version,
            nodes: self
                .members
                .iter()
                .filter(|(_, e)| e.state.is_live())
                .filter_map(|(name, _)| {
                    let inv = self.inventories.get(name)?;
                    // What a new model can have: the budget less what loaded ones reserve.
                    let devs = inv
                        .devices
                        .iter()
                        .map(|d| {
                            let mut p = super::inventory::to_planner(d);
                            if net {
                                p.memory_budget = d.memory_budget.saturating_sub(d.reserved);
                            }
                            p
                        })
                        .collect();
                    Some((name.clone(), devs))
                })
                .collect(),
            resident: Default::default(),
            // The planning node sets it (distributed/deploy.rs): the view is everyone's.
            origin: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, port: u16, generation: u64) -> NodeId {
        NodeId {
            name: name.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            generation,
        }
    }

    #[test]
    fn restart_replaces_the_old_life_and_old_news_is_ignored() {
        let mut v = View::new(&id("a", 1, 1));
        assert_eq!(v.up(&id("b", 2, 10)).len(), 1);
        assert!(v.up(&id("b", 2, 10)).is_empty(), "no change, no event");
        // b restarts (generation 20) before its old life is declared dead.
        let ev = v.up(&id("b", 2, 20));
        assert_eq!(ev[0].generation, 20);
        // The old life's death must not kill the new one.
        assert!(v.down(&id("b", 2, 10)).is_empty());
        assert!(v.up(&id("b", 2, 10)).is_empty());
        assert_eq!(v.live("b").unwrap().generation, 20);
        let ev = v.down(&id("b", 2, 20));
        assert_eq!(ev[0].state, MemberState::Dead);
        assert!(v.live("b").is_none());
    }

    #[test]
    fn leave_then_down_reads_left_and_suspicion_comes_and_goes() {
        let mut v = View::new(&id("a", 1, 1));
        v.up(&id("b", 2, 5));
        v.up(&id("c", 3, 5));
        let ev = v.suspicion([(id("b", 2, 5), true), (id("c", 3, 5), false)].into_iter());
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].state, MemberState::Suspect);
        let ev = v.suspicion([(id("b", 2, 5), false)].into_iter());
        assert_eq!(ev[0].state, MemberState::Alive);
        let ev = v.left("c", 5);
        assert_eq!(ev[0].state, MemberState::Left);
        assert!(v.down(&id("c", 3, 5)).is_empty());
        let states: Vec<_> = v.members().iter().map(|m| m.state).collect();
        assert_eq!(
            states,
            vec![MemberState::Alive, MemberState::Alive, MemberState::Left]
        );
    }

    #[test]
    fn snapshot_holds_live_members_with_inventories_only() {
        let mut v = View::new(&id("a", 1, 1));
        v.up(&id("b", 2, 5));
        v.up(&id("c", 3, 5));
        let dev = |n: &str, budget: u64| pb::Device {
            name: n.into(),
            memory_budget: budget,
            ..Default::default()
        };
        for (node, budget) in [("a", 1), ("b", 2), ("c", 3)] {
            v.inventory(pb::Inventory {
                node: node.into(),
                generation: 5,
                version: 1,
                devices: vec![dev("cpu", budget)],
                ..Default::default()
            });
        }
        // An older version never replaces a newer one.
        v.inventory(pb::Inventory {
            node: "b".into(),
            generation: 5,
            version: 0,
            devices: vec![dev("cpu", 99)],
            ..Default::default()
        });
        v.down(&id("c", 3, 5));
        let s = v.snapshot();
        assert_eq!(s.nodes.keys().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(s.nodes["b"][0].memory_budget, 2);
    }
}
