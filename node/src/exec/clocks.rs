//! Keeping GPUs' clocks up while a split model runs through them.
//!
//! A pipeline over several GPUs leaves each idle while the others run their stages: a language
//! model's decode step split over three H200s keeps each busy a third of the time, and their
//! power management then holds them at idle clocks (345 MHz, against 1,980 when busy), so each
//! stage took as long as the whole model on one GPU (BENCHMARKS.md, session 19: 36.9 ms a token
//! over three GPUs against 10.9 on one, 14.5 with the GPUs kept busy). While parts of plans
//! run on a node, a thread runs a job of a few microseconds on each of its GPUs every half
//! millisecond, through the same queue as the runs (another process's kernels would cost a
//! context switch each), and stops [`HOLD`] after the last run started.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Device;
use crate::tuning::Tuning;

/// How long after a run starts the clocks are kept up: longer than the gap between a
/// generation's steps.
pub const HOLD: Duration = Duration::from_millis(200);

/// How often the job runs while they are (what kept an H200 at full clocks).
const EVERY: Duration = Duration::from_micros(500);

#[derive(Default)]
struct Wanted {
    until: Option<Instant>,
    stop: bool,
}

/// The thread that keeps the clocks up, and what it is asked.
pub struct ClockKeeper {
    wanted: Arc<(Mutex<Wanted>, Condvar)>,
}

impl ClockKeeper {
    /// A keeper for the GPUs among `devices` that have clocks to keep (not a CPU presenting
    /// itself as one, such as lavapipe); None when there is none.
    pub fn start(devices: &[Device], tuning: &Tuning) -> Option<ClockKeeper> {
        let gpus: Vec<Device> = devices
            .iter()
            .filter(|d| matches!(d, Device::Gpu(g) if !g.info().is_cpu))
            .cloned()
            .collect();
        if gpus.is_empty() || !tuning.keep_clocks {
            return None;
        }
        let wanted = Arc::new((Mutex::new(Wanted::default()), Condvar::new()));
        let (w, tuning) = (wanted.clone(), *tuning);
        std::thread::Builder::new()
            .name("vkml-clocks".into())
            .spawn(move || keep(&w, &gpus, &tuning))
            .ok()?;
        Some(ClockKeeper { wanted })
    }

    /// A run starts: the clocks stay up for [`HOLD`] from now.
    pub fn touch(&self) {
        let (m, c) = &*self.wanted;
        let mut w = m.lock().expect("clock keeper");
        let was_idle = w.until.is_none_or(|t| t <= Instant::now());
        w.until = Some(Instant::now() + HOLD);
        if was_idle {
            c.notify_one();
        }
    }
}

impl Drop for ClockKeeper {
    fn drop(&mut self) {
        let (m, c) = &*self.wanted;
        m.lock().expect("clock keeper").stop = true;
        c.notify_one();
    }
}

fn keep(wanted: &(Mutex<Wanted>, Condvar), gpus: &[Device], tuning: &Tuning) {
    let jobs: Vec<_> = gpus
        .iter()
        .filter_map(|d| match super::probe::small_job(d, tuning) {
            Ok(job) => Some(job),
            Err(e) => {
                tracing::warn!("cannot keep {}'s clocks up: {e}", d.name());
                None
            }
        })
        .collect();
    let (m, c) = wanted;
    let mut w = m.lock().expect("clock keeper");
    loop {
        if w.stop {
            return;
        }
        match w.until {
            Some(t) if Instant::now() < t => {
                drop(w);
                for (exe, x) in &jobs {
                    let _ = exe.run(vec![x.clone()]);
                }
                std::thread::sleep(EVERY);
                w = m.lock().expect("clock keeper");
            }
            _ => w = c.wait(w).expect("clock keeper"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU, and lavapipe (a CPU behind the Vulkan API), have no clocks to keep up: no
    /// thread is started for them.
    #[test]
    fn no_keeper_without_a_real_gpu() {
        let t = Tuning::default();
        assert!(ClockKeeper::start(&[Device::Cpu], &t).is_none());
        if vkml_testkit::test_gpu().is_some() {
            let gpus = vkml_testkit::vulkan().expect("opened").gpus();
            let lavapipe: Vec<Device> = gpus
                .iter()
                .filter(|g| g.info().is_cpu)
                .map(|g| Device::Gpu(g.clone()))
                .collect();
            assert!(lavapipe.is_empty() || ClockKeeper::start(&lavapipe, &t).is_none());
        }
    }
}
