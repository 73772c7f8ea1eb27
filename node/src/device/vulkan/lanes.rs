//! Lanes: queues reserved for a command list that is queued before its inputs exist and
//! released by the host once they do (an [`Armed`] list).
//!
//! Most of a small run's fixed cost on a discrete GPU lies between vkQueueSubmit and the GPU
//! starting the work. On an H100 (`gate_report`), a one-dispatch list submitted once its input
//! is ready completes 21.5 µs later; the same list queued beforehand behind a semaphore that
//! the host signals when the input is written completes 13.2 µs after the signal. But a queued
//! list that waits blocks everything behind it on its queue, so each armed list gets a queue of
//! its own: a lane. A lane has two timeline semaphores that move in step, `gate` (signalled by
//! the host to release the list) and `done` (signalled by the list when it completes).
//!
//! With `VKML_ARM=1` ([`arming_enabled`]) a GPU gets as many lanes as its queue family has
//! queues beyond the main one, up to [`MAX_LANES`] (`VKML_LANES=N` for fewer). Otherwise, and
//! on a family of one queue (lavapipe), it has none, and everything goes through the main
//! queue. Arming is an experiment, off by default: see [`arming_enabled`] for why.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;

use super::error::{VulkanError, vk_error};
use super::gpu::Gpu;
use super::record::CommandList;

/// Lanes per GPU at most: each armed execution context holds two while it waits for a run.
pub(crate) const MAX_LANES: u32 = 8;

/// Whether runs are armed ahead on lanes: only with `VKML_ARM=1` (read once). Off by default,
/// and without it no lane is opened. On an H100 (BENCHMARKS.md, session 6) armed runs were no
/// faster end to end, and while a list waited on its gate on one lane, work running on another
/// queue took twice as long per dispatch (10,000 dependent adds: 52.5 against 28.5 ms),
/// consistent with the driver time-slicing between the two queues' channels; each lane also
/// costs about 3 MiB of host memory in the driver.
pub fn arming_enabled() -> bool {
    static ARM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ARM.get_or_init(|| std::env::var("VKML_ARM").as_deref() == Ok("1"))
}

pub(crate) struct Lane {
    queue: vk::Queue,
    gate: vk::Semaphore,
    done: vk::Semaphore,
}

pub(crate) struct Lanes {
    all: Vec<Lane>,
    /// Free lanes with the value each was last armed to (its gate and done are both there).
    free: Mutex<Vec<(usize, u64)>>,
}

/// What a submission's completion is awaited by: a value of the GPU's main timeline, or of a
/// lane's `done` semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ticket {
    Queue(u64),
    Lane(usize, u64),
}

fn timeline(device: &ash::Device) -> Result<vk::Semaphore, VulkanError> {
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    // SAFETY: the device is live and timeline semaphores are enabled on it.
    unsafe { device.create_semaphore(&info, None) }.map_err(vk_error("vkCreateSemaphore"))
}

impl Lanes {
    /// Lanes on queues 1..=count of `family` (the device was created with that many more).
    /// On failure, whatever was made is destroyed again.
    pub(crate) fn new(device: &ash::Device, family: u32, count: u32) -> Result<Lanes, VulkanError> {
        let mut lanes = Lanes {
            all: Vec::new(),
            free: Mutex::new(Vec::new()),
        };
        for i in 1..=count {
            let made = timeline(device).and_then(|gate| match timeline(device) {
                Ok(done) => Ok((gate, done)),
                Err(e) => {
                    // SAFETY: just made on this device and never used.
                    unsafe { device.destroy_semaphore(gate, None) };
                    Err(e)
                }
            });
            let (gate, done) = match made {
                Ok(s) => s,
                Err(e) => {
                    // SAFETY: nothing was ever submitted on these lanes.
                    unsafe { lanes.destroy(device) };
                    return Err(e);
                }
            };
            // SAFETY: the device was created with `count + 1` queues in this family.
            let queue = unsafe { device.get_device_queue(family, i) };
            lanes.all.push(Lane { queue, gate, done });
        }
        let free = (0..lanes.all.len()).rev().map(|l| (l, 0)).collect();
        lanes.free = Mutex::new(free);
        Ok(lanes)
    }

    pub(crate) fn len(&self) -> usize {
        self.all.len()
    }

    /// Destroys the semaphores.
    ///
    /// # Safety
    /// No work that uses them may be pending (the device is idle, or nothing was submitted).
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        for lane in &self.all {
            // SAFETY: the caller guarantees no pending use; both are children of `device`.
            unsafe {
                device.destroy_semaphore(lane.gate, None);
                device.destroy_semaphore(lane.done, None);
            }
        }
    }
}

/// A command list queued on a lane, waiting for [`Armed::fire`]. Dropping it unfired releases
/// it anyway (it runs on whatever its inputs hold, and nobody reads its results), then waits
/// for it: the lane and the list are free again afterwards.
pub struct Armed {
    gpu: Arc<Gpu>,
    list: Arc<CommandList>,
    lane: usize,
    value: u64,
    fired: bool,
}

impl std::fmt::Debug for Armed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Armed(lane {}, value {}, fired {})",
            self.lane, self.value, self.fired
        )
    }
}

impl Gpu {
    /// How many lanes this GPU has (0 where its queue family has one queue).
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Queues `list` on a free lane, to start when the returned [`Armed`] is fired. `None`
    /// when no lane is free, or while the list is still pending from a submission on the main
    /// queue that nobody has seen complete (then submit it as usual). The list must have been
    /// recorded by [`Gpu::record_gated`], so that host writes made after this call but before
    /// the firing are visible to it. Like [`Gpu::submit`], the list waits on the GPU for every
    /// main-queue submission already seen complete.
    pub fn arm(&self, list: &Arc<CommandList>) -> Result<Option<Armed>, VulkanError> {
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
        let last = list.last.lock().expect("command list lock");
        let observed = self.observed.load(Ordering::Acquire);
        if *last > observed {
            return Ok(None);
        }
        if list.armed.swap(true, Ordering::AcqRel) {
            return Err(VulkanError::invalid("the command list is armed already"));
        }
        let Some((lane, prev)) = self.lanes.free.lock().expect("lanes lock").pop() else {
            list.armed.store(false, Ordering::Release);
            return Ok(None);
        };
        let value = prev + 1;
        let l = &self.lanes.all[lane];
        let mut waits = vec![l.gate];
        let mut wait_values = vec![value];
        if observed > 0 {
            waits.push(self.timeline);
            wait_values.push(observed);
        }
        let stages = vec![
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
            waits.len()
        ];
        let cmds = [list.cmd];
        let signals = [l.done];
        let signal_values = [value];
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&waits)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signals)
            .push_next(&mut timeline_info);
        // SAFETY: the lane (its queue and semaphores) belongs to this caller alone until it
        // goes back to the free list; the command buffer is executable and not pending (not
        // armed elsewhere, checked by the flag; its last main-queue submission has completed,
        // checked under its lock); it and its buffers live at least as long as the returned
        // Armed, which holds the list and waits for this submission before letting go. The
        // gate value is signalled by Armed alone (fire, or its drop); the wait value on the
        // main timeline was reached; the signal value is the lane's next; all structs outlive
        // the call.
        let result = unsafe {
            self.device
                .queue_submit(l.queue, &[submit], vk::Fence::null())
        };
        drop(last);
        if let Err(r) = result {
            self.lanes
                .free
                .lock()
                .expect("lanes lock")
                .push((lane, prev));
            list.armed.store(false, Ordering::Release);
            if r == vk::Result::ERROR_DEVICE_LOST {
                self.lost.store(true, Ordering::Relaxed);
            }
            return Err(vk_error("vkQueueSubmit")(r));
        }
        Ok(Some(Armed {
            gpu: self.arc(),
            list: Arc::clone(list),
            lane,
            value,
            fired: false,
        }))
    }

    /// Whether `ticket`'s submission has completed, without blocking.
    pub fn reached(&self, ticket: Ticket) -> Result<bool, VulkanError> {
        match ticket {
            Ticket::Queue(v) => Ok(self.completed()? >= v),
            Ticket::Lane(lane, v) => {
                let done = self.lane_done(lane)?;
                // SAFETY: a live timeline semaphore of this device.
                let value = unsafe { self.device.get_semaphore_counter_value(done) }
                    .map_err(vk_error("vkGetSemaphoreCounterValue"))?;
                Ok(value >= v)
            }
        }
    }

    /// Blocks until `ticket`'s submission completes: `Ok(true)`, or `Ok(false)` after
    /// `timeout`.
    pub fn wait_for(&self, ticket: Ticket, timeout: Duration) -> Result<bool, VulkanError> {
        match ticket {
            Ticket::Queue(v) => self.wait(v, timeout),
            lane => self.wait_any(&[lane], timeout),
        }
    }

    /// Blocks until any of `tickets` is reached, or `timeout` passes (`Ok(false)`).
    pub fn wait_any(&self, tickets: &[Ticket], timeout: Duration) -> Result<bool, VulkanError> {
        self.check_alive()?;
        let mut semaphores = Vec::with_capacity(tickets.len());
        let mut values = Vec::with_capacity(tickets.len());
        for &t in tickets {
            let (semaphore, value) = match t {
                Ticket::Queue(v) => {
                    if v > self.submitted.load(Ordering::Acquire) {
                        return Err(VulkanError::invalid(format!(
                            "cannot wait for timeline value {v}: it was never submitted"
                        )));
                    }
                    (self.timeline, v)
                }
                Ticket::Lane(lane, v) => (self.lane_done(lane)?, v),
            };
            semaphores.push(semaphore);
            values.push(value);
        }
        if semaphores.is_empty() {
            return Ok(true);
        }
        let info = vk::SemaphoreWaitInfo::default()
            .flags(vk::SemaphoreWaitFlags::ANY)
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: live timeline semaphores of this device, each value submitted (checked for
        // the main timeline; lane tickets come only from Armed::fire).
        match unsafe { self.device.wait_semaphores(&info, nanos) } {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(r) => {
                if r == vk::Result::ERROR_DEVICE_LOST {
                    self.lost.store(true, Ordering::Relaxed);
                }
                Err(vk_error("vkWaitSemaphores")(r))
            }
        }
    }

    fn lane_done(&self, lane: usize) -> Result<vk::Semaphore, VulkanError> {
        self.lanes
            .all
            .get(lane)
            .map(|l| l.done)
            .ok_or_else(|| VulkanError::invalid(format!("there is no lane {lane}")))
    }
}

impl Armed {
    /// Releases the list: call once its inputs are written. Returns the ticket that its
    /// completion reaches.
    pub fn fire(&mut self) -> Result<Ticket, VulkanError> {
        if !self.fired {
            let info = vk::SemaphoreSignalInfo::default()
                .semaphore(self.gpu.lanes.all[self.lane].gate)
                .value(self.value);
            // SAFETY: a live timeline semaphore of this device; the value is larger than any
            // signalled on it before (each arming takes the next one, and only this Armed
            // signals it).
            unsafe { self.gpu.device.signal_semaphore(&info) }
                .map_err(vk_error("vkSignalSemaphore"))?;
            self.fired = true;
        }
        Ok(Ticket::Lane(self.lane, self.value))
    }

    /// Whether [`Armed::fire`] was called.
    pub fn is_fired(&self) -> bool {
        self.fired
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Err(e) = self.fire() {
            tracing::error!("cannot release an armed command list: {e}");
        }
        // A lost device never finishes; go on then, as CommandList's drop does.
        match self
            .gpu
            .wait_for(Ticket::Lane(self.lane, self.value), Duration::MAX)
        {
            Ok(true) => {
                self.gpu
                    .lanes
                    .free
                    .lock()
                    .expect("lanes lock")
                    .push((self.lane, self.value));
            }
            Ok(false) | Err(_) => {
                tracing::error!("an armed command list did not finish; its lane is retired");
            }
        }
        self.list.armed.store(false, Ordering::Release);
    }
}
