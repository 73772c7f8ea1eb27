//! Buffers: memory reached by shaders through its device address.

use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::error::{VulkanError, vk_error};
use super::gpu::Gpu;

/// Where a buffer lives, which decides who can touch it fast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryUse {
    /// Device-local; the host cannot map it. Weights and intermediates.
    Device,
    /// Host-visible and write-combined, device-local where the device offers that (resizable
    /// BAR, unified memory): the host writes, the GPU reads. Inputs and tables.
    Upload,
    /// Host-visible and cached: the GPU writes (usually by a copy), the host reads. Outputs.
    Readback,
    /// Host memory of a [`HostBlock`], imported ([`Gpu::import_host`]): every GPU that imports
    /// the block reaches the same bytes, so one GPU's copy into it is read by another's with
    /// no copy by the CPU.
    Host,
}

/// Page-aligned, zeroed host memory for GPUs to import ([`Gpu::import_host`]): a staging area
/// that two GPUs of one process share. Freed when the last buffer importing it is dropped.
pub struct HostBlock {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: the block is plain memory owned by this value; all access goes through
// `GpuBuffer::read` / `write`, which serialise host access per buffer, or through the GPUs.
unsafe impl Send for HostBlock {}
// SAFETY: as above.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// At least `bytes` bytes, rounded up to `align` (a power of two: the largest
    /// [`super::GpuInfo::host_import_alignment`] of the GPUs that will import it).
    pub fn new(bytes: u64, align: u64) -> Result<Arc<HostBlock>, VulkanError> {
        let align = align.max(4096);
        let size = bytes
            .max(1)
            .checked_next_multiple_of(align)
            .and_then(|s| usize::try_from(s).ok());
        let layout = size
            .zip(usize::try_from(align).ok())
            .and_then(|(s, a)| std::alloc::Layout::from_size_align(s, a).ok())
            .ok_or_else(|| {
                VulkanError::invalid(format!(
                    "a host block of {bytes} bytes aligned to {align} is not possible"
                ))
            })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).ok_or(VulkanError::OutOfMemory {
            bytes,
            name: "host block".into(),
        })?;
        Ok(Arc::new(HostBlock { ptr, layout }))
    }

    /// Its size in bytes (what was asked for, rounded up to the alignment).
    pub fn size(&self) -> u64 {
        self.layout.size() as u64
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; every buffer importing the block holds
        // an Arc of it and has destroyed its memory object before that Arc is dropped.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// What backs a buffer.
enum Backing {
    /// An allocation of the GPU's allocator: Some until dropped.
    Allocated(Option<Allocation>),
    /// A host block imported as a memory object of its own.
    Imported(vk::DeviceMemory, Arc<HostBlock>),
}

/// Every buffer's alignment, so views at 256-byte offsets are 256-byte aligned in memory too.
const ALIGN: u64 = 256;

/// A buffer on one GPU, freed when dropped (or, if a command list still uses it, when that
/// list is dropped). Shaders reach it through [`GpuBuffer::address`].
pub struct GpuBuffer {
    pub(crate) inner: Arc<BufferInner>,
}

pub(crate) struct BufferInner {
    pub gpu: Arc<Gpu>,
    pub buffer: vk::Buffer,
    pub address: u64,
    /// The size asked for; the Vulkan buffer may be a few bytes larger.
    pub size: u64,
    pub usage: MemoryUse,
    pub name: String,
    backing: Backing,
    /// Serialises host reads and writes, so two host threads never race on the mapping.
    host: Mutex<()>,
}

impl Gpu {
    /// A buffer of `bytes` bytes (zero is allowed and gives a small valid buffer), usable as a
    /// storage buffer, copy source and destination, and by device address.
    pub fn create_buffer(
        &self,
        bytes: u64,
        usage: MemoryUse,
        name: &str,
    ) -> Result<GpuBuffer, VulkanError> {
        self.check_alive()?;
        let oom = || VulkanError::OutOfMemory {
            bytes,
            name: name.to_string(),
        };
        // Asking the driver for more than a heap holds can crash some drivers rather than fail.
        if bytes > self.max_allocation {
            return Err(oom());
        }
        // Whole 16-byte words: a fill of the full buffer then covers every byte.
        let vk_size = bytes.div_ceil(16).max(1) * 16;
        let info = vk::BufferCreateInfo::default()
            .size(vk_size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST
                    | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let device = &self.device;
        // SAFETY: valid create info on a live device.
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(|r| match r {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => oom(),
            r => vk_error("vkCreateBuffer")(r),
        })?;
        // SAFETY: `buffer` was just created on this device.
        let mut requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        requirements.alignment = requirements.alignment.max(ALIGN);
        let location = match usage {
            MemoryUse::Device => MemoryLocation::GpuOnly,
            MemoryUse::Upload => MemoryLocation::CpuToGpu,
            MemoryUse::Readback => MemoryLocation::GpuToCpu,
            MemoryUse::Host => {
                // SAFETY: the buffer has no memory bound and was never used.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(VulkanError::invalid(format!(
                    "'{name}': host memory is imported (Gpu::import_host), not allocated"
                )));
            }
        };
        let allocated =
            self.allocator
                .lock()
                .expect("allocator lock")
                .allocate(&AllocationCreateDesc {
                    name,
                    requirements,
                    location,
                    linear: true,
                    allocation_scheme: AllocationScheme::GpuAllocatorManaged,
                });
        let allocation = match allocated {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer has no memory bound and was never used.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(match e {
                    gpu_allocator::AllocationError::OutOfMemory => oom(),
                    e => VulkanError::invalid(format!("cannot allocate '{name}': {e}")),
                });
            }
        };
        // SAFETY: the allocation comes from this device's allocator, is large and aligned
        // enough for the buffer's requirements, and the buffer has no memory yet.
        let bound =
            unsafe { device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) };
        if let Err(r) = bound {
            // SAFETY: the buffer was never used; the allocation goes back to its allocator.
            unsafe { device.destroy_buffer(buffer, None) };
            let _ = self
                .allocator
                .lock()
                .expect("allocator lock")
                .free(allocation);
            return Err(vk_error("vkBindBufferMemory")(r));
        }
        Ok(self.register(
            buffer,
            bytes,
            usage,
            name,
            Backing::Allocated(Some(allocation)),
        ))
    }

    /// `block` imported as a buffer of this GPU ([`MemoryUse::Host`]), which the host reads
    /// and writes like a readback buffer. Needs [`super::GpuInfo::host_import_alignment`].
    pub fn import_host(
        &self,
        block: &Arc<HostBlock>,
        name: &str,
    ) -> Result<GpuBuffer, VulkanError> {
        self.check_alive()?;
        let Some(align) = self.info.host_import_alignment else {
            return Err(VulkanError::invalid(format!(
                "{} cannot import host memory (no VK_EXT_external_memory_host)",
                self.info.name
            )));
        };
        if !(block.ptr.as_ptr() as u64).is_multiple_of(align) || !block.size().is_multiple_of(align)
        {
            return Err(VulkanError::invalid(format!(
                "'{name}': host block not aligned to {align} bytes"
            )));
        }
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default()
            .size(block.size())
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST
                    | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        let device = &self.device;
        // SAFETY: valid create info on a live device that enabled the extension.
        let buffer =
            unsafe { device.create_buffer(&info, None) }.map_err(vk_error("vkCreateBuffer"))?;
        match self.bind_host(buffer, block) {
            Ok(memory) => Ok(self.register(
                buffer,
                block.size(),
                MemoryUse::Host,
                name,
                Backing::Imported(memory, block.clone()),
            )),
            Err(e) => {
                // SAFETY: the buffer was never used and has no memory bound.
                unsafe { device.destroy_buffer(buffer, None) };
                Err(e)
            }
        }
    }

    /// Imports `block` as a memory object and binds it to `buffer`.
    fn bind_host(
        &self,
        buffer: vk::Buffer,
        block: &HostBlock,
    ) -> Result<vk::DeviceMemory, VulkanError> {
        let device = &self.device;
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let ext = ash::ext::external_memory_host::Device::new(&self.instance().instance, device);
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the extension is enabled on this device, the pointer is a live allocation
        // aligned as the device asks.
        unsafe {
            (ext.fp().get_memory_host_pointer_properties_ext)(
                device.handle(),
                handle,
                block.ptr.as_ptr().cast(),
                &mut props,
            )
        }
        .result()
        .map_err(vk_error("vkGetMemoryHostPointerPropertiesEXT"))?;
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        let allowed = props.memory_type_bits & requirements.memory_type_bits;
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let type_index = (0..32u32)
            .filter(|&i| allowed & (1 << i) != 0)
            .find(|&i| {
                self.memory_types
                    .get(i as usize)
                    .is_some_and(|f| f.contains(wanted))
            })
            .ok_or_else(|| {
                VulkanError::invalid(format!(
                    "{} offers no host-coherent memory type for imported host memory",
                    self.info.name
                ))
            })?;
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(handle)
            .host_pointer(block.ptr.as_ptr().cast());
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(block.size())
            .memory_type_index(type_index)
            .push_next(&mut import)
            .push_next(&mut flags);
        // SAFETY: the import names a live host allocation of `block.size()` bytes that
        // outlives the memory object (the buffer holds the block's Arc).
        let memory = unsafe { device.allocate_memory(&alloc, None) }
            .map_err(vk_error("vkAllocateMemory (host import)"))?;
        // SAFETY: memory of an allowed type, as large as the buffer, bound once.
        if let Err(r) = unsafe { device.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: nothing uses the memory yet.
            unsafe { device.free_memory(memory, None) };
            return Err(vk_error("vkBindBufferMemory")(r));
        }
        Ok(memory)
    }

    /// Wraps a bound buffer: its device address, and its entry in the registry.
    fn register(
        &self,
        buffer: vk::Buffer,
        bytes: u64,
        usage: MemoryUse,
        name: &str,
        backing: Backing,
    ) -> GpuBuffer {
        let address_info = vk::BufferDeviceAddressInfo::default().buffer(buffer);
        // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage and bound memory.
        let address = unsafe { self.device.get_buffer_device_address(&address_info) };
        let inner = Arc::new(BufferInner {
            gpu: self.arc(),
            buffer,
            address,
            size: bytes,
            usage,
            name: name.to_string(),
            backing,
            host: Mutex::new(()),
        });
        self.buffers
            .lock()
            .expect("buffer registry lock")
            .insert(address, (bytes, Arc::downgrade(&inner)));
        GpuBuffer { inner }
    }

    /// The live buffer of this GPU holding `address` (its end included, for empty views),
    /// with the offset of `address` inside it.
    pub(crate) fn buffer_at(&self, address: u64) -> Option<(Arc<BufferInner>, u64)> {
        let registry = self.buffers.lock().expect("buffer registry lock");
        let (&start, (size, weak)) = registry.range(..=address).next_back()?;
        let offset = address - start;
        if offset > *size {
            return None;
        }
        Some((weak.upgrade()?, offset))
    }
}

impl GpuBuffer {
    /// The size asked for, in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// The device address shaders use (GL_EXT_buffer_reference).
    pub fn address(&self) -> u64 {
        self.inner.address
    }

    pub fn usage(&self) -> MemoryUse {
        self.inner.usage
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The GPU this buffer lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.inner.gpu
    }

    /// Copies `data` into the buffer at `offset`. Only for `Upload` and `Readback` buffers.
    /// Writing while the GPU reads the same bytes gives the GPU unspecified values.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VulkanError> {
        let ptr = self.inner.host_range(offset, data.len(), "write")?;
        let _guard = self.inner.host.lock().expect("buffer host lock");
        // SAFETY: `host_range` checked that [offset, offset + len) lies inside the mapped,
        // host-coherent allocation, which stays mapped while `self` lives; `data` cannot
        // overlap it (it is a Rust slice, the mapping is driver memory); the lock keeps other
        // host threads off the buffer meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        Ok(())
    }

    /// Copies bytes at `offset` into `out`. Only for `Upload` and `Readback` buffers; wait
    /// for the GPU work that writes them first.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), VulkanError> {
        let ptr = self.inner.host_range(offset, out.len(), "read")?;
        let _guard = self.inner.host.lock().expect("buffer host lock");
        // SAFETY: as in `write`, with the copy going the other way.
        unsafe { std::ptr::copy_nonoverlapping(ptr, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

impl BufferInner {
    /// The mapped address of `len` bytes at `offset`, after checking both.
    fn host_range(&self, offset: u64, len: usize, what: &str) -> Result<*mut u8, VulkanError> {
        // Device memory is refused even where it happens to be mapped (lavapipe, unified
        // memory), so code that works in CI also works on a discrete GPU.
        let mapped = match &self.backing {
            _ if self.usage == MemoryUse::Device => None,
            Backing::Allocated(a) => a.as_ref().and_then(|a| a.mapped_ptr()),
            Backing::Imported(_, block) => Some(block.ptr.cast()),
        }
        .ok_or_else(|| {
            VulkanError::invalid(format!(
                "cannot {what} buffer '{}' from the host: it is {:?} memory, not mapped",
                self.name, self.usage
            ))
        })?;
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > self.size) {
            return Err(VulkanError::invalid(format!(
                "{what} of {len} bytes at offset {offset} is outside buffer '{}' of {} bytes",
                self.name, self.size
            )));
        }
        // SAFETY: offset + len <= size <= the allocation's size, so the result stays inside
        // the mapping.
        Ok(unsafe { mapped.as_ptr().cast::<u8>().add(offset as usize) })
    }
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuBuffer('{}', {} bytes, {:?}, {:#x})",
            self.inner.name, self.inner.size, self.inner.usage, self.inner.address
        )
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        let gpu = &self.gpu;
        {
            let mut registry = gpu.buffers.lock().expect("buffer registry lock");
            // Only our own entry. Two imports of one host block may share an address (a CPU
            // device's addresses are host pointers); the later one holds the entry then.
            let ours = registry
                .get(&self.address)
                .is_some_and(|(_, w)| std::ptr::eq(w.as_ptr(), self));
            if ours {
                registry.remove(&self.address);
            }
        }
        // SAFETY: no command list uses the buffer any more (each holds an Arc of it and waits
        // for its submissions when dropped), so the GPU is done with it.
        unsafe { gpu.device.destroy_buffer(self.buffer, None) };
        if let Backing::Imported(memory, _) = &self.backing {
            // SAFETY: its one buffer is destroyed; the block is freed only after this.
            unsafe { gpu.device.free_memory(*memory, None) };
        }
        if let Backing::Allocated(slot) = &mut self.backing
            && let Some(allocation) = slot.take()
            && let Err(e) = gpu
                .allocator
                .lock()
                .expect("allocator lock")
                .free(allocation)
        {
            tracing::warn!("freeing buffer '{}': {e}", self.name);
        }
    }
}
