//! The submitter's record of its clients' sequences: runs whose bound outputs (a language
//! model's `present` caches) stay on the nodes that make them and come back as the next
//! step's inputs there (docs/CLUSTER.md, "Sequences"). Pure bookkeeping, decided under the
//! submitter's lock; the participants keep the values (kept.rs).
//!
//! The first step of a sequence carries every input, the initial bound values among them,
//! as any run does. Each later step leaves the bound inputs out: a node that reads one and
//! keeps it takes it from what it keeps, and a value kept on another node than the one that
//! reads it (the prompt's plan and the single tokens' placed a layer differently) is fetched
//! from its keeper and sent on with the step's start. A step that fails ends its sequence:
//! what the nodes kept may be half updated, and only the client can start it again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use vkml_protocol::dist::submitter::RunId;

use super::participant::Step;
use crate::ops::ValueType;
use crate::tensor::{DType, Tensor};

/// Per graph output of a deployment: the node that makes it and its type.
pub type Producers = Vec<(Option<String>, Option<ValueType>)>;

struct Seq {
    model: u64,
    /// (graph output, graph input) per binding.
    pairs: Vec<(usize, usize)>,
    /// Per bound input: the node that keeps its value, and the value's type. Empty before
    /// the first step has run.
    held: BTreeMap<usize, (String, ValueType)>,
    /// The step running now.
    running: Option<RunId>,
    used: Instant,
}

/// What a step's start on one node needs beyond the core's inputs.
pub struct StartPlan {
    pub step: Step,
    /// Values kept on other nodes that this node reads: (keeper, graph inputs).
    pub fetch: BTreeMap<String, Vec<usize>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StepError {
    #[error("sequence {0:016x} belongs to another model")]
    OtherModel(u64),
    #[error("sequence {0:016x} was begun with other bindings")]
    OtherBindings(u64),
    #[error("sequence {0:016x} is running a step already: a sequence takes one step at a time")]
    Busy(u64),
    #[error(
        "sequence {0:016x} has no values on the nodes (it is new, ended, or was idle too \
         long): its first step gives every bound input, and '{1}' is missing; begin it again"
    )]
    MissingInitial(u64, String),
    #[error("'{0}' is bound: after the first step its value stays on the nodes")]
    BoundGiven(String),
}

pub struct Sequences {
    seqs: BTreeMap<u64, Seq>,
    steps: BTreeMap<RunId, u64>,
    producers: BTreeMap<u64, Producers>,
    idle: Duration,
}

impl Sequences {
    pub fn new(idle: Duration) -> Sequences {
        Sequences {
            seqs: BTreeMap::new(),
            steps: BTreeMap::new(),
            producers: BTreeMap::new(),
            idle,
        }
    }

    /// A deployment was planned: where its outputs are made.
    pub fn planned(&mut self, load_id: u64, producers: Producers) {
        self.producers.insert(load_id, producers);
    }

    /// The run's inputs for a step of `seq` (the bound ones as empty placeholders after the
    /// first step: the core's runs take one value per input) and the outputs the nodes keep.
    /// `given` holds the inputs the client sent, by index; `names` every input's name.
    pub fn begin(
        &mut self,
        seq: u64,
        model: u64,
        pairs: &[(usize, usize)],
        mut given: BTreeMap<usize, Tensor>,
        names: &[String],
        now: Instant,
    ) -> Result<(Vec<Option<Tensor>>, BTreeSet<usize>), StepError> {
        let fresh = Seq {
            model,
            pairs: pairs.to_vec(),
            held: BTreeMap::new(),
            running: None,
            used: now,
        };
        let s = self.seqs.get(&seq).unwrap_or(&fresh);
        if s.model != model {
            return Err(StepError::OtherModel(seq));
        }
        if s.pairs != pairs {
            return Err(StepError::OtherBindings(seq));
        }
        if s.running.is_some() {
            return Err(StepError::Busy(seq));
        }
        let first = s.held.is_empty();
        let name = |i: usize| names.get(i).cloned().unwrap_or_else(|| i.to_string());
        for &(_, i) in pairs {
            match (first, given.contains_key(&i)) {
                (true, false) => return Err(StepError::MissingInitial(seq, name(i))),
                (false, true) => return Err(StepError::BoundGiven(name(i))),
                _ => {}
            }
        }
        let s = self.seqs.entry(seq).or_insert(fresh);
        s.used = now;
        let inputs = (0..names.len())
            .map(|i| match given.remove(&i) {
                Some(t) => Some(t),
                None if s.held.contains_key(&i) => Some(Tensor::zeros(DType::F32, vec![0])),
                None => None,
            })
            .collect();
        let kept = pairs.iter().map(|&(o, _)| o).collect();
        Ok((inputs, kept))
    }

    /// The core took the step as run `run`.
    pub fn started(&mut self, seq: u64, run: RunId) {
        if let Some(s) = self.seqs.get_mut(&seq) {
            s.running = Some(run);
            self.steps.insert(run, seq);
        }
    }

    /// A step the core refused before it began: a sequence without a step run is forgotten.
    pub fn refused(&mut self, seq: u64) {
        if self.seqs.get(&seq).is_some_and(|s| s.held.is_empty()) {
            self.seqs.remove(&seq);
        }
    }

    /// The types of a step's bound inputs, which its placeholders do not have (for the key
    /// of its plan).
    pub fn bound_types(&self, run: RunId) -> Vec<(usize, ValueType)> {
        let Some(s) = self.steps.get(&run).and_then(|q| self.seqs.get(q)) else {
            return Vec::new();
        };
        s.held.iter().map(|(&i, (_, t))| (i, t.clone())).collect()
    }

    /// The bindings of a step's sequence (none for a run that is not a step).
    pub fn bindings(&self, run: RunId) -> Vec<(usize, usize)> {
        self.steps
            .get(&run)
            .and_then(|q| self.seqs.get(q))
            .map_or_else(Vec::new, |s| s.pairs.clone())
    }

    /// What run `run`'s start on `node` of deployment `load_id` takes, keeps and fetches;
    /// the bound inputs among `inputs` (placeholders) are removed. None for a run that is
    /// not a step.
    pub fn start(
        &self,
        run: RunId,
        node: &str,
        load_id: u64,
        inputs: &mut Vec<(usize, Tensor)>,
    ) -> Option<StartPlan> {
        let &seq = self.steps.get(&run)?;
        let s = self.seqs.get(&seq)?;
        let mut step = Step {
            sequence: seq,
            ..Step::default()
        };
        let mut fetch: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        inputs.retain(|(i, _)| match s.held.get(i) {
            None => true,
            Some((keeper, _)) => {
                if keeper == node {
                    step.take.push(*i);
                } else {
                    fetch.entry(keeper.clone()).or_default().push(*i);
                }
                false
            }
        });
        let made = self.producers.get(&load_id);
        for &(o, i) in &s.pairs {
            let on = made.and_then(|m| m.get(o)).and_then(|(n, _)| n.as_deref());
            if on == Some(node) {
                step.keep.push((o, i));
            }
        }
        Some(StartPlan { step, fetch })
    }

    /// Run `run` ended; for a step, its sequence learns where its values are now (ran on
    /// deployment `load_id`) or, when it failed, ends. Returns the nodes to tell that a
    /// sequence ended, with its number.
    pub fn finished(&mut self, run: RunId, ran_on: Option<u64>) -> Option<(u64, Vec<String>)> {
        let seq = self.steps.remove(&run)?;
        let s = self.seqs.get_mut(&seq)?;
        s.running = None;
        let made = ran_on.and_then(|l| self.producers.get(&l));
        if let Some(made) = made {
            let mut held = BTreeMap::new();
            for &(o, i) in &s.pairs {
                match made.get(o) {
                    Some((Some(node), Some(ty))) => {
                        held.insert(i, (node.clone(), ty.clone()));
                    }
                    _ => break,
                }
            }
            if held.len() == s.pairs.len() {
                s.held = held;
                return None;
            }
        }
        let mut nodes: BTreeSet<String> = s.held.values().map(|(n, _)| n.clone()).collect();
        if let Some(m) = ran_on.and_then(|l| self.producers.get(&l)) {
            nodes.extend(m.iter().filter_map(|(n, _)| n.clone()));
        }
        self.seqs.remove(&seq);
        Some((seq, nodes.into_iter().collect()))
    }

    /// Ends a sequence: the nodes that keep its values, to be told.
    pub fn end(&mut self, seq: u64) -> Option<Vec<String>> {
        let s = self.seqs.remove(&seq)?;
        let nodes: BTreeSet<String> = s.held.into_values().map(|(n, _)| n).collect();
        Some(nodes.into_iter().collect())
    }

    /// Forgets the sequences idle for longer than `idle` (their nodes free them on their own
    /// clock) and the producers of deployments no sequence can still be on.
    pub fn sweep(&mut self, now: Instant) {
        let idle = self.idle;
        self.seqs
            .retain(|_, s| s.running.is_some() || now.saturating_duration_since(s.used) < idle);
    }

    /// Forgets the producers of a deployment that is gone.
    pub fn unloaded(&mut self, load_id: u64) {
        self.producers.remove(&load_id);
    }

    /// Sequences known here.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.seqs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f32) -> Tensor {
        Tensor::from_vec(vec![2], vec![x, x])
    }

    fn names() -> Vec<String> {
        ["ids", "past"].iter().map(|s| s.to_string()).collect()
    }

    fn producers(node: &str) -> Producers {
        let ty = ValueType::new(DType::F32, vec![2]);
        vec![
            (Some("n3".into()), Some(ValueType::new(DType::F32, vec![1]))),
            (Some(node.into()), Some(ty)),
        ]
    }

    /// Output 0 is the logits (made on n3), output 1 the present (kept where made), bound to
    /// input 1.
    #[test]
    fn values_stay_where_made_and_move_only_when_the_plan_moves_them() {
        let mut q = Sequences::new(Duration::from_secs(60));
        let now = Instant::now();
        q.planned(10, producers("n2"));
        q.planned(11, producers("n1"));
        let pairs = [(1, 1)];
        let given = BTreeMap::from([(0, f(1.0)), (1, f(0.0))]);
        let (inputs, kept) = q.begin(5, 7, &pairs, given, &names(), now).unwrap();
        assert!(inputs.iter().all(Option::is_some));
        assert_eq!(kept, BTreeSet::from([1]));
        q.started(5, RunId(1));
        assert_eq!(
            q.begin(5, 7, &pairs, BTreeMap::new(), &names(), now),
            Err(StepError::Busy(5))
        );
        // The first step sends the initial value; n2 keeps the present.
        let mut ins = vec![(1, f(0.0))];
        let p = q.start(RunId(1), "n2", 10, &mut ins).unwrap();
        assert_eq!(ins.len(), 1);
        assert!(p.step.take.is_empty() && p.fetch.is_empty());
        assert_eq!(p.step.keep, [(1, 1)]);
        assert_eq!(q.finished(RunId(1), Some(10)), None);

        // The next step leaves the bound input out; n2 takes it from what it keeps.
        let given = BTreeMap::from([(1, f(0.0))]);
        assert_eq!(
            q.begin(5, 7, &pairs, given, &names(), now).map(|_| ()),
            Err(StepError::BoundGiven("past".into()))
        );
        let given = BTreeMap::from([(0, f(2.0))]);
        let (inputs, _) = q.begin(5, 7, &pairs, given, &names(), now).unwrap();
        assert_eq!(inputs[1].as_ref().unwrap().numel(), 0);
        q.started(5, RunId(2));
        assert_eq!(q.bound_types(RunId(2)).len(), 1);
        let mut ins = vec![(1, f(0.0))];
        let p = q.start(RunId(2), "n2", 10, &mut ins).unwrap();
        assert!(ins.is_empty());
        assert_eq!(p.step.take, [1]);
        assert_eq!(q.finished(RunId(2), Some(10)), None);

        // A plan that reads it on n1 fetches it from n2, and n1 keeps the new one.
        q.begin(5, 7, &pairs, BTreeMap::from([(0, f(3.0))]), &names(), now)
            .unwrap();
        q.started(5, RunId(3));
        let mut ins = vec![(1, f(0.0))];
        let p = q.start(RunId(3), "n1", 11, &mut ins).unwrap();
        assert!(ins.is_empty() && p.step.take.is_empty());
        assert_eq!(p.fetch, BTreeMap::from([("n2".to_string(), vec![1])]));
        assert_eq!(p.step.keep, [(1, 1)]);
        // A failed step ends the sequence: its keepers are told.
        let (seq, nodes) = q.finished(RunId(3), None).unwrap();
        assert_eq!((seq, nodes), (5, vec!["n2".to_string()]));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn the_first_step_needs_every_initial_value_and_runs_not_steps_are_left_alone() {
        let mut q = Sequences::new(Duration::from_secs(60));
        let now = Instant::now();
        let given = BTreeMap::from([(0, f(1.0))]);
        assert_eq!(
            q.begin(5, 7, &[(1, 1)], given, &names(), now).map(|_| ()),
            Err(StepError::MissingInitial(5, "past".into()))
        );
        assert_eq!(q.len(), 0);
        let mut ins = vec![(1, f(0.0))];
        assert!(q.start(RunId(9), "n1", 10, &mut ins).is_none());
        assert_eq!(q.finished(RunId(9), Some(10)), None);
        q.begin(
            6,
            7,
            &[(1, 1)],
            BTreeMap::from([(0, f(1.0)), (1, f(0.0))]),
            &names(),
            now,
        )
        .unwrap();
        q.sweep(now + Duration::from_secs(61));
        assert_eq!(q.len(), 0);
    }
}
