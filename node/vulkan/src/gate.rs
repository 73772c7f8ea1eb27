//! Armed lists: a command list queued on the main queue before its inputs exist, behind a gate
//! (a timeline semaphore) that the host opens once they are written.
//!
//! Most of a small run's fixed cost on a discrete GPU lies between vkQueueSubmit and the GPU
//! starting the work. On an H100 (`arm_report`, BENCHMARKS.md session 7), one dispatch into
//! readback memory took 15.5 µs from "input ready" to "result read" when submitted then, and
//! 12.2-13.2 µs when it had been queued behind the run before it, gated, and released then.
//!
//! A list waiting on its gate blocks everything behind it on its queue, so a GPU holds at most
//! one armed list, and anything else queued on the GPU ([`Gpu::submit`], or arming another
//! list) first disarms it: the gate opens and the list runs, on whatever its inputs hold, and
//! its owner, finding it disarmed ([`Armed::fire`] returns `None`), submits it again when its
//! inputs are ready. So an armed list must write only what nobody reads unless it is fired or
//! submitted again (the executor gives each recording its own readback buffer), and should be
//! short, as a disarm costs one run of it.
//!
//! Two other designs were measured and dropped. Queues of their own for armed lists ("lanes"):
//! on NVIDIA a list waiting on one queue halved the speed of the work running on another
//! (BENCHMARKS.md, session 6). Disarming by conditional rendering (a predicate that skips
//! every dispatch), which would have made a disarm free: it cost about 3 µs on every run
//! (`arm_report`, session 7), nearly all the gain.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;

use super::error::VulkanError;
use super::gpu::Gpu;
use super::record::CommandList;

/// A GPU's gate and the list armed behind it, if any.
pub(crate) struct Arming {
    /// Host-signalled timeline: an armed list waits for the value it was given.
    pub gate: vk::Semaphore,
    state: Mutex<ArmState>,
}

pub(crate) struct ArmState {
    /// The last gate value handed out; each arming takes the next.
    issued: u64,
    /// The gate value of the list armed now, if any.
    pending: Option<u64>,
}

impl Arming {
    pub(crate) fn new(gate: vk::Semaphore) -> Arming {
        Arming {
            gate,
            state: Mutex::new(ArmState {
                issued: 0,
                pending: None,
            }),
        }
    }
}

/// A command list queued behind the GPU's gate, to run when fired. Dropping it unfired
/// disarms it (it runs on whatever its inputs hold).
pub struct Armed {
    gpu: Arc<Gpu>,
    /// Kept alive while queued: the list waits for its last submission before it goes.
    _list: Arc<CommandList>,
    gate: u64,
    value: u64,
    /// Fired: nothing left to do on drop.
    fired: bool,
}

impl std::fmt::Debug for Armed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Armed(gate {}, value {})", self.gate, self.value)
    }
}

impl Gpu {
    /// Takes the arming lock, which every submission to the main queue holds first (before
    /// the queue's own), and disarms the list armed now, if any: whatever the caller queues
    /// next must not wait behind it.
    pub(crate) fn lock_and_disarm(&self) -> Result<MutexGuard<'_, ArmState>, VulkanError> {
        let mut state = self.arming.state.lock().expect("arming lock");
        if let Some(gate) = state.pending.take() {
            self.open_gate(gate)?;
        }
        Ok(state)
    }

    fn open_gate(&self, gate: u64) -> Result<(), VulkanError> {
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.arming.gate)
            .value(gate);
        // SAFETY: a live timeline semaphore of this device, signalled only here, under the
        // arming lock, with the value of the one list armed behind it: values only grow (each
        // arming takes the next) and each is signalled once (its pending entry is taken).
        unsafe { self.device.signal_semaphore(&info) }.map_err(self.fail("vkSignalSemaphore"))
    }

    /// Queues `list` (recorded by [`Gpu::record_gated`]) behind the gate, to start when the
    /// returned [`Armed`] is fired; on the GPU it also waits for the submission that signals
    /// `after` (0: none) and everything before it, as [`Gpu::submit_after`]. `None` while the
    /// list's last submission has not been seen complete (then submit it as usual). Host
    /// writes made after this call and before the firing are visible to the list. A list
    /// armed before is disarmed first.
    pub fn arm(&self, list: &Arc<CommandList>, after: u64) -> Result<Option<Armed>, VulkanError> {
        if !std::ptr::eq(&**list.gpu(), self) {
            return Err(VulkanError::invalid(format!(
                "command list recorded on {} armed on {}",
                list.gpu().info.name,
                self.info.name
            )));
        }
        if !list.gated {
            return Err(VulkanError::invalid(
                "only lists recorded with record_gated can be armed",
            ));
        }
        self.check_alive()?;
        if after > self.submitted.load(Ordering::Acquire) {
            return Err(VulkanError::invalid(format!(
                "cannot wait for timeline value {after}: it was never submitted"
            )));
        }
        let mut state = self.lock_and_disarm()?;
        let mut last = list.last.lock().expect("command list lock");
        if *last > self.observed.load(Ordering::Acquire) && *last > self.completed()? {
            return Ok(None);
        }
        let gate = state.issued + 1;
        let prior = after.max(self.observed.load(Ordering::Acquire));
        let mut waits = vec![(self.arming.gate, gate)];
        if prior > 0 {
            waits.push((self.timeline, prior));
        }
        // SAFETY: the list is this GPU's and not pending (both checked above, under its lock,
        // held until `last` is updated); the timeline value was submitted; the gate value is
        // new, and is signalled exactly once, by the Armed (fire, drop) or by whoever disarms
        // it (the arming lock, held here and by every submission, keeps anything from being
        // queued ahead of this meanwhile).
        let value = unsafe { self.queue_list(list, &waits) }?;
        *last = value;
        state.issued = gate;
        state.pending = Some(gate);
        Ok(Some(Armed {
            gpu: self.arc(),
            _list: Arc::clone(list),
            gate,
            value,
            fired: false,
        }))
    }
}

impl Armed {
    /// Releases the list to run on what the host has written: `Some(value)`, the timeline value
    /// its completion signals, or `None` when it was disarmed meanwhile (it then ran, or runs,
    /// on stale inputs: submit the list again).
    pub fn fire(mut self) -> Result<Option<u64>, VulkanError> {
        self.fired = true;
        let mut state = self.gpu.arming.state.lock().expect("arming lock");
        if state.pending != Some(self.gate) {
            return Ok(None);
        }
        state.pending = None;
        self.gpu.open_gate(self.gate)?;
        Ok(Some(self.value))
    }

    /// The timeline value the list's completion signals, fired or disarmed.
    pub fn value(&self) -> u64 {
        self.value
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if self.fired {
            return;
        }
        let mut state = self.gpu.arming.state.lock().expect("arming lock");
        if state.pending == Some(self.gate) {
            state.pending = None;
            if let Err(e) = self.gpu.open_gate(self.gate) {
                tracing::error!("cannot disarm a command list: {e}");
            }
        }
    }
}
