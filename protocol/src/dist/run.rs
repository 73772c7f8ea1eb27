//! One run a client asked the submitter for, over at most two attempts: the first on the
//! model's deployment for its inputs, and after a node fails, one more on a fresh deployment
//! made without that node.
//!
//! An attempt sends each node of the plan the graph inputs it reads, fills the outputs known
//! without running, and completes when every other output has arrived (by index; a second
//! copy of one is ignored). Its failure is attributed from the report's own words: a node
//! that could not be reached (`unreachable`) may be left out of a retry, a node that lost its
//! part (`model_lost`: it restarted) means "load it again", and a node whose own work failed
//! is a plain failure, which is final. The report names the culprit whoever sends it: a
//! participant's report may reach the submitter through another participant.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::pb;

use super::deployment::{DeploymentPlan, FixedOutput};
use super::{died, returned};

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A node died or could not be reached: the run may be retried without it.
    Node {
        node: String,
        reason: String,
    },
    /// A node of the plan no longer holds its part (it restarted, or renewed after being
    /// declared dead): load the model again, with it.
    Lost {
        node: String,
        reason: String,
    },
    Other(String),
}

impl Failure {
    /// A `RunFailed` from `from` (the culprit itself, or a peer passing its report on), as
    /// the submitter reads it.
    pub fn attribute(from: &str, r: &pb::RunFailed) -> Failure {
        let culprit = if r.culprit.is_empty() {
            from
        } else {
            &r.culprit
        };
        if r.model_lost {
            Failure::Lost {
                node: culprit.to_string(),
                reason: "it restarted and lost the model".into(),
            }
        } else if r.unreachable {
            Failure::Node {
                node: culprit.to_string(),
                reason: r.reason.clone(),
            }
        } else {
            Failure::Other(format!("on node {culprit}: {}", r.reason))
        }
    }

    /// The node that is not told to abort: the one that failed (it may be unreachable).
    pub fn culprit(&self) -> Option<&str> {
        match self {
            Failure::Node { node, .. } => Some(node),
            Failure::Lost { .. } | Failure::Other(_) => None,
        }
    }

    /// The reason the other nodes are given.
    pub fn why(&self) -> String {
        match self {
            Failure::Node { node, reason } => format!("node {node}: {reason}"),
            Failure::Lost { node, reason } => format!("node {node}: {reason}"),
            Failure::Other(r) => r.clone(),
        }
    }
}

/// Why a run (or a submission's load) failed. The texts are those of the node's `DistError`
/// variants of the same names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("node {node} failed: {reason}")]
    NodeFailed { node: String, reason: String },
    #[error("the run failed {0}")]
    RunFailed(String),
    #[error("placement: {0}")]
    Placement(String),
    /// Planning failed otherwise (the driver's error, as text).
    #[error("{0}")]
    Plan(String),
    #[error("no model with id {0:016x} is loaded on this node (unloaded, or the node restarted)")]
    NoModel(u64),
}

/// The driver's answer when it could not plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The plan does not fit the nodes it may use.
    Placement(String),
    /// The plan depends on input values the key did not include: the runs waiting for it
    /// resolve their key again.
    NeedsValues,
    Other(String),
}

impl From<PlanError> for RunError {
    fn from(e: PlanError) -> RunError {
        match e {
            PlanError::Placement(s) => RunError::Placement(s),
            PlanError::NeedsValues => RunError::Plan("the plan depends on input values".into()),
            PlanError::Other(s) => RunError::Plan(s),
        }
    }
}

/// A run's outputs, and how they were made.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput<V> {
    pub outputs: Vec<V>,
    /// The run was retried on a new plan after a node failed (`RunResult::retried`).
    pub retried: bool,
    /// The deployment that made them.
    pub load_id: u64,
}

pub(super) struct Attempt<V> {
    pub load_id: u64,
    pub run_id: u64,
    pub nodes: BTreeSet<String>,
    /// The life of each node when the plan was made.
    pub lives: BTreeMap<String, u64>,
    outputs: Vec<Option<V>>,
    missing: usize,
    pub deadline: Option<Instant>,
}

impl<V> Attempt<V> {
    /// Whether output `index` is still awaited.
    pub fn missing(&self, index: usize) -> bool {
        matches!(self.outputs.get(index), Some(None))
    }

    /// Whether a verdict that life `generation` of `node` is down concerns this attempt.
    pub fn ended_by_death(&self, node: &str, generation: u64) -> bool {
        self.nodes.contains(node) && died(life(&self.lives, node), generation)
    }

    /// Whether life `generation` of `node` coming up means its part of this attempt is gone.
    pub fn ended_by_return(&self, node: &str, generation: u64) -> bool {
        self.nodes.contains(node) && returned(life(&self.lives, node), generation)
    }
}

fn life(lives: &BTreeMap<String, u64>, node: &str) -> u64 {
    lives.get(node).copied().unwrap_or(0)
}

/// How an attempt began.
pub(super) enum Begun<V> {
    /// Every output was known without running: nothing is sent.
    Complete(Vec<V>),
    /// Per node of the plan (name order), the graph inputs it reads.
    Started(Vec<(String, Vec<(usize, V)>)>),
    /// The plan refers to an input or output the run does not have.
    Invalid(String),
}

/// What follows an attempt's failure.
pub(super) enum Next {
    Retry,
    Done(RunError),
}

/// The submitter's work after a failed attempt, decided here.
pub(super) struct Verdict {
    pub load_id: u64,
    /// Every node of the plan but the culprit is told to give the run up.
    pub aborts: Vec<(String, pb::RunFailed)>,
    /// Left out of the model's plans until it comes back.
    pub avoid: Option<String>,
    /// The plan is forgotten and unloaded from all its nodes, saying why.
    pub retire: Option<String>,
    pub next: Next,
}

pub(super) struct Run<V> {
    pub model: u64,
    pub inputs: Vec<V>,
    /// Outputs that do not come back (a sequence's bound ones, kept where they are made):
    /// the run is complete without them.
    pub kept: BTreeSet<usize>,
    /// Whether a failed attempt may be retried on a new plan: not for a step of a sequence,
    /// whose state the failure may have left half updated.
    pub retry: bool,
    /// The first attempt's failure (node, reason), once it was retried.
    retried: Option<(String, String)>,
    pub attempt: Option<Attempt<V>>,
}

impl<V: Clone> Run<V> {
    pub fn new(model: u64, inputs: Vec<V>) -> Run<V> {
        Run {
            model,
            inputs,
            kept: BTreeSet::new(),
            retry: true,
            retried: None,
            attempt: None,
        }
    }

    pub fn retried(&self) -> bool {
        self.retried.is_some()
    }

    /// Starts an attempt on a live deployment.
    pub fn begin(
        &mut self,
        plan: &DeploymentPlan<V>,
        run_id: u64,
        deadline: Option<Instant>,
    ) -> Begun<V> {
        let mut outputs: Vec<Option<V>> = vec![None; plan.n_outputs];
        for (i, src) in &plan.fixed_outputs {
            let v = match src {
                FixedOutput::Const(v) => v.clone(),
                FixedOutput::Input(j) => match self.inputs.get(*j) {
                    Some(v) => v.clone(),
                    None => return Begun::Invalid(format!("output {i} is input {j}, not given")),
                },
            };
            match outputs.get_mut(*i) {
                Some(slot) => *slot = Some(v),
                None => return Begun::Invalid(format!("no output {i}")),
            }
        }
        let missing = outputs
            .iter()
            .enumerate()
            .filter(|(i, o)| o.is_none() && !self.kept.contains(i))
            .count();
        if missing == 0 && self.kept.is_empty() {
            return Begun::Complete(outputs.into_iter().flatten().collect());
        }
        if missing == 0 {
            return Begun::Invalid(
                "every output the run computes is kept: none would come back".into(),
            );
        }
        let mut starts = Vec::with_capacity(plan.nodes.len());
        for node in &plan.nodes {
            let mut ins = Vec::new();
            for &i in plan.needs.get(node).map(Vec::as_slice).unwrap_or_default() {
                match self.inputs.get(i) {
                    Some(v) => ins.push((i, v.clone())),
                    None => {
                        return Begun::Invalid(format!("node {node} reads input {i}, not given"));
                    }
                }
            }
            starts.push((node.clone(), ins));
        }
        self.attempt = Some(Attempt {
            load_id: plan.load_id,
            run_id,
            nodes: plan.nodes.clone(),
            lives: plan.lives.clone(),
            outputs,
            missing,
            deadline,
        });
        Begun::Started(starts)
    }

    /// Output `index` arrived; all of them when it was the last missing.
    pub fn output(&mut self, index: usize, v: V) -> Option<Vec<V>> {
        let a = self.attempt.as_mut()?;
        match a.outputs.get_mut(index) {
            Some(slot @ None) => *slot = Some(v),
            _ => return None,
        }
        a.missing -= 1;
        if a.missing > 0 {
            return None;
        }
        let a = self.attempt.take().expect("present");
        // Kept outputs have no value here: the others come back in output order.
        Some(a.outputs.into_iter().flatten().collect())
    }

    /// The attempt in flight failed: what the submitter must do.
    pub fn fail(&mut self, f: Failure) -> Option<Verdict> {
        let a = self.attempt.take()?;
        let why = f.why();
        let aborts = a
            .nodes
            .iter()
            .filter(|n| Some(n.as_str()) != f.culprit())
            .map(|n| {
                let m = pb::RunFailed {
                    model_id: a.load_id,
                    run_id: a.run_id,
                    reason: why.clone(),
                    culprit: String::new(),
                    model_lost: false,
                    unreachable: false,
                };
                (n.clone(), m)
            })
            .collect();
        let (avoid, retire, next) = match f {
            Failure::Node { node, reason } => {
                // Unloaded from the culprit too: it may only have been unreachable for a
                // while. (A node seen dead had its plans retired by the verdict already.)
                let retire = format!("node {node} failed: {reason}");
                let next = match &self.retried {
                    _ if !self.retry => Next::Done(RunError::NodeFailed {
                        node: node.clone(),
                        reason: reason.clone(),
                    }),
                    Some((first, first_reason)) => Next::Done(RunError::NodeFailed {
                        node: node.clone(),
                        reason: format!(
                            "{reason} (on the retry, after {first} failed: {first_reason})"
                        ),
                    }),
                    None => {
                        self.retried = Some((node.clone(), reason));
                        Next::Retry
                    }
                };
                (Some(node), Some(retire), next)
            }
            Failure::Lost { node, reason } => {
                let retire = format!("node {node} lost its part");
                let next = match &self.retried {
                    _ if !self.retry => Next::Done(RunError::NodeFailed {
                        node: node.clone(),
                        reason: reason.clone(),
                    }),
                    Some((first, first_reason)) => Next::Done(RunError::NodeFailed {
                        node,
                        reason: format!(
                            "{reason}, on the retry after {first} failed: {first_reason}"
                        ),
                    }),
                    None => {
                        self.retried = Some((node, reason));
                        Next::Retry
                    }
                };
                (None, Some(retire), next)
            }
            Failure::Other(reason) => (None, None, Next::Done(RunError::RunFailed(reason))),
        };
        Some(Verdict {
            load_id: a.load_id,
            aborts,
            avoid,
            retire,
            next,
        })
    }

    /// No deployment could be had for the run (planning or loading failed): the error the
    /// client sees. After a retry it names the node that made the retry necessary; a plan
    /// that no longer fits because nodes were lost says which.
    pub fn unavailable(&self, e: RunError, avoid: &BTreeSet<String>) -> RunError {
        match (&self.retried, e) {
            (Some((node, reason)), e) => RunError::NodeFailed {
                node: node.clone(),
                reason: format!("{reason}; the run cannot be retried without it: {e}"),
            },
            (None, RunError::Placement(why)) if !avoid.is_empty() => RunError::NodeFailed {
                node: avoid.iter().cloned().collect::<Vec<_>>().join(", "),
                reason: format!(
                    "it is gone and the remaining nodes have no room for the model: {why}"
                ),
            },
            (None, e) => e,
        }
    }
}
