//! One timer per state machine: the driver sets it to the machine's `poll_timeout()` after
//! every call, and a task calls the machine's `handle_timeout` when it is due.

use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::sync::watch;

/// When a machine next wants `handle_timeout` (None: never).
pub struct Alarm(watch::Sender<Option<Instant>>);

impl Default for Alarm {
    fn default() -> Alarm {
        Alarm(watch::channel(None).0)
    }
}

impl Alarm {
    /// Re-arms the timer; the task wakes only when the instant changed.
    pub fn set(&self, at: Option<Instant>) {
        self.0.send_if_modified(|v| {
            let changed = *v != at;
            *v = at;
            changed
        });
    }

    /// Spawns the task that calls `fire(owner)` whenever the alarm is due, until the
    /// owner is gone (the alarm goes with it). Call inside the tokio runtime.
    pub fn spawn<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        fire: impl Fn(&Arc<T>) + Send + 'static,
    ) {
        let mut rx = self.0.subscribe();
        tokio::spawn(async move {
            loop {
                let at = *rx.borrow_and_update();
                let due = async {
                    match at {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = due => {
                        match owner.upgrade() {
                            Some(o) => fire(&o),
                            None => return,
                        }
                        // A machine still due at the same instant after its timeout would
                        // spin this task: wait for its next change instead.
                        if *rx.borrow() == at && rx.changed().await.is_err() {
                            return;
                        }
                    }
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}
