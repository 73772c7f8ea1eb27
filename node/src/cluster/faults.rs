//! A fault layer inside our own transport, for tests (CI kernels have no netem): seeded drop,
//! delay and duplication of gossip datagrams, and partitions (time windows in which nothing
//! passes to or from a peer, streams included).
//!
//! Enabled by `ClusterConfig::faults` (the binary reads a TOML file named by `VKML_FAULTS`,
//! docs/CLUSTER.md):
//!
//! ```toml
//! seed = 7
//! [[rule]]
//! peer = "n2"          # a node name, or "*" for every peer
//! drop = 0.2           # probability a datagram to or from it is lost
//! duplicate = 0.1      # probability a datagram to it is sent twice
//! delay_ms = 30        # added to every datagram and stream opened to it
//! partition = [[3.0, 8.0]]  # seconds after start: cut both ways
//! ```
//!
//! and, at the top, `panic_op = "name"`: a run of this node's part of a model panics when
//! that part holds the op of that node name (a participant's panic must fail the run, not
//! hang it; no op is known to panic on purpose), and `stall = [[3.0, 6.0]]`: in each window
//! every worker thread of the node's main runtime is blocked, as when CPU-bound work took all
//! of them (membership, on its own thread, must go on answering).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use super::ClusterError;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    #[serde(default)]
    pub seed: u64,
    #[serde(default, rename = "rule")]
    pub rules: Vec<FaultRule>,
    /// The name of an ONNX node whose runs panic on this node.
    #[serde(default)]
    pub panic_op: Option<String>,
    /// Windows (seconds after start) in which the main runtime's workers are all blocked.
    #[serde(default)]
    pub stall: Vec<[f64; 2]>,
}

impl FaultConfig {
    /// A fault plan from a TOML file (the binary reads `VKML_FAULTS` for its path).
    pub fn read(path: &std::path::Path) -> Result<FaultConfig, ClusterError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ClusterError::Config(format!("{}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| ClusterError::Config(format!("{}: {e}", path.display())))
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    pub peer: String,
    #[serde(default)]
    pub drop: f64,
    #[serde(default)]
    pub duplicate: f64,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub partition: Vec<[f64; 2]>,
}

/// What to do with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass { delay: Duration, copies: u32 },
    Drop,
}

pub struct Faults {
    config: FaultConfig,
    start: Instant,
    rng: Mutex<StdRng>,
}

impl Faults {
    pub fn new(config: FaultConfig) -> Faults {
        let rng = StdRng::seed_from_u64(config.seed);
        Faults {
            config,
            start: Instant::now(),
            rng: Mutex::new(rng),
        }
    }

    fn rules<'a>(&'a self, peer: &'a str) -> impl Iterator<Item = &'a FaultRule> + 'a {
        self.config
            .rules
            .iter()
            .filter(move |r| r.peer == "*" || r.peer == peer)
    }

    /// The ONNX node whose runs are to panic here, if any.
    pub fn panic_op(&self) -> Option<&str> {
        self.config.panic_op.as_deref()
    }

    /// Whether `peer` is cut off now.
    pub fn partitioned(&self, peer: &str) -> bool {
        let t = self.start.elapsed().as_secs_f64();
        self.rules(peer)
            .any(|r| r.partition.iter().any(|w| t >= w[0] && t < w[1]))
    }

    /// Extra latency for anything sent to `peer`.
    pub fn delay(&self, peer: &str) -> Duration {
        Duration::from_millis(self.rules(peer).map(|r| r.delay_ms).sum())
    }

    /// The fate of a datagram to (`outgoing`) or from `peer`.
    pub fn datagram(&self, peer: &str, outgoing: bool) -> Verdict {
        if self.partitioned(peer) {
            return Verdict::Drop;
        }
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let mut copies = 1;
        for r in self.rules(peer) {
            if r.drop > 0.0 && rng.random_bool(r.drop.clamp(0.0, 1.0)) {
                return Verdict::Drop;
            }
            if outgoing && r.duplicate > 0.0 && rng.random_bool(r.duplicate.clamp(0.0, 1.0)) {
                copies += 1;
            }
        }
        Verdict::Pass {
            delay: if outgoing {
                self.delay(peer)
            } else {
                Duration::ZERO
            },
            copies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(text: &str) -> Faults {
        Faults::new(toml::from_str(text).unwrap())
    }

    #[test]
    fn same_seed_same_fates() {
        let cfg = "seed = 3\n[[rule]]\npeer = \"b\"\ndrop = 0.5\nduplicate = 0.5\n";
        let (x, y) = (faults(cfg), faults(cfg));
        let a: Vec<_> = (0..200).map(|_| x.datagram("b", true)).collect();
        let b: Vec<_> = (0..200).map(|_| y.datagram("b", true)).collect();
        assert_eq!(a, b);
        let dropped = a.iter().filter(|v| **v == Verdict::Drop).count();
        // 200 draws at p = 0.5: far outside [60, 140] has probability < 1e-8.
        assert!((60..=140).contains(&dropped), "{dropped} of 200 dropped");
        assert!(a.contains(&Verdict::Pass {
            delay: Duration::ZERO,
            copies: 2
        }));
    }

    #[test]
    fn rules_apply_to_their_peer_only_and_partitions_are_windows() {
        let f = faults("[[rule]]\npeer = \"b\"\ndelay_ms = 20\npartition = [[0.0, 3600.0]]\n");
        assert!(f.partitioned("b"));
        assert!(!f.partitioned("c"));
        assert_eq!(f.datagram("b", false), Verdict::Drop);
        assert_eq!(
            f.datagram("c", true),
            Verdict::Pass {
                delay: Duration::ZERO,
                copies: 1
            }
        );
        assert_eq!(f.delay("b"), Duration::from_millis(20));
        let later = faults("[[rule]]\npeer = \"*\"\npartition = [[3600.0, 7200.0]]\n");
        assert!(!later.partitioned("b"));
    }
}
