//! Unloads a node did not acknowledge. A retired plan's `Unload` can be lost with no verdict
//! ever following: a one-sided partition cuts the node off for a few seconds, membership
//! still sees it alive, and it would keep its part and its reservation for good. So an
//! unload the driver could not deliver is sent again every [`Config::unload_retry`], up to
//! [`UNLOAD_TRIES`] times; a node declared down meanwhile is owed it instead (sent if it
//! comes back, by the submitter's `owed`).

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Config, after};

/// Sends of one unload before it is given up (about a minute at the default interval; by
/// then a node still unreachable has been declared dead, and a rejoin drops what it held).
pub const UNLOAD_TRIES: u32 = 60;

/// At most this many unloads waiting to be sent again (the oldest are given up).
const MAX_PENDING: usize = 1024;

struct Pending {
    reason: String,
    tries: u32,
    /// When to send it again; None while a send is in flight.
    due: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Resends {
    pending: BTreeMap<(String, u64), Pending>,
}

impl Resends {
    /// The send of unload `load_id` to `to` failed: it is due again after the interval,
    /// unless it was sent [`UNLOAD_TRIES`] times.
    pub(super) fn failed(
        &mut self,
        to: &str,
        load_id: u64,
        reason: &str,
        now: Instant,
        config: &Config,
    ) {
        let key = (to.to_string(), load_id);
        let tries = self.pending.get(&key).map_or(1, |p| p.tries + 1);
        if tries >= UNLOAD_TRIES {
            self.pending.remove(&key);
            return;
        }
        if !self.pending.contains_key(&key) && self.pending.len() >= MAX_PENDING {
            let oldest = self.pending.keys().next().cloned();
            if let Some(k) = oldest {
                self.pending.remove(&k);
            }
        }
        self.pending.insert(
            key,
            Pending {
                reason: reason.to_string(),
                tries,
                // An interval too long to represent: never again.
                due: after(now, config.unload_retry),
            },
        );
    }

    /// `to` has the unload: nothing more to send.
    pub(super) fn delivered(&mut self, to: &str, load_id: u64) {
        self.pending.remove(&(to.to_string(), load_id));
    }

    /// `to` went down: its pending unloads, to be owed until it comes back.
    pub(super) fn take_node(&mut self, to: &str) -> Vec<(u64, String)> {
        let keys: Vec<(String, u64)> = self
            .pending
            .keys()
            .filter(|(n, _)| n == to)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| self.pending.remove(&k).map(|p| (k.1, p.reason)))
            .collect()
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.pending.values().filter_map(|p| p.due).min()
    }

    /// The unloads due by `now` (to, load id, reason), now in flight.
    pub(super) fn due(&mut self, now: Instant) -> Vec<(String, u64, String)> {
        let mut out = Vec::new();
        for ((to, load_id), p) in &mut self.pending {
            if p.due.is_some_and(|d| d <= now) {
                p.due = None;
                out.push((to.clone(), *load_id, p.reason.clone()));
            }
        }
        out
    }
}
