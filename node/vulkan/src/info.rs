//! What a physical device is and can do: requirements, optional features, limits.

use std::ffi::CStr;

use ash::vk;

use super::coop::{self, Half};
use super::instance::Instance;
use vkml_shaders::ShaderNeeds;

use super::instance::QueueFamily;

/// A GPU's identity, features and limits, all queried from the driver.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    /// Position in [`super::Vulkan::gpus`].
    pub index: usize,
    pub name: String,
    /// "NVIDIA", "AMD", "Intel", "Apple", "ARM", "Qualcomm", "Mesa(lavapipe)"... or the PCI
    /// vendor id in hex.
    pub vendor: String,
    /// "discrete", "integrated", "virtual", "cpu" or "other".
    pub device_type: String,
    /// The device's Vulkan version, e.g. "1.3.230".
    pub api_version: String,
    /// Driver name and version string, e.g. "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)".
    pub driver: String,
    /// Bytes this process may allocate on the largest device-local heap: the driver's budget
    /// (VK_EXT_memory_budget) when it reports one, else the heap's size.
    pub memory_budget: u64,
    /// Workgroup shared memory, bytes.
    pub max_shared_memory: u32,
    pub subgroup_size: u32,
    /// The device's push-constant limit, bytes (VKML uses at most 256 of it).
    pub max_push_constants: u32,
    /// Descriptor binding limit; buffers reached by device address are not bound by it.
    pub max_storage_buffer_range: u64,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: [u32; 3],
    pub max_workgroup_size: [u32; 3],
    /// Largest single buffer this device can create, bytes.
    pub max_buffer_size: u64,
    /// 16-bit floats in shaders and 16-bit storage in buffers (both enabled).
    pub fp16: bool,
    /// 8-bit integers in shaders and 8-bit storage in buffers (both enabled).
    pub int8: bool,
    /// 16-bit integers in shaders and 16-bit storage in buffers (both enabled).
    pub int16: bool,
    pub int64: bool,
    pub fp64: bool,
    /// VK_KHR_cooperative_matrix (enabled when present).
    pub cooperative_matrix: bool,
    /// VK_NV_cooperative_matrix2 with what gemm_coop2.comp uses (workgroup scope, flexible
    /// dimensions, tensor addressing, per-element operations), enabled when present.
    pub cooperative_matrix2: bool,
    /// bfloat16 in shaders and in cooperative matrices (VK_KHR_shader_bfloat16).
    pub bf16: bool,
    /// The optional shader features enabled, to check a shader's needs against.
    pub shader_features: ShaderNeeds,
    /// Host-visible device-local memory covering the whole device-local heap (resizable BAR or
    /// unified memory): uploads can be written straight into device memory.
    pub rebar: bool,
    /// A CPU implementation (lavapipe, SwiftShader): it shares the cores with the host.
    pub is_cpu: bool,
    /// Nanoseconds per timestamp tick, when the queue VKML submits to writes timestamps
    /// ([`super::Gpu::record_timed`]); `None` when it does not.
    pub timestamp_period: Option<f32>,
    /// VK_EXT_external_memory_host (enabled when present): the alignment, in bytes, of host
    /// memory it imports ([`super::Gpu::import_host`]). Two such GPUs share a [`super::HostBlock`]
    /// and pass tensors through it by DMA alone, with no copy by the CPU.
    pub host_import_alignment: Option<u64>,
}

/// A device that meets the requirements, with what to enable when opening it.
pub(crate) struct Candidate {
    pub physical: vk::PhysicalDevice,
    pub info: GpuInfo,
    pub queue_family: u32,
    pub extensions: Vec<&'static CStr>,
    pub features: Features,
    /// Largest single allocation: the smallest of the heap, buffer and allocation limits.
    pub max_allocation: u64,
}

impl Features {
    /// What shaders may use on a device opened with these features.
    fn shader_needs_met(&self) -> ShaderNeeds {
        let mut have = ShaderNeeds::default();
        for (present, need) in [
            (self.shader_float16, ShaderNeeds::FLOAT16),
            (self.shader_float64, ShaderNeeds::FLOAT64),
            (self.shader_int16, ShaderNeeds::INT16),
            (self.shader_int8, ShaderNeeds::INT8),
            (self.storage_buffer_16bit, ShaderNeeds::STORAGE16),
            (self.storage_buffer_8bit, ShaderNeeds::STORAGE8),
            (self.coop_f16, ShaderNeeds::COOPERATIVE_MATRIX),
            (self.coopmat2, ShaderNeeds::COOPERATIVE_MATRIX2),
            (self.bf16, ShaderNeeds::BFLOAT16),
            (
                self.v13.is_some_and(|v| v.integer_dot_product),
                ShaderNeeds::INTEGER_DOT_PRODUCT,
            ),
        ] {
            if present {
                have = have.union(need);
            }
        }
        have
    }
}

/// Optional features present on the device, enabled when it is opened.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Features {
    pub shader_int16: bool,
    pub shader_float64: bool,
    pub storage_buffer_16bit: bool,
    pub shader_float16: bool,
    pub shader_int8: bool,
    pub storage_buffer_8bit: bool,
    pub vulkan_memory_model: bool,
    pub vulkan_memory_model_device_scope: bool,
    pub subgroup_extended_types: bool,
    pub cooperative_matrix: bool,
    /// Cooperative matrices as gemm_coop.comp uses them: 16x16x16 f16 with f32 accumulators in
    /// 32-wide subgroups (the shader lays its 128 invocations out as 4 subgroups), and 44 KiB
    /// of shared memory.
    pub coop_f16: bool,
    /// VK_NV_cooperative_matrix2, as [`Coopmat2Features::usable`](coop::Coopmat2Features).
    pub coopmat2: bool,
    /// bfloat16 values and cooperative matrices (and, with `coop_f16`'s subgroup
    /// requirement, the 16x16x16 bf16 shape).
    pub bf16: bool,
    /// Vulkan 1.3 features, when the device is 1.3.
    pub v13: Option<Features13>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Features13 {
    pub subgroup_size_control: bool,
    pub compute_full_subgroups: bool,
    pub maintenance4: bool,
    /// VK_KHR_shader_integer_dot_product's instructions (core in 1.3): conv_q8.comp's `dot`
    /// variants.
    pub integer_dot_product: bool,
}

pub(crate) fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

/// Sort key putting real GPUs before CPU implementations.
pub(crate) fn type_rank(device_type: &str) -> u8 {
    match device_type {
        "discrete" => 0,
        "integrated" => 1,
        "virtual" => 2,
        "other" => 3,
        _ => 4,
    }
}

/// Checks a physical device against VKML's requirements; the error says why it is unusable.
pub(crate) fn inspect(
    inst: &Instance,
    pd: vk::PhysicalDevice,
    queue: QueueFamily,
) -> Result<Candidate, String> {
    let instance = &inst.instance;
    // SAFETY: `pd` was enumerated from this live instance.
    let props = unsafe { instance.get_physical_device_properties(pd) };
    let name = props
        .device_name_as_c_str()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "<unnamed>".into());
    if props.api_version < vk::API_VERSION_1_2 {
        return Err(format!(
            "{name}: supports Vulkan {}, VKML needs 1.2",
            version_string(props.api_version)
        ));
    }

    // SAFETY: as above.
    let extensions = unsafe { instance.enumerate_device_extension_properties(pd) }
        .map_err(|e| format!("{name}: cannot list its extensions: {e}"))?;
    let has_ext = |n: &CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(n))
    };
    let has_coop = has_ext(ash::khr::cooperative_matrix::NAME);
    let has_coop2 = has_ext(coop::COOPMAT2_NAME);
    let has_bf16 = has_ext(coop::BFLOAT16_NAME);
    let has_budget = has_ext(ash::ext::memory_budget::NAME);
    let has_host_import = has_ext(ash::ext::external_memory_host::NAME);
    let is_13 = props.api_version >= vk::API_VERSION_1_3;

    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut fcoop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut fcoop2 = coop::Coopmat2Features::default();
    let mut fbf16 = coop::Bfloat16Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f11)
        .push_next(&mut f12);
    if is_13 {
        f2 = f2.push_next(&mut f13);
    }
    if has_coop {
        f2 = f2.push_next(&mut fcoop);
    }
    // Cooperative matrix 2 needs SPIR-V 1.6, hence Vulkan 1.3.
    let has_coop2 = has_coop2 && has_coop && is_13;
    if has_coop2 {
        f2 = f2.push_next(&mut fcoop2);
    }
    if has_bf16 {
        f2 = f2.push_next(&mut fbf16);
    }
    // SAFETY: the chain holds only structs of core 1.2 (the device is 1.2+), of 1.3 when the
    // device is 1.3, and of extensions the device lists; all outlive the call.
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    let core = f2.features;

    let mut missing = Vec::new();
    if f12.buffer_device_address == 0 {
        missing.push("bufferDeviceAddress");
    }
    if f12.timeline_semaphore == 0 {
        missing.push("timelineSemaphore");
    }
    if core.shader_int64 == 0 {
        missing.push("shaderInt64");
    }
    if f12.scalar_block_layout == 0 {
        missing.push("scalarBlockLayout");
    }
    if !missing.is_empty() {
        return Err(format!("{name}: lacks {}", missing.join(", ")));
    }

    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let compute = |f: &vk::QueueFamilyProperties| {
        f.queue_count > 0 && f.queue_flags.contains(vk::QueueFlags::COMPUTE)
    };
    // A compute-only family is the async-compute engine where one exists: nothing else runs
    // on it. QueueFamily::Graphics picks a graphics family instead, for measuring the two.
    let graphics = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::GRAPHICS);
    let want_graphics = queue == QueueFamily::Graphics;
    let queue_family = families
        .iter()
        .position(|f| compute(f) && graphics(f) == want_graphics)
        .or_else(|| families.iter().position(compute))
        .ok_or_else(|| format!("{name}: has no compute queue"))? as u32;

    let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
    let mut p13 = vk::PhysicalDeviceVulkan13Properties::default();
    let mut phost = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut p2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut p11)
        .push_next(&mut p12);
    if is_13 {
        p2 = p2.push_next(&mut p13);
    }
    if has_host_import {
        p2 = p2.push_next(&mut phost);
    }
    // SAFETY: core structs of the device's version and of extensions it lists, outliving the
    // call.
    unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
    let limits = props.limits;

    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut m2 = vk::PhysicalDeviceMemoryProperties2::default();
    if has_budget {
        m2 = m2.push_next(&mut budget);
    }
    // SAFETY: the budget struct is chained only when the device supports the extension.
    unsafe { instance.get_physical_device_memory_properties2(pd, &mut m2) };
    let mem = m2.memory_properties;
    let heaps = &mem.memory_heaps[..mem.memory_heap_count as usize];
    let types = &mem.memory_types[..mem.memory_type_count as usize];
    let device_local = |h: &vk::MemoryHeap| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL);
    let main_heap = (0..heaps.len())
        .filter(|&i| device_local(&heaps[i]))
        .max_by_key(|&i| heaps[i].size)
        .or_else(|| (0..heaps.len()).max_by_key(|&i| heaps[i].size))
        .ok_or_else(|| format!("{name}: reports no memory heap"))?;
    let heap_size = heaps[main_heap].size;
    let memory_budget = if has_budget && budget.heap_budget[main_heap] > 0 {
        budget.heap_budget[main_heap].min(heap_size)
    } else {
        heap_size
    };
    let rebar = types.iter().any(|t| {
        t.heap_index as usize == main_heap
            && t.property_flags.contains(
                vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE,
            )
    });
    let largest_heap = heaps.iter().map(|h| h.size).max().unwrap_or(0);
    let max_buffer_size = if is_13 { p13.max_buffer_size } else { u64::MAX };
    // maxMemoryAllocationSize is left out on purpose: it is a hint (4 GiB on NVIDIA, which
    // happily allocates more), and going past it is legal; the driver says no if it must.
    let max_allocation = largest_heap.min(max_buffer_size);

    let mut extensions_to_enable = Vec::new();
    let coop_khr = has_coop && fcoop.cooperative_matrix != 0;
    if coop_khr {
        extensions_to_enable.push(ash::khr::cooperative_matrix::NAME);
    }
    // Which 16x16x16 shapes (f16, bf16) the device runs in a subgroup.
    let shapes = if coop_khr {
        let ext = ash::khr::cooperative_matrix::Instance::new(&inst.entry, instance);
        // SAFETY: the device lists the extension; `pd` belongs to this instance.
        let props = unsafe { ext.get_physical_device_cooperative_matrix_properties(pd) }
            .unwrap_or_default();
        (
            coop::has_16x16x16(&props, Half::F16),
            coop::has_16x16x16(&props, Half::Bf16),
        )
    } else {
        (false, false)
    };
    let coopmat2 = coop_khr && has_coop2 && fcoop2.usable();
    if coopmat2 {
        extensions_to_enable.push(coop::COOPMAT2_NAME);
    }
    let bf16 = coop_khr && has_bf16 && fbf16.usable();
    if bf16 {
        extensions_to_enable.push(coop::BFLOAT16_NAME);
    }
    // gemm_coop.comp lays its 128 invocations out as four 32-wide subgroups and stages 44 KiB.
    // A device that may pick another width per pipeline (Intel: 8 to 32, AMD: 32 or 64) could
    // break that layout, so only devices whose width is always 32 qualify.
    let fixed32 = if is_13 {
        p13.min_subgroup_size == 32 && p13.max_subgroup_size == 32
    } else {
        p11.subgroup_size == 32
    };
    let wide32 = fixed32 && limits.max_compute_shared_memory_size >= 45_056;
    let host_import_alignment = (has_host_import && phost.min_imported_host_pointer_alignment > 0)
        .then_some(phost.min_imported_host_pointer_alignment);
    if host_import_alignment.is_some() {
        extensions_to_enable.push(ash::ext::external_memory_host::NAME);
    }
    // The spec requires enabling the portability subset wherever a device lists it.
    if has_ext(ash::khr::portability_subset::NAME) {
        extensions_to_enable.push(ash::khr::portability_subset::NAME);
    }

    let features = Features {
        shader_int16: core.shader_int16 != 0,
        shader_float64: core.shader_float64 != 0,
        storage_buffer_16bit: f11.storage_buffer16_bit_access != 0,
        shader_float16: f12.shader_float16 != 0,
        shader_int8: f12.shader_int8 != 0,
        storage_buffer_8bit: f12.storage_buffer8_bit_access != 0,
        vulkan_memory_model: f12.vulkan_memory_model != 0,
        vulkan_memory_model_device_scope: f12.vulkan_memory_model_device_scope != 0,
        subgroup_extended_types: f12.shader_subgroup_extended_types != 0,
        cooperative_matrix: coop_khr,
        coop_f16: coop_khr && wide32 && shapes.0,
        coopmat2,
        bf16: bf16 && (coopmat2 || (wide32 && shapes.1)),
        v13: is_13.then_some(Features13 {
            subgroup_size_control: f13.subgroup_size_control != 0,
            compute_full_subgroups: f13.compute_full_subgroups != 0,
            maintenance4: f13.maintenance4 != 0,
            integer_dot_product: f13.shader_integer_dot_product != 0,
        }),
    };

    let driver = {
        let n = p12
            .driver_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned());
        let i = p12
            .driver_info_as_c_str()
            .map(|s| s.to_string_lossy().into_owned());
        format!("{} {}", n.unwrap_or_default(), i.unwrap_or_default())
            .trim()
            .to_string()
    };
    let is_cpu = props.device_type == vk::PhysicalDeviceType::CPU;
    let info = GpuInfo {
        index: 0,
        name,
        vendor: vendor_name(props.vendor_id, p12.driver_id),
        device_type: match props.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU => "discrete",
            vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
            vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
            vk::PhysicalDeviceType::CPU => "cpu",
            _ => "other",
        }
        .to_string(),
        api_version: version_string(props.api_version),
        driver,
        memory_budget,
        max_shared_memory: limits.max_compute_shared_memory_size,
        subgroup_size: p11.subgroup_size,
        max_push_constants: limits.max_push_constants_size,
        max_storage_buffer_range: limits.max_storage_buffer_range as u64,
        max_workgroup_invocations: limits.max_compute_work_group_invocations,
        max_workgroup_count: limits.max_compute_work_group_count,
        max_workgroup_size: limits.max_compute_work_group_size,
        max_buffer_size: max_allocation,
        fp16: features.shader_float16 && features.storage_buffer_16bit,
        int8: features.shader_int8 && features.storage_buffer_8bit,
        int16: features.shader_int16 && features.storage_buffer_16bit,
        int64: true,
        fp64: features.shader_float64,
        cooperative_matrix: features.cooperative_matrix,
        cooperative_matrix2: features.coopmat2,
        bf16: features.bf16,
        shader_features: features.shader_needs_met(),
        rebar,
        is_cpu,
        timestamp_period: (families[queue_family as usize].timestamp_valid_bits > 0
            && limits.timestamp_period > 0.0)
            .then_some(limits.timestamp_period),
        host_import_alignment,
    };
    Ok(Candidate {
        physical: pd,
        info,
        queue_family,
        extensions: extensions_to_enable,
        features,
        max_allocation,
    })
}

fn vendor_name(vendor_id: u32, driver: vk::DriverId) -> String {
    match driver {
        vk::DriverId::MESA_LLVMPIPE => return "Mesa(lavapipe)".into(),
        vk::DriverId::GOOGLE_SWIFTSHADER => return "Google(SwiftShader)".into(),
        _ => {}
    }
    match vendor_id {
        0x10DE => "NVIDIA",
        0x1002 | 0x1022 => "AMD",
        0x8086 => "Intel",
        0x106B => "Apple",
        0x13B5 => "ARM",
        0x5143 => "Qualcomm",
        0x1010 => "ImgTec",
        0x10005 => "Mesa",
        other => return format!("{other:#06x}"),
    }
    .into()
}
