//! The membership thread, which keeps gossip off the main runtime, and the fault that blocks
//! that runtime to show it matters.

use std::time::Duration;

use tokio::sync::oneshot;

use super::ClusterError;

/// Fault injection: blocks every worker of the current (main) runtime in each window, as
/// CPU-bound work that took them all would.
pub(super) fn stall_windows(windows: &[[f64; 2]]) {
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    for &[from, to] in windows {
        let (start, length) = (
            Duration::from_secs_f64(from.max(0.0)),
            Duration::from_secs_f64((to - from).max(0.0)),
        );
        tracing::warn!("fault injection: the runtime stalls from {from} s for {length:?}");
        for _ in 0..workers {
            tokio::spawn(async move {
                tokio::time::sleep(start).await;
                // Blocking on purpose: this is the fault.
                std::thread::sleep(length);
            });
        }
    }
}

/// The membership thread: a runtime of its own for gossip and its endpoint, so that no
/// amount of work on the main runtime (streams of gigabytes, CPU-bound runs) delays an
/// answer to a probe. Ends when the sender returned is dropped.
pub(super) fn gossip_thread() -> Result<(tokio::runtime::Handle, oneshot::Sender<()>), ClusterError>
{
    let (stop, stopped) = oneshot::channel::<()>();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("vkml-gossip".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match rt {
                Ok(rt) => {
                    let _ = tx.send(Ok(rt.handle().clone()));
                    let _ = rt.block_on(stopped);
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })
        .map_err(|e| ClusterError::Io(format!("cannot start the membership thread: {e}")))?;
    let handle = rx
        .recv()
        .map_err(|_| ClusterError::Io("the membership thread did not start".into()))?
        .map_err(|e| ClusterError::Io(format!("the membership thread's runtime: {e}")))?;
    Ok((handle, stop))
}
