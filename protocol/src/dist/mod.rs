//! Distributed execution's decisions, with no I/O: state machines in quinn-proto's style that
//! a tokio driver (node/src/distributed, node/src/cluster/tensors.rs) feeds with events and
//! drains of actions.
//!
//! - [`submitter`]: the node a model was submitted to: deployments (fragments out, acks in,
//!   retire), runs (inputs out, outputs in, failure attribution, one retry, the deadline);
//! - [`participant`]: a node's part in other nodes' models: loaded fragments, their
//!   reservations, and the run table (values early, running, aborted);
//! - [`assembly`]: a large tensor's stripes reassembled on the receiver.
//!
//! Every machine takes the time as an argument (`now`), never reads a clock, and keeps its
//! state in ordered maps, so a given sequence of calls always yields the same actions. Each
//! has `poll_action()` (what the driver must do), `poll_timeout()` (when to call
//! `handle_timeout` next) and `handle_timeout(now)`.
//!
//! A driver owns each machine behind one lock (or one task), and after every call drains
//! `poll_action()` until it returns None, carrying each action out without holding the lock
//! across an await: an action may lead to another call (a send that fails is reported back
//! with `start_failed`, `load_result` or `value_send_failed`). It re-arms one timer to the
//! earliest `poll_timeout()` of its machines after each call.

pub mod assembly;
pub mod deployment;
pub mod participant;
pub mod run;
pub mod submitter;
pub mod unloads;

#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

/// Durations and limits of the machines. The defaults are the values the node uses; tests
/// shrink them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// An attempt of a run that has not completed after this long fails, and a participant
    /// gives up a run that has been running this long. Counted from the attempt's start, not
    /// from the last progress: a single-output run shows its submitter no progress until it
    /// ends, and every loss the machines can see (a send that failed, a stripe given up, a
    /// verdict, a panic) already ends the run at once; this is the last resort.
    pub run_deadline: Duration,
    /// A deployment whose nodes have not all answered their load after this long fails,
    /// naming the first that did not.
    pub load_deadline: Duration,
    /// How long values for a run that has not started may wait on a participant, and how long
    /// an aborted run is remembered there so its stragglers are dropped (`EARLY_TTL`).
    pub early_ttl: Duration,
    /// A partial striped tensor that no stripe is filling and that made no progress for this
    /// long is dropped; a dropped tensor's late stripes are refused for as long (`STALL`).
    pub stall: Duration,
    /// Plans kept per model (`MAX_DEPLOYMENTS`); a plan evicted from a full cache is
    /// unloaded once no run uses it.
    pub max_deployments: usize,
    /// A model whose owner (the client connection that loaded it) is gone is unloaded this
    /// long after.
    pub lease_grace: Duration,
    /// A node that failed while a model used it, without membership declaring it down, is
    /// left out of the model's plans for this long (or until it comes back).
    pub avoid_for: Duration,
    /// An `Unload` a node did not acknowledge is sent again this long after
    /// ([`unloads`]).
    pub unload_retry: Duration,
    /// What a node keeps for a sequence (its bound values, between steps) is freed after the
    /// sequence has been idle this long.
    pub sequence_idle: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            run_deadline: Duration::from_secs(600),
            load_deadline: Duration::from_secs(600),
            early_ttl: Duration::from_secs(60),
            stall: Duration::from_secs(60),
            max_deployments: 8,
            lease_grace: Duration::from_secs(5),
            avoid_for: Duration::from_secs(10),
            unload_retry: Duration::from_secs(1),
            sequence_idle: Duration::from_secs(600),
        }
    }
}

/// Whether a verdict that life `generation` of a node is down ends what was made with its life
/// `life`. 0 is "unknown" on either side, and matches.
fn died(life: u64, generation: u64) -> bool {
    life == 0 || generation == 0 || life <= generation
}

/// Whether life `generation` of a node coming up ends what was made with its older life
/// `life` (unknown: it does not).
fn returned(life: u64, generation: u64) -> bool {
    life != 0 && life < generation
}

/// `t + d`; None (never) when that cannot be represented, so an absurd duration in a config
/// means "no limit" rather than a panic or an immediate expiry.
pub(crate) fn after(t: Instant, d: Duration) -> Option<Instant> {
    t.checked_add(d)
}

/// A duration as the node's messages print it: whole seconds as "600 s", shorter ones (test
/// configs) exactly.
fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{d:?}")
    }
}
