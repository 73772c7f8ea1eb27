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

/// One GPU kernel's time in a run (all its dispatches added) over the runs it was profiled in.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// The kernel's name (shader and variant).
    pub kernel: String,
    pub runs: usize,
    /// Its dispatches in one run.
    pub dispatches: usize,
    pub median_us: f64,
}

#[derive(Default)]
pub(super) struct Profile {
    on: AtomicBool,
    /// Nanoseconds per run, by position in the plan (live op index).
    samples: Mutex<BTreeMap<usize, Vec<u64>>>,
    /// Per GPU kernel: its dispatches in a run, and nanoseconds per run.
    kernels: Mutex<BTreeMap<String, (usize, Vec<u64>)>>,
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

    /// Adds one timed GPU chunk's times by kernel: (kernel, dispatches, nanoseconds).
    pub fn record_kernels(&self, times: BTreeMap<String, (usize, u64)>) {
        let mut kernels = self.kernels.lock().expect("profile lock");
        for (k, (n, ns)) in times {
            let e = kernels.entry(k).or_default();
            e.0 = n;
            e.1.push(ns);
        }
    }

    /// Each GPU kernel's median time in a run, largest first.
    pub fn kernel_report(&self) -> Vec<KernelTime> {
        let kernels = self.kernels.lock().expect("profile lock");
        let mut out: Vec<KernelTime> = kernels
            .iter()
            .map(|(k, (n, v))| {
                let mut v = v.clone();
                v.sort_unstable();
                KernelTime {
                    kernel: k.clone(),
                    runs: v.len(),
                    dispatches: *n,
                    median_us: v[v.len() / 2] as f64 / 1e3,
                }
            })
            .collect();
        out.sort_by(|a, b| b.median_us.total_cmp(&a.median_us));
        out
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

    #[test]
    fn kernels_report_their_median_per_run_largest_first() {
        let p = Profile::default();
        for ns in [3000u64, 1000, 2000] {
            let mut run = BTreeMap::new();
            run.insert("gemv_f16".to_string(), (7, ns));
            run.insert("rms_rows_f16".to_string(), (2, 5000));
            p.record_kernels(run);
        }
        let r = p.kernel_report();
        let rows: Vec<_> = r
            .iter()
            .map(|k| (k.kernel.as_str(), k.runs, k.dispatches, k.median_us))
            .collect();
        assert_eq!(rows, [("rms_rows_f16", 3, 2, 5.0), ("gemv_f16", 3, 7, 2.0)]);
    }
}
