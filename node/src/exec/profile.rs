//! Per-node times of the ops a node runs, for `vkml-node run --profile`: which op a model's
//! time goes to. Off unless asked for; when on, each CPU node is timed with two clock reads,
//! and a GPU chunk's command buffer is recorded with a timestamp after each dispatch (which
//! keeps dispatches that could overlap apart: the sum may exceed an unprofiled run); a chunk's
//! times are merged under one lock.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One node's times over the runs it was profiled in.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTime {
    pub node: String,
    pub op_type: String,
    /// Timed on a GPU (from its timestamps) rather than on the CPU.
    pub gpu: bool,
    pub runs: usize,
    pub median_us: f64,
    pub p90_us: f64,
}

#[derive(Default)]
pub(super) struct Profile {
    on: AtomicBool,
    /// Nanoseconds per run, by position in the plan (live op index).
    samples: Mutex<BTreeMap<usize, Vec<u64>>>,
}

impl Profile {
    pub fn enable(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Adds one chunk's times: (live op index, nanoseconds).
    pub fn record(&self, times: &[(usize, u64)]) {
        let mut samples = self.samples.lock().expect("profile lock");
        for &(p, ns) in times {
            samples.entry(p).or_default().push(ns);
        }
    }

    /// Median and 90th percentile per node, in plan order; `name` gives a node's name, op
    /// type and whether it runs on a GPU from its live op index.
    pub fn report(&self, name: impl Fn(usize) -> (String, String, bool)) -> Vec<NodeTime> {
        let samples = self.samples.lock().expect("profile lock");
        samples
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(&p, v)| {
                let mut v = v.clone();
                v.sort_unstable();
                let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
                let (node, op_type, gpu) = name(p);
                NodeTime {
                    node,
                    op_type,
                    gpu,
                    runs: v.len(),
                    median_us: at(0.5),
                    p90_us: at(0.9),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_p90_per_node_in_plan_order() {
        let p = Profile::default();
        assert!(!p.is_on());
        p.enable();
        assert!(p.is_on());
        // Node 3 over ten runs (1..=10 us), node 1 once.
        for i in 1..=10u64 {
            p.record(&[(3, i * 1000)]);
        }
        p.record(&[(1, 500)]);
        let r = p.report(|i| (format!("n{i}"), "Op".into(), false));
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].node.as_str(), r[0].runs, r[0].median_us),
            ("n1", 1, 0.5)
        );
        // Ten sorted samples: the median at index round(4.5) = 5 (half away from zero), the
        // p90 at round(8.1) = 8.
        assert_eq!((r[1].node.as_str(), r[1].runs), ("n3", 10));
        assert_eq!((r[1].median_us, r[1].p90_us), (6.0, 9.0));
    }
}
