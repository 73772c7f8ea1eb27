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

/// Runs heavy work `f` on tokio's blocking pool, at the heavy priority: model loads, planning,
/// and runs whose CPU kernels may take every core.
pub fn spawn_heavy<F, R>(handle: &tokio::runtime::Handle, f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    handle.spawn_blocking(move || {
        demote_this_thread();
        f()
    })
}

/// [`spawn_heavy`] on the current runtime. Call inside it.
pub fn heavy<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    spawn_heavy(&tokio::runtime::Handle::current(), f)
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
