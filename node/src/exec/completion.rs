//! Completion watchers: one thread per GPU observes its timeline semaphore and runs the
//! callback registered for each submission when it completes, so nobody who submits work has
//! to wait for it. The callbacks are what decrement dependency counters and submit the chunks
//! that become ready: there is no central scheduling loop.
//!
//! A watcher polls while work is pending on a real GPU (a sleeping wait would add the driver's
//! wake-up latency, tens of microseconds, to every chunk) for up to the GPU's spin budget after
//! the last completion, and otherwise sleeps in the driver's wait; with nothing pending it
//! blocks on its channel and costs nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, Sender, TryRecvError, unbounded};

use crate::device::vulkan::Gpu;
use crate::error::Error;

/// Runs once the submission's timeline value is reached, or with the reason it never will be.
pub(crate) type Callback = Box<dyn FnOnce(Result<(), Error>) + Send>;

/// A chunk that never completes within this is reported as failed instead of hanging the run.
pub(crate) const DEADLINE: Duration = Duration::from_secs(600);

struct Pending {
    /// The timeline value that signals the submission's completion.
    ticket: u64,
    since: Instant,
    callback: Callback,
}

/// Registers `callback` to run when `gpu`'s timeline reaches `ticket` (from its submit, or a
/// fired armed list).
pub(crate) fn on_complete(gpu: &Arc<Gpu>, ticket: u64, callback: Callback) {
    let mut pending = Pending {
        ticket,
        since: Instant::now(),
        callback,
    };
    let key = Arc::as_ptr(gpu) as usize;
    let mut watchers = watchers().lock().expect("watchers lock");
    // A watcher whose GPU is gone has exited and dropped its receiver; a new GPU at the same
    // address gets a new one.
    for _ in 0..2 {
        let tx = watchers
            .entry(key)
            .or_insert_with(|| spawn(Arc::downgrade(gpu)));
        match tx.send(pending) {
            Ok(()) => return,
            Err(e) => {
                pending = e.0;
                watchers.remove(&key);
            }
        }
    }
    (pending.callback)(Err(Error::Device(
        "cannot start the GPU's completion thread".into(),
    )));
}

fn watchers() -> &'static Mutex<BTreeMap<usize, Sender<Pending>>> {
    static WATCHERS: OnceLock<Mutex<BTreeMap<usize, Sender<Pending>>>> = OnceLock::new();
    WATCHERS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

fn spawn(gpu: Weak<Gpu>) -> Sender<Pending> {
    let (tx, rx) = unbounded();
    let name = gpu.upgrade().map_or_else(
        || "gpu".to_string(),
        |g| format!("vkml-done-{}", g.info().index),
    );
    let started = std::thread::Builder::new()
        .name(name)
        .spawn(move || watch(gpu, rx));
    if let Err(e) = started {
        tracing::error!("cannot start a completion thread: {e}");
    }
    tx
}

std::thread_local! {
    /// Set on completion threads: CPU work they make ready goes to the pool (run.rs).
    static WATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is a GPU's completion thread, which must not run a run's CPU chunks:
/// every run on that GPU waits on it.
pub(super) fn on_completion_thread() -> bool {
    WATCHING.with(std::cell::Cell::get)
}

fn watch(gpu: Weak<Gpu>, rx: Receiver<Pending>) {
    WATCHING.with(|w| w.set(true));
    let mut pending: Vec<Pending> = Vec::new();
    let mut last_progress = Instant::now();
    loop {
        if pending.is_empty() {
            match rx.recv() {
                Ok(p) => {
                    pending.push(p);
                    last_progress = Instant::now();
                }
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(p) => pending.push(p),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => break,
            }
        }
        let Some(gpu) = gpu.upgrade() else {
            fail_all(&mut pending, "the GPU was released with work pending");
            return;
        };
        let reached = match gpu.completed() {
            Ok(v) => v,
            Err(e) => {
                fail_all(&mut pending, &e.to_string());
                continue;
            }
        };
        let mut ready = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            if pending[i].ticket <= reached {
                ready.push(pending.swap_remove(i));
            } else if pending[i].since.elapsed() > DEADLINE {
                let p = pending.swap_remove(i);
                (p.callback)(Err(Error::Device(format!(
                    "{} did not finish a chunk within {} s",
                    gpu.info().name,
                    DEADLINE.as_secs()
                ))));
            } else {
                i += 1;
            }
        }
        if !ready.is_empty() {
            // In submission order, so a run's chunks complete in the order they were queued.
            ready.sort_by_key(|p| p.ticket);
            for p in ready {
                (p.callback)(Ok(()));
            }
            last_progress = Instant::now();
            continue;
        }
        if last_progress.elapsed() < gpu.spin_default() {
            std::hint::spin_loop();
            continue;
        }
        // Sleep in the driver until the first pending ticket is reached (the timeline
        // signals in order), waking now and then to take new registrations and check
        // deadlines.
        let first = pending.iter().map(|p| p.ticket).min().expect("pending");
        if let Err(e) = gpu.wait(first, Duration::from_millis(5)) {
            fail_all(&mut pending, &e.to_string());
        }
    }
}

fn fail_all(pending: &mut Vec<Pending>, why: &str) {
    for p in pending.drain(..) {
        (p.callback)(Err(Error::Device(why.to_string())));
    }
}
