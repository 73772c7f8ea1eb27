//! What `vkml-node status` says of a node's load: runs in flight, and how busy each device
//! is. The figures are the process's (one node is one process): every executable of every
//! model charges the same meter per device name, since they share the hardware.
//!
//! A device is busy while at least one chunk runs on it: a CPU chunk from its first op to its
//! last, a GPU chunk from its submission to the completion seen (queued work counts: the GPU
//! is busy with something else meanwhile). Overlapping chunks count once, so the fraction is
//! of wall time, at most 1.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// The window a busy fraction is taken over (at least; see [`BusyMeter::fraction`]).
pub const WINDOW: Duration = Duration::from_secs(1);
/// Samples are taken at most this often while the device works.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct State {
    active: u32,
    /// When `active` last rose from zero.
    since: Instant,
    /// Busy nanoseconds up to `since` (or up to now when idle).
    total_ns: u64,
    /// (when, busy total then), oldest first.
    samples: VecDeque<(Instant, u64)>,
}

impl State {
    fn total_at(&self, now: Instant) -> u64 {
        let running = if self.active > 0 {
            now.saturating_duration_since(self.since).as_nanos() as u64
        } else {
            0
        };
        self.total_ns.saturating_add(running)
    }

    fn sample(&mut self, now: Instant, force: bool) {
        let due = self
            .samples
            .back()
            .is_none_or(|&(t, _)| now.saturating_duration_since(t) >= SAMPLE_EVERY);
        if force || due {
            let total = self.total_at(now);
            self.samples.push_back((now, total));
        }
        // Keep the newest sample older than the window, and everything since.
        while self.samples.len() > 1 && now.saturating_duration_since(self.samples[1].0) >= WINDOW {
            self.samples.pop_front();
        }
    }
}

/// One device's busy time.
#[derive(Debug)]
pub struct BusyMeter {
    state: Mutex<State>,
}

impl BusyMeter {
    fn new(now: Instant) -> BusyMeter {
        BusyMeter {
            state: Mutex::new(State {
                active: 0,
                since: now,
                total_ns: 0,
                samples: VecDeque::from([(now, 0)]),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A chunk starts on the device.
    pub fn enter(&self, now: Instant) {
        let mut s = self.lock();
        if s.active == 0 {
            s.since = now;
        }
        s.active += 1;
        s.sample(now, false);
    }

    /// A chunk that entered has ended.
    pub fn leave(&self, now: Instant) {
        let mut s = self.lock();
        if s.active == 0 {
            return;
        }
        s.active -= 1;
        if s.active == 0 {
            let ran = now.saturating_duration_since(s.since).as_nanos() as u64;
            s.total_ns = s.total_ns.saturating_add(ran);
        }
        s.sample(now, false);
    }

    /// Busy nanoseconds since the meter was made.
    pub fn busy_ns(&self, now: Instant) -> u64 {
        self.lock().total_at(now)
    }

    /// The busy fraction over the last [`WINDOW`] or a little more (from the newest sample at
    /// least that old: the busy total does not change while idle, so a sample from long ago
    /// is as good as one a second old).
    pub fn fraction(&self, now: Instant) -> f64 {
        let mut s = self.lock();
        s.sample(now, true);
        let total = s.total_at(now);
        let (t0, b0) = s.samples[0];
        let span = now.saturating_duration_since(t0).as_nanos() as u64;
        if span == 0 {
            return 0.0;
        }
        (total.saturating_sub(b0) as f64 / span as f64).min(1.0)
    }

    /// Counts the device busy until the guard drops.
    pub fn guard(self: &Arc<Self>) -> BusyGuard {
        self.enter(Instant::now());
        BusyGuard(Arc::clone(self))
    }
}

/// Holds a device busy (see [`BusyMeter::guard`]).
pub struct BusyGuard(Arc<BusyMeter>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.leave(Instant::now());
    }
}

static METERS: LazyLock<Mutex<BTreeMap<String, Arc<BusyMeter>>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// The meter of the device of this name ("cpu", "vulkan:0"), made on first use.
pub fn meter(device: &str) -> Arc<BusyMeter> {
    let mut m = METERS.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(
        m.entry(device.to_string())
            .or_insert_with(|| Arc::new(BusyMeter::new(Instant::now()))),
    )
}

/// One device's load, as status reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceLoad {
    pub device: String,
    /// Over the last second or so, 0 to 1.
    pub busy_fraction: f64,
    pub busy_ns: u64,
}

/// Every device that has run a chunk in this process, by name.
pub fn loads() -> Vec<DeviceLoad> {
    let now = Instant::now();
    let m = METERS.lock().unwrap_or_else(|p| p.into_inner());
    m.iter()
        .map(|(name, meter)| DeviceLoad {
            device: name.clone(),
            busy_fraction: meter.fraction(now),
            busy_ns: meter.busy_ns(now),
        })
        .collect()
}

static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
static FINISHED: AtomicU64 = AtomicU64::new(0);

/// Counts a run (or a node's part of a split run) in flight until it drops.
pub struct RunCount(());

impl RunCount {
    pub fn start() -> RunCount {
        IN_FLIGHT.fetch_add(1, Relaxed);
        RunCount(())
    }
}

impl Drop for RunCount {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Relaxed);
        FINISHED.fetch_add(1, Relaxed);
    }
}

/// Runs in flight in this process now, and runs ended (well or not) since it started.
pub fn runs() -> (u64, u64) {
    (IN_FLIGHT.load(Relaxed), FINISHED.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn overlapping_chunks_count_once_and_idle_time_not_at_all() {
        let t0 = Instant::now();
        let m = BusyMeter::new(t0);
        m.enter(t0);
        m.enter(t0 + ms(100));
        m.leave(t0 + ms(300));
        m.leave(t0 + ms(400));
        // Idle from 400 to 1000, then busy from 1000 to 1200.
        m.enter(t0 + ms(1000));
        assert_eq!(
            m.busy_ns(t0 + ms(1100)),
            500_000_000,
            "a chunk still running counts"
        );
        m.leave(t0 + ms(1200));
        assert_eq!(m.busy_ns(t0 + ms(2000)), 600_000_000);
    }

    #[test]
    fn the_fraction_covers_about_the_last_second() {
        let t0 = Instant::now();
        let m = BusyMeter::new(t0);
        // Busy for the first 5 s, idle after.
        m.enter(t0);
        for i in 1..50 {
            // Another chunk overlapping keeps samples coming.
            m.enter(t0 + ms(100 * i));
            m.leave(t0 + ms(100 * i + 50));
        }
        m.leave(t0 + ms(5000));
        let busy = m.fraction(t0 + ms(4900));
        assert!(busy > 0.99, "{busy}");
        let after = m.fraction(t0 + ms(8000));
        assert!(after < 0.01, "idle for 3 s: {after}");
        // Half of the last window busy.
        m.enter(t0 + ms(8500));
        let half = m.fraction(t0 + ms(9000));
        assert!((0.3..=0.7).contains(&half), "{half}");
    }

    #[test]
    fn a_leave_without_an_enter_is_ignored() {
        let t0 = Instant::now();
        let m = BusyMeter::new(t0);
        m.leave(t0 + ms(10));
        assert_eq!(m.busy_ns(t0 + ms(20)), 0);
    }
}
