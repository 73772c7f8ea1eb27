//! Each machine on its own, driven by hand: the decisions and the texts that leave them.
//! (Several nodes together: crate::sim.)

mod assembly;
mod ends;
mod participant;
mod submitter;

use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A start for the test's clock: only differences from it matter.
fn t0() -> Instant {
    Instant::now()
}
