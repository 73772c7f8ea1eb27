//! Execution: submitting command lists and waiting on the GPU's timeline.
//!
//! Each submission signals the next value of the GPU's one timeline semaphore; values are
//! handed out under the queue lock, so they signal in order and "value v reached" means every
//! submission up to v is complete.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ash::vk;

use super::error::{VulkanError, vk_error};
use super::gpu::Gpu;
use super::record::CommandList;

impl Gpu {
    pub(crate) fn check_alive(&self) -> Result<(), VulkanError> {
        if self.lost.load(Ordering::Relaxed) {
            Err(VulkanError::DeviceLost)
        } else {
            Ok(())
        }
    }

    pub(crate) fn fail(&self, call: &'static str) -> impl Fn(vk::Result) -> VulkanError + '_ {
        move |r| {
            if r == vk::Result::ERROR_DEVICE_LOST {
                self.lost.store(true, Ordering::Relaxed);
                tracing::error!("Vulkan device {} was lost", self.info.name);
            }
            vk_error(call)(r)
        }
    }

    /// Queues `list` and returns the timeline value that signals its completion.
    ///
    /// On the GPU the list waits for every submission whose completion any thread has
    /// already observed (through [`Gpu::wait`] or [`Gpu::completed`]), which makes those
    /// results visible to it; for a dependency not yet observed use [`Gpu::submit_after`].
    /// Submitting a list whose previous submission still runs first waits for that one. A
    /// list armed on this GPU (gate.rs), this one or another, is disarmed first.
    pub fn submit(&self, list: &CommandList) -> Result<u64, VulkanError> {
        self.submit_after(list, 0)
    }

    /// As [`Gpu::submit`], and the list also waits on the GPU, not the host, for the
    /// submission that signals `after` (a value returned by an earlier submit) and everything
    /// before it.
    pub fn submit_after(&self, list: &CommandList, after: u64) -> Result<u64, VulkanError> {
        if !std::ptr::eq(&**list.gpu(), self) {
            return Err(VulkanError::invalid(format!(
                "command list recorded on {} submitted to {}",
                list.gpu().info.name,
                self.info.name
            )));
        }
        self.check_alive()?;
        if after > self.submitted.load(Ordering::Acquire) {
            // Waiting on the one queue for a value nothing queued will signal would hang it.
            return Err(VulkanError::invalid(format!(
                "cannot wait for timeline value {after}: it was never submitted"
            )));
        }
        // Held until the submission is queued, so nothing gets armed ahead of it.
        let _arming = self.lock_and_disarm()?;
        let mut last = list.last.lock().expect("command list lock");
        if *last > self.observed.load(Ordering::Acquire) {
            // A command buffer may not be pending twice (no SIMULTANEOUS_USE: that flag slows
            // some drivers down), and a rerun would race with itself on its buffers anyway.
            self.wait_spin(*last, self.spin_default, Duration::MAX)?;
        }
        let wait_value = after.max(self.observed.load(Ordering::Acquire));
        let waits = [(self.timeline, wait_value)];
        let waits = if wait_value > 0 { &waits[..] } else { &[] };
        // SAFETY: the list is this GPU's (checked above) and not pending (checked under its
        // lock, held here until `last` is updated); the wait value was submitted earlier or
        // already reached.
        let value = unsafe { self.queue_list(list, waits) }?;
        *last = value;
        Ok(value)
    }

    /// Queues `list`'s command buffer behind `waits` (semaphore, value), signalling the
    /// timeline's next value, which it returns; the caller records it as the list's `last`.
    ///
    /// # Safety
    /// `list` belongs to this GPU and is not pending (its last submission was seen complete,
    /// under its lock, which the caller holds until it records the returned value); every wait
    /// is on a timeline value that was submitted earlier or that only the host signals, and
    /// will be.
    pub(crate) unsafe fn queue_list(
        &self,
        list: &CommandList,
        waits: &[(vk::Semaphore, u64)],
    ) -> Result<u64, VulkanError> {
        let semaphores: Vec<vk::Semaphore> = waits.iter().map(|w| w.0).collect();
        let wait_values: Vec<u64> = waits.iter().map(|w| w.1).collect();
        let stages = vec![
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
            waits.len()
        ];
        let cmds = [list.cmd];
        let signals = [self.timeline];
        let mut queue = self.queue.lock().expect("queue lock");
        let value = queue.next;
        let signal_values = [value];
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&semaphores)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signals)
            .push_next(&mut timeline_info);
        // SAFETY: the queue is used under its lock; the command buffer is executable and not
        // pending, and the waits will be signalled (the caller's contract); it and every buffer
        // it uses are kept alive by the list, which waits for this value before it is
        // destroyed; the signal value is larger than any submitted before; all structs outlive
        // the call.
        unsafe {
            self.device
                .queue_submit(queue.queue, &[submit], vk::Fence::null())
                .map_err(self.fail("vkQueueSubmit"))?;
        }
        queue.next += 1;
        self.submitted.store(value, Ordering::Release);
        Ok(value)
    }

    /// The highest timeline value reached, without blocking.
    pub fn completed(&self) -> Result<u64, VulkanError> {
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let value = unsafe { self.device.get_semaphore_counter_value(self.timeline) }
            .map_err(self.fail("vkGetSemaphoreCounterValue"))?;
        self.observed.fetch_max(value, Ordering::AcqRel);
        Ok(value)
    }

    /// Blocks until the timeline reaches `value`: `Ok(true)`, or `Ok(false)` after `timeout`.
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<bool, VulkanError> {
        if value <= self.observed.load(Ordering::Acquire) {
            return Ok(true);
        }
        self.check_alive()?;
        if value > self.submitted.load(Ordering::Acquire) {
            return Err(VulkanError::invalid(format!(
                "cannot wait for timeline value {value}: it was never submitted"
            )));
        }
        let semaphores = [self.timeline];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: a live timeline semaphore of this device; the value was submitted.
        match unsafe { self.device.wait_semaphores(&info, nanos) } {
            Ok(()) => {
                self.observed.fetch_max(value, Ordering::AcqRel);
                Ok(true)
            }
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(r) => Err(self.fail("vkWaitSemaphores")(r)),
        }
    }

    /// As [`Gpu::wait`], but first polls the timeline for up to `spin` (cheaper wake-up than
    /// sleeping in the driver for short waits). See [`Gpu::spin_default`].
    pub fn wait_spin(
        &self,
        value: u64,
        spin: Duration,
        timeout: Duration,
    ) -> Result<bool, VulkanError> {
        if value <= self.observed.load(Ordering::Acquire) {
            return Ok(true);
        }
        if !spin.is_zero() {
            let start = Instant::now();
            loop {
                if self.completed()? >= value {
                    return Ok(true);
                }
                let elapsed = start.elapsed();
                if elapsed >= spin.min(timeout) {
                    break;
                }
                std::hint::spin_loop();
            }
            return self.wait(value, timeout.saturating_sub(start.elapsed()));
        }
        self.wait(value, timeout)
    }
}
