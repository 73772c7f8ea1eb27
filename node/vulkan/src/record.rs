//! Recording: a list of steps becomes one primary command buffer, replayed many times.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;

use vkml_shaders::{Kernel, Shader};

use super::buffer::{BufferInner, GpuBuffer};
use super::error::{VulkanError, vk_error};
use super::gpu::Gpu;

/// One recorded command.
///
/// Dispatches name their buffers by raw device address (a buffer's [`GpuBuffer::address`]
/// plus an offset, for views), as the shaders see them; copies and fills name buffers by
/// reference plus offsets. Either way [`Gpu::record`] checks every address and range against
/// the live buffers of the GPU and the resulting [`CommandList`] keeps those buffers alive.
#[derive(Debug, Clone)]
pub enum Step<'a> {
    /// Runs `kernel` over `groups` workgroups, with push constants laid out as each of
    /// `addrs` as a u64, then each of `params` as a u32: as many of each as the kernel's
    /// push-constant block holds (checked when recording). [`Step::dispatch`] builds one from
    /// a kernel's typed buffers and parameters.
    Dispatch {
        kernel: Kernel,
        addrs: Vec<u64>,
        params: Vec<u32>,
        groups: [u32; 3],
    },
    /// Copies `bytes` bytes between two buffers of the same GPU (ranges must not overlap).
    Copy {
        src: &'a GpuBuffer,
        src_offset: u64,
        dst: &'a GpuBuffer,
        dst_offset: u64,
        bytes: u64,
    },
    /// Writes the 32-bit `value` repeatedly over `bytes` bytes at `offset`. `offset` must be a
    /// multiple of 4, and so must `bytes` unless the range runs to the end of the buffer.
    Fill {
        dst: &'a GpuBuffer,
        offset: u64,
        bytes: u64,
        value: u32,
    },
    /// Everything before finishes, and its writes are visible, before anything after starts
    /// (compute and transfer). The caller puts barriers only where data flows.
    Barrier,
    /// As [`Step::Barrier`] for execution only: later steps start after earlier ones finish,
    /// but nothing makes earlier writes visible to them, so they may read stale data. For
    /// measuring what the memory half of a barrier costs (the timing bench), never for work
    /// whose results matter.
    ExecutionBarrier,
}

impl Step<'static> {
    /// A dispatch of one of `S`'s kernels over buffers at the device addresses `buffers`.
    pub fn dispatch<S: Shader>(
        kernel: S,
        buffers: S::Buffers<u64>,
        params: S::Params,
        groups: [u32; 3],
    ) -> Step<'static> {
        Step::Dispatch {
            kernel: kernel.kernel(),
            addrs: S::buffer_list(buffers),
            params: S::param_words(&params),
            groups,
        }
    }
}

/// A recorded command buffer, replayable with [`Gpu::submit`]. It keeps every buffer its steps
/// touch alive; dropping it waits for its last submission to finish.
pub struct CommandList {
    pub(crate) gpu: Arc<Gpu>,
    pool: vk::CommandPool,
    pub(crate) cmd: vk::CommandBuffer,
    _keep: Vec<Arc<BufferInner>>,
    /// Timeline value of the last submission (0: never submitted). Also serialises
    /// submissions of this list: a command buffer may not be pending twice.
    pub(crate) last: Mutex<u64>,
    /// Recorded by [`Gpu::record_gated`]: may be armed (gate.rs).
    pub(crate) gated: bool,
    dispatches: usize,
    /// Recorded by [`Gpu::record_timed`]: its timestamps.
    timing: Option<Timing>,
}

/// The timestamps of a timed list: one when it starts and one after each dispatch step.
struct Timing {
    pool: vk::QueryPool,
    count: u32,
    /// Nanoseconds per tick.
    period: f32,
}

impl CommandList {
    /// The GPU this list runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Number of dispatches recorded (those with an empty grid are left out).
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }

    /// For a list from [`Gpu::record_timed`] whose last submission has completed: the
    /// nanoseconds each dispatch step added, in order (one per `Step::Dispatch`, empty grids
    /// included). A dispatch's time runs from the completion of everything before it to its
    /// own, so work that overlapped it is counted where it ended. `None` for other lists, or
    /// when the submission has not completed.
    pub fn dispatch_times(&self) -> Result<Option<Vec<u64>>, VulkanError> {
        let Some(t) = &self.timing else {
            return Ok(None);
        };
        let mut ticks = vec![0u64; t.count as usize];
        // SAFETY: the pool belongs to this list's device and holds `count` queries; without
        // WAIT the call returns NOT_READY rather than blocking when some are not written.
        let got = unsafe {
            self.gpu.device.get_query_pool_results(
                t.pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64,
            )
        };
        match got {
            Ok(()) => Ok(Some(
                ticks
                    .windows(2)
                    .map(|w| (w[1].saturating_sub(w[0]) as f64 * f64::from(t.period)) as u64)
                    .collect(),
            )),
            Err(vk::Result::NOT_READY) => Ok(None),
            Err(e) => Err(vk_error("vkGetQueryPoolResults")(e)),
        }
    }
}

impl std::fmt::Debug for CommandList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CommandList({} dispatches on {:?})",
            self.dispatches, self.gpu
        )
    }
}

impl Drop for CommandList {
    fn drop(&mut self) {
        let last = *self.last.get_mut().unwrap_or_else(|e| e.into_inner());
        if last > 0 {
            // The GPU may still be running it. A lost device never finishes; go on then.
            let _ = self.gpu.wait(last, Duration::MAX);
        }
        // SAFETY: the list's last submission is complete (or the device is lost), so the
        // command buffer is not pending; destroying the pool frees it, and nothing uses the
        // query pool any more.
        unsafe {
            self.gpu.device.destroy_command_pool(self.pool, None);
            if let Some(t) = &self.timing {
                self.gpu.device.destroy_query_pool(t.pool, None);
            }
        }
    }
}

/// The pipeline stage a step runs in; none for barriers and empty steps.
fn stage_of(step: &Step<'_>) -> vk::PipelineStageFlags {
    match step {
        Step::Dispatch { groups, .. } if !groups.contains(&0) => {
            vk::PipelineStageFlags::COMPUTE_SHADER
        }
        Step::Copy { bytes, .. } | Step::Fill { bytes, .. } if *bytes > 0 => {
            vk::PipelineStageFlags::TRANSFER
        }
        _ => vk::PipelineStageFlags::empty(),
    }
}

/// Writes the stages may make.
fn writes_of(stages: vk::PipelineStageFlags) -> vk::AccessFlags {
    let mut a = vk::AccessFlags::empty();
    if stages.contains(vk::PipelineStageFlags::COMPUTE_SHADER) {
        a |= vk::AccessFlags::SHADER_WRITE;
    }
    if stages.contains(vk::PipelineStageFlags::TRANSFER) {
        a |= vk::AccessFlags::TRANSFER_WRITE;
    }
    a
}

/// Reads and writes the stages may make.
fn accesses_of(stages: vk::PipelineStageFlags) -> vk::AccessFlags {
    let mut a = vk::AccessFlags::empty();
    if stages.contains(vk::PipelineStageFlags::COMPUTE_SHADER) {
        a |= vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
    }
    if stages.contains(vk::PipelineStageFlags::TRANSFER) {
        a |= vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE;
    }
    a
}

impl Gpu {
    /// Records `steps` into one command buffer. Pipelines are created here on first use of a
    /// shader; nothing is created or written when the list is later submitted.
    pub fn record(&self, steps: &[Step<'_>]) -> Result<CommandList, VulkanError> {
        self.record_list(steps, false, false)
    }

    /// As [`Gpu::record`], with a timestamp before the first step and after each dispatch,
    /// for profiling ([`CommandList::dispatch_times`]). The timestamps may keep dispatches
    /// that could overlap from overlapping. Fails where the queue writes no timestamps
    /// ([`GpuInfo::timestamp_period`](super::GpuInfo::timestamp_period)).
    pub fn record_timed(&self, steps: &[Step<'_>]) -> Result<CommandList, VulkanError> {
        self.record_list(steps, false, true)
    }

    /// As [`Gpu::record`], for a list that may be armed ([`Gpu::arm`]): it begins with a
    /// barrier that makes the host's writes visible to its steps even when they were made
    /// after the list was queued (a submission makes only earlier writes visible). A disarmed
    /// list runs in full on whatever its inputs hold then (gate.rs): record only steps whose
    /// outputs nobody reads unless this list is submitted or fired again.
    pub fn record_gated(&self, steps: &[Step<'_>]) -> Result<CommandList, VulkanError> {
        self.record_list(steps, true, false)
    }

    fn record_list(
        &self,
        steps: &[Step<'_>],
        gated: bool,
        timed: bool,
    ) -> Result<CommandList, VulkanError> {
        self.check_alive()?;
        let device = &self.device;
        let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(self.queue_family);
        // SAFETY: valid create info on a live device.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }
            .map_err(vk_error("vkCreateCommandPool"))?;
        // From here the list owns the pool, so an error below frees it.
        let mut list = CommandList {
            gpu: self.arc(),
            pool,
            cmd: vk::CommandBuffer::null(),
            _keep: Vec::new(),
            last: Mutex::new(0),
            gated,
            dispatches: 0,
            timing: None,
        };
        if timed {
            list.timing = Some(self.timing_for(steps)?);
        }
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and used by this thread alone.
        list.cmd = unsafe { device.allocate_command_buffers(&alloc) }
            .map_err(vk_error("vkAllocateCommandBuffers"))?[0];
        let begin = vk::CommandBufferBeginInfo::default();
        // SAFETY: a fresh command buffer in the initial state.
        unsafe { device.begin_command_buffer(list.cmd, &begin) }
            .map_err(vk_error("vkBeginCommandBuffer"))?;
        if gated {
            let writes = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::HOST_WRITE)
                .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::TRANSFER_READ)];
            // SAFETY: the command buffer is recording; a global memory barrier from the host
            // stage needs no resources.
            unsafe {
                device.cmd_pipeline_barrier(
                    list.cmd,
                    vk::PipelineStageFlags::HOST,
                    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &writes,
                    &[],
                    &[],
                )
            };
        }

        if let Some(t) = &list.timing {
            // SAFETY: the command buffer is recording; the pool is this device's and holds
            // `count` queries, reset here before the first is written.
            unsafe {
                device.cmd_reset_query_pool(list.cmd, t.pool, 0, t.count);
                device.cmd_write_timestamp(
                    list.cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    t.pool,
                    0,
                );
            }
        }
        let mut recorder = Recorder {
            gpu: self,
            cmd: list.cmd,
            keep: HashMap::new(),
            bound: vk::Pipeline::null(),
            since: vk::PipelineStageFlags::empty(),
            used: vk::PipelineStageFlags::empty(),
            dispatches: 0,
            timestamps: list.timing.as_ref().map(|t| (t.pool, 1)),
        };
        // Stages of the steps between each barrier and the next: a barrier waits only for the
        // kinds of work before it and blocks only the kinds after it (on NVIDIA a barrier that
        // names transfers when only dispatches surround it costs noticeably more).
        let mut after = vec![vk::PipelineStageFlags::empty(); steps.len()];
        let mut acc = vk::PipelineStageFlags::empty();
        for (i, step) in steps.iter().enumerate().rev() {
            after[i] = acc;
            acc = match step {
                Step::Barrier | Step::ExecutionBarrier => vk::PipelineStageFlags::empty(),
                step => acc | stage_of(step),
            };
        }
        for (i, step) in steps.iter().enumerate() {
            recorder
                .step(step, after[i])
                .map_err(|e| prefix(e, &format!("step {i}: ")))?;
        }
        recorder.host_barrier();
        list.dispatches = recorder.dispatches;
        list._keep = recorder.keep.into_values().collect();
        // SAFETY: the command buffer is in the recording state.
        unsafe { device.end_command_buffer(list.cmd) }.map_err(vk_error("vkEndCommandBuffer"))?;
        Ok(list)
    }
}

impl Gpu {
    /// A query pool for a timed list of `steps`: one timestamp at the start, one per dispatch.
    fn timing_for(&self, steps: &[Step<'_>]) -> Result<Timing, VulkanError> {
        let period = self.info.timestamp_period.ok_or_else(|| {
            VulkanError::invalid(format!(
                "{} writes no timestamps on the queue VKML uses: GPU work cannot be timed",
                self.info.name
            ))
        })?;
        let count = 1 + steps
            .iter()
            .filter(|s| matches!(s, Step::Dispatch { .. }))
            .count() as u32;
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(count);
        // SAFETY: valid create info on a live device.
        let pool = unsafe { self.device.create_query_pool(&info, None) }
            .map_err(vk_error("vkCreateQueryPool"))?;
        Ok(Timing {
            pool,
            count,
            period,
        })
    }
}

fn prefix(e: VulkanError, p: &str) -> VulkanError {
    match e {
        VulkanError::Invalid(m) => VulkanError::Invalid(format!("{p}{m}")),
        e => e,
    }
}

struct Recorder<'g> {
    gpu: &'g Gpu,
    cmd: vk::CommandBuffer,
    /// Buffers touched, by their base address.
    keep: HashMap<u64, Arc<BufferInner>>,
    bound: vk::Pipeline,
    /// Stages recorded since the last barrier.
    since: vk::PipelineStageFlags,
    /// Stages recorded in the whole list.
    used: vk::PipelineStageFlags,
    dispatches: usize,
    /// A timed list's query pool and the next query to write.
    timestamps: Option<(vk::QueryPool, u32)>,
}

impl Recorder<'_> {
    /// Records `step`; `next` are the stages of the steps between it and the next barrier.
    fn step(&mut self, step: &Step<'_>, next: vk::PipelineStageFlags) -> Result<(), VulkanError> {
        match step {
            Step::Dispatch {
                kernel,
                addrs,
                params,
                groups,
            } => {
                self.dispatch(*kernel, addrs, params, *groups)?;
                if let Some((pool, next)) = &mut self.timestamps {
                    // SAFETY: the command buffer is recording; the pool holds a query per
                    // dispatch step plus the first (timing_for), reset at the list's start.
                    unsafe {
                        self.gpu.device.cmd_write_timestamp(
                            self.cmd,
                            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                            *pool,
                            *next,
                        )
                    };
                    *next += 1;
                }
                Ok(())
            }
            Step::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                bytes,
            } => self.copy(src, *src_offset, dst, *dst_offset, *bytes),
            Step::Fill {
                dst,
                offset,
                bytes,
                value,
            } => self.fill(dst, *offset, *bytes, *value),
            Step::Barrier | Step::ExecutionBarrier => {
                // Nothing to wait for (the submission's semaphore wait orders the list after
                // earlier work) or nothing to hold back (a later barrier will do it): skip.
                if !self.since.is_empty() && !next.is_empty() {
                    self.barrier(next, matches!(step, Step::Barrier));
                }
                Ok(())
            }
        }
    }

    fn dispatch(
        &mut self,
        kernel: Kernel,
        addrs: &[u64],
        params: &[u32],
        groups: [u32; 3],
    ) -> Result<(), VulkanError> {
        let gpu = self.gpu;
        let shader = kernel.name();
        let push_size = gpu.pipelines.push_size as usize;
        let bytes = 8 * addrs.len() + 4 * params.len();
        if addrs.len() != kernel.buffers() as usize || bytes != kernel.push_bytes() as usize {
            return Err(VulkanError::invalid(format!(
                "dispatch of '{shader}' with {} addresses and {} parameter words; the kernel \
                 takes {} addresses and {} bytes of push constants (build dispatches with \
                 Step::dispatch)",
                addrs.len(),
                params.len(),
                kernel.buffers(),
                kernel.push_bytes()
            )));
        }
        if bytes > push_size {
            return Err(VulkanError::invalid(format!(
                "dispatch of '{shader}' needs {bytes} bytes of push constants ({} addresses, {} \
                 params); this device allows {push_size}",
                addrs.len(),
                params.len()
            )));
        }
        let max = gpu.info.max_workgroup_count;
        if (0..3).any(|i| groups[i] > max[i]) {
            return Err(VulkanError::invalid(format!(
                "dispatch of '{shader}' over {groups:?} workgroups exceeds this device's limit \
                 {max:?} (use vkml_shaders::groups_1d for large 1-D launches)"
            )));
        }
        let pipeline = gpu.pipelines.get(&gpu.device, kernel)?;
        let mut push = [0u8; 256];
        for (i, &a) in addrs.iter().enumerate() {
            let (buffer, _) = gpu.buffer_at(a).ok_or_else(|| {
                VulkanError::invalid(format!(
                    "dispatch of '{shader}': address {a:#x} (buffer {i}) is not inside any live \
                     buffer of {}",
                    gpu.info.name
                ))
            })?;
            self.keep.entry(buffer.address).or_insert(buffer);
            push[8 * i..8 * i + 8].copy_from_slice(&a.to_le_bytes());
        }
        let base = 8 * addrs.len();
        for (i, &p) in params.iter().enumerate() {
            push[base + 4 * i..base + 4 * i + 4].copy_from_slice(&p.to_le_bytes());
        }
        if groups.contains(&0) {
            return Ok(());
        }
        let device = &gpu.device;
        // SAFETY: the command buffer is recording; the pipeline and layout belong to this
        // device and live as long as it; the push range lies within the layout's range
        // (checked above); every address pushed lies in a buffer this list keeps alive.
        unsafe {
            if pipeline != self.bound {
                device.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
                self.bound = pipeline;
            }
            if bytes > 0 {
                device.cmd_push_constants(
                    self.cmd,
                    gpu.pipelines.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &push[..bytes],
                );
            }
            device.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
        }
        self.mark(vk::PipelineStageFlags::COMPUTE_SHADER);
        self.dispatches += 1;
        Ok(())
    }

    /// Checks that `buffer` belongs to this GPU and holds [offset, offset + bytes).
    fn check_range(
        &mut self,
        what: &str,
        buffer: &GpuBuffer,
        offset: u64,
        bytes: u64,
    ) -> Result<(), VulkanError> {
        if !std::ptr::eq(Arc::as_ptr(&buffer.inner.gpu), self.gpu) {
            return Err(VulkanError::invalid(format!(
                "{what} buffer '{}' belongs to another GPU",
                buffer.name()
            )));
        }
        if offset
            .checked_add(bytes)
            .is_none_or(|end| end > buffer.size())
        {
            return Err(VulkanError::invalid(format!(
                "{what} range of {bytes} bytes at offset {offset} is outside buffer '{}' of {} \
                 bytes",
                buffer.name(),
                buffer.size()
            )));
        }
        self.keep
            .entry(buffer.address())
            .or_insert_with(|| buffer.inner.clone());
        Ok(())
    }

    fn copy(
        &mut self,
        src: &GpuBuffer,
        src_offset: u64,
        dst: &GpuBuffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<(), VulkanError> {
        self.check_range("copy source", src, src_offset, bytes)?;
        self.check_range("copy destination", dst, dst_offset, bytes)?;
        let overlap = src_offset < dst_offset + bytes && dst_offset < src_offset + bytes;
        if Arc::ptr_eq(&src.inner, &dst.inner) && overlap {
            return Err(VulkanError::invalid(format!(
                "copy within buffer '{}' between overlapping ranges",
                src.name()
            )));
        }
        if bytes == 0 {
            return Ok(());
        }
        let region = vk::BufferCopy {
            src_offset,
            dst_offset,
            size: bytes,
        };
        // SAFETY: recording; both buffers are this device's, kept alive by the list, and the
        // ranges were checked to lie inside them and not to overlap.
        unsafe {
            self.gpu
                .device
                .cmd_copy_buffer(self.cmd, src.inner.buffer, dst.inner.buffer, &[region])
        };
        self.mark(vk::PipelineStageFlags::TRANSFER);
        Ok(())
    }

    fn fill(
        &mut self,
        dst: &GpuBuffer,
        offset: u64,
        bytes: u64,
        value: u32,
    ) -> Result<(), VulkanError> {
        self.check_range("fill", dst, offset, bytes)?;
        let to_end = offset + bytes == dst.size();
        if !offset.is_multiple_of(4) || (!bytes.is_multiple_of(4) && !to_end) {
            return Err(VulkanError::invalid(format!(
                "fill of {bytes} bytes at offset {offset} in buffer '{}': offset and size must \
                 be multiples of 4 (the size may be anything when the fill runs to the end)",
                dst.name()
            )));
        }
        if bytes == 0 {
            return Ok(());
        }
        // To the end: the Vulkan buffer is padded to whole words, so filling all of it covers
        // a ragged tail too.
        let size = if to_end { vk::WHOLE_SIZE } else { bytes };
        // SAFETY: recording; the buffer is this device's and kept alive; offset is 4-aligned
        // and the range lies inside it.
        unsafe {
            self.gpu
                .device
                .cmd_fill_buffer(self.cmd, dst.inner.buffer, offset, size, value)
        };
        self.mark(vk::PipelineStageFlags::TRANSFER);
        Ok(())
    }

    fn mark(&mut self, stage: vk::PipelineStageFlags) {
        self.since |= stage;
        self.used |= stage;
    }

    fn barrier(&mut self, next: vk::PipelineStageFlags, memory: bool) {
        let barrier = if memory {
            vk::MemoryBarrier::default()
                .src_access_mask(writes_of(self.since))
                .dst_access_mask(accesses_of(next))
        } else {
            vk::MemoryBarrier::default()
        };
        // SAFETY: recording; a global memory barrier between stages the queue supports (both
        // masks non-empty, checked by the caller).
        unsafe {
            self.gpu.device.cmd_pipeline_barrier(
                self.cmd,
                self.since,
                next,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
        self.since = vk::PipelineStageFlags::empty();
    }

    /// Makes the list's writes visible to host reads once its completion is observed (a
    /// semaphore signal alone only makes them available to the device).
    fn host_barrier(&mut self) {
        if self.used.is_empty() {
            return;
        }
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(writes_of(self.used))
            .dst_access_mask(vk::AccessFlags::HOST_READ);
        // SAFETY: recording; a global memory barrier towards the host stage.
        unsafe {
            self.gpu.device.cmd_pipeline_barrier(
                self.cmd,
                self.used,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }
}
