//! One opened GPU: its device, queue, timeline, allocator and pipelines.

use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use gpu_allocator::{AllocationSizes, AllocatorDebugSettings};

use super::buffer::BufferInner;
use super::error::{VulkanError, vk_error};
use super::gate::Arming;
use super::info::{Candidate, Features, GpuInfo};
use super::instance::Instance;
use super::pipeline::Pipelines;

/// One GPU. Shared as `Arc<Gpu>`; every method takes `&self` and may be called from any
/// thread.
pub struct Gpu {
    pub(crate) info: GpuInfo,
    pub(crate) device: ash::Device,
    pub(crate) queue: Mutex<QueueState>,
    pub(crate) queue_family: u32,
    /// Signalled with consecutive values, one per submission, in submission order.
    pub(crate) timeline: vk::Semaphore,
    /// Highest value handed to the queue.
    pub(crate) submitted: AtomicU64,
    /// Highest value the host has seen reached; every later submission waits for it on the
    /// GPU, which is what makes the results of completed work visible to later work.
    pub(crate) observed: AtomicU64,
    pub(crate) lost: AtomicBool,
    pub(crate) allocator: ManuallyDrop<Mutex<Allocator>>,
    pub(crate) pipelines: Pipelines,
    /// Live buffers by device address: `(size, buffer)`. Lets `record` resolve a dispatch's
    /// raw addresses to the buffers it must keep alive, and refuse addresses of nothing.
    pub(crate) buffers: Mutex<BTreeMap<u64, (u64, Weak<BufferInner>)>>,
    pub(crate) max_allocation: u64,
    pub(crate) spin_default: Duration,
    /// Lets `&self` methods hand out owners (buffers, command lists) that keep this alive.
    pub(crate) me: Weak<Gpu>,
    /// The gate of armed command lists, and the one armed now (gate.rs).
    pub(crate) arming: Arming,
    /// The property flags of each memory type, by index (for imported host memory).
    pub(crate) memory_types: Vec<vk::MemoryPropertyFlags>,
    /// Declared last so that the instance is released after the device.
    instance: Arc<Instance>,
}

pub(crate) struct QueueState {
    pub queue: vk::Queue,
    /// The value the next submission signals.
    pub next: u64,
}

impl Gpu {
    pub(crate) fn new(
        instance: Arc<Instance>,
        c: Candidate,
        spin: Option<Duration>,
    ) -> Result<Arc<Gpu>, VulkanError> {
        let device = create_device(&instance, &c)?;
        // From here on, `Partial` destroys what was made if a later step fails.
        let mut partial = Partial {
            device: Some(device),
            timeline: vk::Semaphore::null(),
            gate: vk::Semaphore::null(),
        };
        let device = partial.device.as_ref().expect("just set");

        let mut type_info = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
        // SAFETY: the device is live and timeline semaphores are enabled on it.
        partial.timeline = unsafe { device.create_semaphore(&info, None) }
            .map_err(vk_error("vkCreateSemaphore"))?;
        // SAFETY: as above.
        partial.gate = unsafe { device.create_semaphore(&info, None) }
            .map_err(vk_error("vkCreateSemaphore"))?;

        // SAFETY: the device was created with at least one queue in this family.
        let queue = unsafe { device.get_device_queue(c.queue_family, 0) };

        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.instance.clone(),
            device: device.clone(),
            physical_device: c.physical,
            debug_settings: AllocatorDebugSettings::default(),
            buffer_device_address: true,
            // Small first blocks: a model's many small tensors share them, and a test process
            // with a few buffers does not reserve hundreds of MiB.
            allocation_sizes: AllocationSizes::new(8 << 20, 8 << 20)
                .with_max_device_memblock_size(256 << 20)
                .with_max_host_memblock_size(64 << 20),
        })
        .map_err(|e| VulkanError::invalid(format!("cannot create the GPU allocator: {e}")))?;

        let pipelines = Pipelines::new(device, c.info.max_push_constants)?;
        // SAFETY: the physical device belongs to this live instance.
        let memory = unsafe {
            instance
                .instance
                .get_physical_device_memory_properties(c.physical)
        };
        let memory_types = memory.memory_types[..memory.memory_type_count as usize]
            .iter()
            .map(|t| t.property_flags)
            .collect();
        let spin_default = if c.info.is_cpu {
            // A CPU device runs on the host's cores: spinning only steals them from it.
            Duration::ZERO
        } else {
            spin.unwrap_or(Duration::from_micros(100))
        };
        let device = partial.device.take().expect("set above");
        let timeline = std::mem::replace(&mut partial.timeline, vk::Semaphore::null());
        let gate = std::mem::replace(&mut partial.gate, vk::Semaphore::null());
        tracing::info!(
            "opened Vulkan device {} ({}, {}, Vulkan {})",
            c.info.name,
            c.info.vendor,
            c.info.driver,
            c.info.api_version
        );
        Ok(Arc::new_cyclic(|me| Gpu {
            info: c.info,
            device,
            queue: Mutex::new(QueueState { queue, next: 1 }),
            queue_family: c.queue_family,
            timeline,
            submitted: AtomicU64::new(0),
            observed: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            allocator: ManuallyDrop::new(Mutex::new(allocator)),
            pipelines,
            buffers: Mutex::new(BTreeMap::new()),
            max_allocation: c.max_allocation,
            spin_default,
            me: me.clone(),
            arming: Arming::new(gate),
            memory_types,
            instance,
        }))
    }

    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// How long [`Gpu::wait_spin`] should poll before sleeping: zero on CPU devices, which
    /// share the host's cores, and 100 us on real GPUs.
    pub fn spin_default(&self) -> Duration {
        self.spin_default
    }

    /// An owning handle to this GPU (it is always owned by an `Arc`).
    pub(crate) fn instance(&self) -> &Instance {
        &self.instance
    }

    pub fn arc(&self) -> Arc<Gpu> {
        self.me
            .upgrade()
            .expect("a Gpu is only reachable through a live Arc")
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({}: {})", self.info.index, self.info.name)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: buffers and command lists hold an Arc of this Gpu, so none is left; waiting
        // for the device to go idle guarantees nothing still runs. Objects go child first:
        // pipelines, the semaphore and the allocator's memory blocks, then the device.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.pipelines.destroy(&self.device);
            self.device.destroy_semaphore(self.timeline, None);
            self.device.destroy_semaphore(self.arming.gate, None);
            ManuallyDrop::drop(&mut self.allocator);
            self.device.destroy_device(None);
        }
    }
}

/// Cleans up a half-built Gpu.
struct Partial {
    device: Option<ash::Device>,
    timeline: vk::Semaphore,
    gate: vk::Semaphore,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(device) = self.device.take() {
            // SAFETY: nothing was submitted; the semaphores (when made) are this device's
            // children.
            unsafe {
                for s in [self.timeline, self.gate] {
                    if s != vk::Semaphore::null() {
                        device.destroy_semaphore(s, None);
                    }
                }
                device.destroy_device(None);
            }
        }
    }
}

/// Opens the device with one queue.
fn create_device(instance: &Instance, c: &Candidate) -> Result<ash::Device, VulkanError> {
    let f: Features = c.features;
    let b = |x: bool| if x { vk::TRUE } else { vk::FALSE };

    let core = vk::PhysicalDeviceFeatures::default()
        .shader_int64(true)
        .shader_int16(f.shader_int16)
        .shader_float64(f.shader_float64);
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default()
        .storage_buffer16_bit_access(f.storage_buffer_16bit);
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
        .buffer_device_address(true)
        .timeline_semaphore(true)
        .scalar_block_layout(true)
        .shader_float16(f.shader_float16)
        .shader_int8(f.shader_int8)
        .storage_buffer8_bit_access(f.storage_buffer_8bit)
        .vulkan_memory_model(f.vulkan_memory_model)
        .vulkan_memory_model_device_scope(f.vulkan_memory_model_device_scope)
        .shader_subgroup_extended_types(f.subgroup_extended_types);
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    if let Some(v13) = f.v13 {
        f13.subgroup_size_control = b(v13.subgroup_size_control);
        f13.compute_full_subgroups = b(v13.compute_full_subgroups);
        f13.maintenance4 = b(v13.maintenance4);
        f13.shader_integer_dot_product = b(v13.integer_dot_product);
    }
    let mut fcoop =
        vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .features(core)
        .push_next(&mut f11)
        .push_next(&mut f12);
    if f.v13.is_some() {
        f2 = f2.push_next(&mut f13);
    }
    if f.cooperative_matrix {
        f2 = f2.push_next(&mut fcoop);
    }
    let mut fcoop2 = super::coop::Coopmat2Features::needed();
    if f.coopmat2 {
        f2 = f2.push_next(&mut fcoop2);
    }
    let mut fbf16 = super::coop::Bfloat16Features::needed();
    if f.bf16 {
        f2 = f2.push_next(&mut fbf16);
    }

    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(c.queue_family)
        .queue_priorities(&priorities)];
    let extensions: Vec<_> = c.extensions.iter().map(|e| e.as_ptr()).collect();
    let create = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&extensions)
        .push_next(&mut f2);
    // SAFETY: every feature enabled was reported present by `inspect`, every extension is
    // listed by the device, and all structs outlive the call.
    unsafe { instance.instance.create_device(c.physical, &create, None) }
        .map_err(vk_error("vkCreateDevice"))
}
