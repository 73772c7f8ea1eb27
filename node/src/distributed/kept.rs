//! What a participant keeps for the sequences of its submitters: the bound outputs of one step
//! (a language model's `present` caches), held on the node that made them as the inputs of
//! the sequence's next step, so that they never cross the network between steps
//! (docs/CLUSTER.md, "Sequences").
//!
//! A sequence is its submitter's: two submitters may use the same number, so values are
//! keyed by both. What a sequence keeps goes when its submitter ends it, when a step of it
//! fails here (its values may be half updated), or after it has been idle for the node's
//! `sequence_idle` (a client that vanished without ending its sequences).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::lock;
use crate::tensor::Tensor;

/// A sequence: its submitter and its number there.
pub type SeqKey = (String, u64);

struct Held {
    /// By graph input index: the value the next step reads there.
    values: BTreeMap<usize, Tensor>,
    used: Instant,
}

pub struct Kept {
    idle: Duration,
    seqs: Mutex<BTreeMap<SeqKey, Held>>,
}

impl Kept {
    pub fn new(idle: Duration) -> Kept {
        Kept {
            idle,
            seqs: Mutex::new(BTreeMap::new()),
        }
    }

    /// Keeps `t` as input `input` of the sequence's next step.
    pub fn keep(&self, key: &SeqKey, input: usize, t: Tensor, now: Instant) {
        let mut seqs = lock(&self.seqs);
        let held = seqs.entry(key.clone()).or_insert_with(|| Held {
            values: BTreeMap::new(),
            used: now,
        });
        held.values.insert(input, t);
        held.used = now;
    }

    /// Takes the values of `inputs` out (a step reads them, or another node will): all of
    /// them, or an error naming the first one not here.
    pub fn take(
        &self,
        key: &SeqKey,
        inputs: &[usize],
        now: Instant,
    ) -> Result<Vec<(usize, Tensor)>, usize> {
        let mut seqs = lock(&self.seqs);
        let Some(held) = seqs.get_mut(key) else {
            return match inputs.first() {
                Some(&i) => Err(i),
                None => Ok(Vec::new()),
            };
        };
        if let Some(&i) = inputs.iter().find(|i| !held.values.contains_key(i)) {
            return Err(i);
        }
        held.used = now;
        Ok(inputs
            .iter()
            .map(|&i| (i, held.values.remove(&i).expect("checked above")))
            .collect())
    }

    /// Forgets the sequence.
    pub fn end(&self, key: &SeqKey) -> bool {
        lock(&self.seqs).remove(key).is_some()
    }

    /// Forgets the sequences idle for longer than the node's `sequence_idle`; returns how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut seqs = lock(&self.seqs);
        let before = seqs.len();
        seqs.retain(|_, h| now.saturating_duration_since(h.used) < self.idle);
        before - seqs.len()
    }

    /// When the next sequence becomes idle, if one is kept.
    pub fn next_expiry(&self) -> Option<Instant> {
        lock(&self.seqs).values().map(|h| h.used + self.idle).min()
    }

    /// Sequences kept here and their bytes, for `status`.
    pub fn usage(&self) -> (usize, u64) {
        let seqs = lock(&self.seqs);
        let bytes = seqs
            .values()
            .flat_map(|h| h.values.values())
            .map(|t| t.bytes().len() as u64)
            .sum();
        (seqs.len(), bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(x: f32) -> Tensor {
        Tensor::from_vec(vec![1], vec![x])
    }

    #[test]
    fn values_are_taken_once_and_a_missing_one_is_named() {
        let k = Kept::new(Duration::from_secs(10));
        let now = Instant::now();
        let key = ("n1".to_string(), 7);
        k.keep(&key, 3, t(1.0), now);
        k.keep(&key, 5, t(2.0), now);
        assert_eq!(k.take(&key, &[3, 9], now).unwrap_err(), 9);
        let got = k.take(&key, &[5, 3], now).unwrap();
        assert_eq!(got.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [5, 3]);
        assert_eq!(got[0].1.to_f64_vec().unwrap(), [2.0]);
        assert_eq!(k.take(&key, &[3], now).unwrap_err(), 3);
        // Another submitter's sequence of the same number is another sequence.
        assert_eq!(k.take(&("n2".to_string(), 7), &[3], now).unwrap_err(), 3);
    }

    #[test]
    fn idle_sequences_are_swept_and_ended_ones_are_gone() {
        let k = Kept::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let (a, b) = (("n1".to_string(), 1), ("n1".to_string(), 2));
        k.keep(&a, 0, t(1.0), t0);
        k.keep(&b, 0, t(1.0), t0 + Duration::from_secs(5));
        assert_eq!(k.next_expiry(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(k.sweep(t0 + Duration::from_secs(11)), 1);
        assert_eq!(k.usage(), (1, 4));
        assert!(k.end(&b));
        assert!(!k.end(&b));
        assert_eq!(k.usage(), (0, 0));
    }
}
