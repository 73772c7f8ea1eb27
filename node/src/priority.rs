//! Heavy local work yields to the cluster's heartbeat.
//!
//! A node answers its peers' probes from its tokio runtime; model loads, pipeline creation,
//! weight uploads and the CPU kernels of runs are heavy and can take every core for seconds.
//! At the same priority, a probe's answer then waits behind them, and on a small machine peers
//! declare a busy node dead (seen on two cores loading SqueezeNet). So the threads that do
//! heavy work run at a lower scheduling priority (a higher nice value): they still get every
//! idle cycle, and the network threads get the CPU the moment they need it. On Linux the nice
//! value is per thread and inherited by threads it starts.

/// The nice value heavy work runs at: well below the default 0 and still above idle-only 19,
/// so a node's own heavy work is not starved by unrelated background jobs.
pub const HEAVY_NICE: i32 = 10;

/// Lowers the calling thread to [`HEAVY_NICE`] (never raises it). Returns whether it is there;
/// where the system refuses, the thread keeps its priority and work goes on.
pub fn demote_this_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let now = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
        if now >= HEAVY_NICE {
            return true;
        }
        rustix::process::setpriority_process(Some(tid), HEAVY_NICE).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Heavy work that panicked: the panic's message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("heavy work panicked: {0}")]
pub struct Panicked(pub String);

/// Runs CPU-bound heavy work `f` (model decoding, planning, building a model's part, hashing
/// weights) on rayon's pool, the one the CPU kernels run on, and resolves to its result. That
/// pool has a fixed number of threads (one per core, at the heavy priority where `vkml-node`
/// starts it), so a node's threads do not grow with the loads and runs it has at once: a burst
/// of work waits in the pool's queue instead of starting threads. `f` must not wait for
/// anything but the CPU (use [`blocking`] for that): a pool thread it held would be lost to
/// every kernel meanwhile.
pub fn heavy<F, R>(f: F) -> impl std::future::Future<Output = Result<R, Panicked>>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    rayon::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r.map_err(|p| Panicked(panic_text(&*p))));
    });
    async move {
        rx.await
            .unwrap_or_else(|_| Err(Panicked("its task was dropped".into())))
    }
}

/// Runs heavy work `f` that waits on more than the CPU (a channel fed by the network, a disk)
/// on tokio's blocking pool, at the heavy priority. Call inside the runtime.
pub fn blocking<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        demote_this_thread();
        f()
    })
}

/// A panic's message, when it has one.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[test]
    fn a_demoted_thread_runs_nicer_and_its_children_too_but_not_its_siblings() {
        let before = std::thread::spawn(nice_of_this_thread).join().unwrap();
        let (mine, child) = std::thread::spawn(|| {
            assert!(demote_this_thread());
            assert!(demote_this_thread(), "again is a no-op");
            let child = std::thread::spawn(nice_of_this_thread).join().unwrap();
            (nice_of_this_thread(), child)
        })
        .join()
        .unwrap();
        assert_eq!(mine, HEAVY_NICE.max(before));
        assert_eq!(child, mine, "inherited");
        let sibling = std::thread::spawn(nice_of_this_thread).join().unwrap();
        assert_eq!(sibling, before, "per thread, not per process");
    }
}
