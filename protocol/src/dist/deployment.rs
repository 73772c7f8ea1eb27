//! One plan of a model, loaded on its nodes under a load id: fragments out, acknowledgements
//! in, then live until retired.
//!
//! Loading settles when every node has answered: live when all loaded, failed otherwise, and
//! then the nodes that did load are told to unload (a half-loaded plan must not keep their
//! memory). The failure names the first failed node in name order, as the node's submitter
//! did when it awaited its load tasks in that order.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::{died, returned};

/// A plan as the driver made it (planning needs the graph and the planner, outside this
/// crate), reduced to what the machines decide with.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentPlan<V> {
    /// Unique in the cluster (the node draws it at random).
    pub load_id: u64,
    pub nodes: BTreeSet<String>,
    /// Graph inputs (indices) each node reads; a node that reads none may be absent.
    pub needs: BTreeMap<String, Vec<usize>>,
    /// Outputs known without running (constants, inputs passed through).
    pub fixed_outputs: Vec<(usize, FixedOutput<V>)>,
    pub n_outputs: usize,
    /// The life (membership generation) of each node when the plan was made; absent or 0:
    /// unknown, which any verdict on that node matches.
    pub lives: BTreeMap<String, u64>,
    /// Bytes the plan reserves on each node (for `status`).
    pub reserves: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FixedOutput<V> {
    Const(V),
    /// Graph input `i`, as given to the run.
    Input(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadState {
    Loading,
    Live,
    Failed,
    Retired,
}

/// How a load settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Live,
    Failed { node: String, reason: String },
}

/// What the deployment asks of the driver (the submitter turns these into its actions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeployOut {
    SendFragment { node: String },
    Unload { node: String, reason: String },
}

pub struct Deployment<V> {
    plan: DeploymentPlan<V>,
    state: LoadState,
    /// When loading began.
    since: Instant,
    /// Per node: None while its load is in flight.
    acks: BTreeMap<String, Option<Result<(), String>>>,
    /// Retired while loading: (the dead node, why), applied when the load settles, since an
    /// unload that overtook its fragment would be ignored and the fragment would stay.
    retire_pending: Option<(Option<String>, String)>,
}

impl<V> Deployment<V> {
    /// A deployment about to load: `SendFragment` for each node, in name order.
    pub fn start(plan: DeploymentPlan<V>, now: Instant, out: &mut Vec<DeployOut>) -> Deployment<V> {
        let acks = plan.nodes.iter().map(|n| (n.clone(), None)).collect();
        out.extend(
            plan.nodes
                .iter()
                .map(|n| DeployOut::SendFragment { node: n.clone() }),
        );
        Deployment {
            plan,
            state: LoadState::Loading,
            since: now,
            acks,
            retire_pending: None,
        }
    }

    pub fn plan(&self) -> &DeploymentPlan<V> {
        &self.plan
    }

    pub fn state(&self) -> LoadState {
        self.state
    }

    /// Whether a verdict that life `generation` of `node` is down (0: any life) concerns
    /// this deployment.
    pub fn uses(&self, node: &str, generation: u64) -> bool {
        self.plan.nodes.contains(node) && died(self.life(node), generation)
    }

    /// Whether life `generation` of `node` coming up makes this deployment stale: it was
    /// made with an older life, whose part is gone.
    pub fn stale(&self, node: &str, generation: u64) -> bool {
        self.plan.nodes.contains(node) && returned(self.life(node), generation)
    }

    fn life(&self, node: &str) -> u64 {
        self.plan.lives.get(node).copied().unwrap_or(0)
    }

    /// When loading began.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// Loading took too long: the nodes that have not answered count as failed.
    pub fn load_timed_out(&mut self, why: &str, out: &mut Vec<DeployOut>) -> Option<Settled> {
        if self.state != LoadState::Loading {
            return None;
        }
        for slot in self.acks.values_mut().filter(|a| a.is_none()) {
            *slot = Some(Err(why.to_string()));
        }
        self.settle(out)
    }

    /// A node answered its load (`LoadAck`, or the driver's error for a stream that broke).
    /// Answers after the load settled, and second answers, change nothing.
    pub fn load_result(
        &mut self,
        node: &str,
        result: Result<(), String>,
        out: &mut Vec<DeployOut>,
    ) -> Option<Settled> {
        if self.state != LoadState::Loading {
            return None;
        }
        match self.acks.get_mut(node) {
            Some(slot @ None) => *slot = Some(result),
            _ => return None,
        }
        self.settle(out)
    }

    /// A member went down. While loading, its part counts as failed (its stream would break
    /// anyway, and a plan with a dead node must not go live even if that node had loaded).
    /// A live deployment is the submitter's to retire.
    pub fn member_down(
        &mut self,
        node: &str,
        state: &str,
        out: &mut Vec<DeployOut>,
    ) -> Option<Settled> {
        if self.state != LoadState::Loading {
            return None;
        }
        let slot = self.acks.get_mut(node)?;
        *slot = Some(Err(format!("node {node} is {state}")));
        self.settle(out)
    }

    /// Unloads the deployment from its nodes but `dead` (which cannot answer), saying why.
    /// Once only: a plan retired by a death and again by its failed run is unloaded once.
    pub fn retire(&mut self, dead: Option<&str>, why: &str, out: &mut Vec<DeployOut>) {
        match self.state {
            LoadState::Loading => {
                self.retire_pending = Some((dead.map(str::to_string), why.to_string()));
            }
            LoadState::Live => {
                for n in &self.plan.nodes {
                    if Some(n.as_str()) != dead {
                        out.push(DeployOut::Unload {
                            node: n.clone(),
                            reason: why.to_string(),
                        });
                    }
                }
                self.state = LoadState::Retired;
            }
            LoadState::Failed | LoadState::Retired => {}
        }
    }

    fn settle(&mut self, out: &mut Vec<DeployOut>) -> Option<Settled> {
        if self.acks.values().any(Option::is_none) {
            return None;
        }
        let failed = self.acks.iter().find_map(|(n, r)| match r {
            Some(Err(e)) => Some((n.clone(), e.clone())),
            _ => None,
        });
        if let Some((node, e)) = failed {
            self.state = LoadState::Failed;
            for (n, r) in &self.acks {
                if let Some(Ok(())) = r {
                    out.push(DeployOut::Unload {
                        node: n.clone(),
                        reason: "loading failed on another node".into(),
                    });
                }
            }
            return Some(Settled::Failed {
                node,
                reason: format!("could not load its part of the model: {e}"),
            });
        }
        self.state = LoadState::Live;
        if let Some((dead, why)) = self.retire_pending.take() {
            self.retire(dead.as_deref(), &why, out);
        }
        Some(Settled::Live)
    }
}
