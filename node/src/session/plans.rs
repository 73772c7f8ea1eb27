//! The session's plan cache: executables keyed on the input types and, for the graph inputs
//! whose values shape the plan (a Reshape's shape fed as an input), on those values too.

use bytes::Bytes;
use std::collections::VecDeque;

use crate::ops::ValueType;

/// Plans kept per session. Shapes and shape-input values seen in a serving loop are few;
/// the bound keeps a caller who feeds ever new shape values from growing memory without end.
pub(super) const MAX_PLANS: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PlanKey {
    pub types: Vec<ValueType>,
    /// (graph input index, its bytes) for each input the plan was specialized on.
    pub values: Vec<(usize, Bytes)>,
    /// (graph input, graph output) pairs that stay bound across runs (session/bound.rs).
    pub bound: Vec<(usize, usize)>,
}

/// Least recently used first out.
pub(super) struct PlanCache<T> {
    entries: VecDeque<(PlanKey, T)>,
    capacity: usize,
}

impl<T: Clone> PlanCache<T> {
    pub fn new(capacity: usize) -> PlanCache<T> {
        PlanCache {
            entries: VecDeque::new(),
            capacity,
        }
    }

    pub fn get(&mut self, key: &PlanKey) -> Option<T> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.entries.remove(i)?;
        let exe = entry.1.clone();
        self.entries.push_front(entry);
        Some(exe)
    }

    pub fn insert(&mut self, key: PlanKey, exe: T) {
        if let Some(i) = self.entries.iter().position(|(k, _)| *k == key) {
            self.entries.remove(i);
        }
        self.entries.push_front((key, exe));
        self.entries.truncate(self.capacity);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn key(n: usize, value: &'static [u8]) -> PlanKey {
        PlanKey {
            types: vec![ValueType::new(DType::F32, vec![n])],
            values: vec![(0, Bytes::from_static(value))],
            bound: Vec::new(),
        }
    }

    #[test]
    fn keys_differ_by_value_and_the_least_recent_goes_first() {
        let mut c = PlanCache::new(2);
        c.insert(key(1, b"a"), 1);
        c.insert(key(1, b"b"), 2);
        assert_eq!(c.get(&key(1, b"a")), Some(1));
        assert_eq!(c.get(&key(2, b"a")), None);
        // "b" is now the least recently used: a third plan pushes it out.
        c.insert(key(1, b"c"), 3);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&key(1, b"b")), None);
        assert_eq!(c.get(&key(1, b"a")), Some(1));
        assert_eq!(c.get(&key(1, b"c")), Some(3));
    }
}
