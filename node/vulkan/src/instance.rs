//! The Vulkan instance: loading the loader, optional validation, opening the GPUs.

use std::ffi::{CStr, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;

use super::error::{VulkanError, vk_error};
use super::gpu::Gpu;
use super::info;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Validation-layer errors and warnings seen by this process (only counted with
/// [`VulkanOptions::validation`]), so tests can assert that a run was clean.
static VALIDATION_MESSAGES: AtomicU64 = AtomicU64::new(0);

/// Number of validation errors and warnings reported so far in this process.
pub fn validation_messages() -> u64 {
    VALIDATION_MESSAGES.load(Ordering::Relaxed)
}

/// The loader and instance, shared by every [`Gpu`] so that it outlives them all.
pub(crate) struct Instance {
    /// Keeps the loader library loaded while the instance lives; extension loaders use it.
    pub(crate) entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every child object (devices, hence everything else) is gone: each Gpu holds an
        // Arc of this Instance, so this runs after the last Gpu was dropped.
        unsafe {
            if let Some((utils, messenger)) = self.debug.take() {
                utils.destroy_debug_utils_messenger(messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// How to open Vulkan: diagnostics for measurements and debugging, off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VulkanOptions {
    /// Enable the Khronos validation layer where it is installed, counting its reports
    /// ([`validation_messages`]).
    pub validation: bool,
    /// Which queue family work is submitted on.
    pub queue: QueueFamily,
    /// How long a waiter polls a real GPU's progress before sleeping in the driver's wait
    /// (`Gpu::spin_default`; None: 100 us). CPU devices never poll.
    pub spin: Option<std::time::Duration>,
}

/// The queue family a GPU's work goes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueFamily {
    /// A compute-only family where one exists (the async-compute engine: nothing else runs on
    /// it), else any with compute.
    #[default]
    Compute,
    /// A graphics family, for measuring the two.
    Graphics,
}

/// Every usable Vulkan GPU of this machine.
pub struct Vulkan {
    gpus: Vec<Arc<Gpu>>,
}

impl Vulkan {
    /// Loads the Vulkan loader and opens every device that meets VKML's needs (Vulkan 1.2,
    /// buffer device address, timeline semaphores, 64-bit integers, scalar block layout).
    /// Others are skipped with a warning saying why. Real GPUs come first, CPU devices
    /// (lavapipe) last.
    pub fn new(options: &VulkanOptions) -> Result<Vulkan, VulkanError> {
        let instance = Arc::new(create_instance(options.validation)?);
        let inst = &instance.instance;
        // SAFETY: the instance is valid for the duration of the call.
        let physicals = unsafe { inst.enumerate_physical_devices() }
            .map_err(vk_error("vkEnumeratePhysicalDevices"))?;

        let mut candidates = Vec::new();
        let mut skipped = Vec::new();
        for pd in physicals {
            match info::inspect(&instance, pd, options.queue) {
                Ok(c) => candidates.push(c),
                Err(why) => {
                    tracing::warn!("skipping Vulkan device: {why}");
                    skipped.push(why);
                }
            }
        }
        // Stable: devices of the same kind keep the driver's order.
        candidates.sort_by_key(|c| info::type_rank(&c.info.device_type));

        let mut gpus = Vec::new();
        for mut c in candidates {
            // Indices stay dense even when a device fails to open.
            c.info.index = gpus.len();
            let name = c.info.name.clone();
            match Gpu::new(instance.clone(), c, options.spin) {
                Ok(gpu) => gpus.push(gpu),
                Err(e) => {
                    tracing::warn!("skipping Vulkan device {name}: cannot open it: {e}");
                    skipped.push(format!("{name}: cannot open it: {e}"));
                }
            }
        }
        if gpus.is_empty() {
            let why = if skipped.is_empty() {
                "the loader found no device (is a driver installed? see `vulkaninfo --summary`)"
                    .to_string()
            } else {
                skipped.join("; ")
            };
            return Err(VulkanError::NoDevice(why));
        }
        Ok(Vulkan { gpus })
    }

    pub fn gpus(&self) -> &[Arc<Gpu>] {
        &self.gpus
    }
}

impl std::fmt::Debug for Vulkan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.gpus).finish()
    }
}

fn create_instance(validation: bool) -> Result<Instance, VulkanError> {
    // SAFETY: loading libvulkan runs its initialisers; the Vulkan loader is designed to be
    // loaded this way, and nothing else in the process depends on it not being loaded.
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| VulkanError::NoLoader(format!("cannot load the Vulkan loader: {e}")))?;
    // SAFETY: a global command with no preconditions.
    let version = unsafe { entry.try_enumerate_instance_version() }
        .map_err(vk_error("vkEnumerateInstanceVersion"))?
        .unwrap_or(vk::API_VERSION_1_0);
    if version < vk::API_VERSION_1_2 {
        return Err(VulkanError::NoLoader(format!(
            "the Vulkan loader supports version {}, VKML needs 1.2",
            info::version_string(version)
        )));
    }
    let api = version.min(vk::API_VERSION_1_3);

    // SAFETY: global commands with no preconditions.
    let extensions = unsafe { entry.enumerate_instance_extension_properties(None) }
        .map_err(vk_error("vkEnumerateInstanceExtensionProperties"))?;
    let has_ext = |name: &CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
    };

    let mut ext_names = Vec::new();
    let mut flags = vk::InstanceCreateFlags::empty();
    // MoltenVK and other layered drivers only appear with portability enumeration.
    if has_ext(ash::khr::portability_enumeration::NAME) {
        ext_names.push(ash::khr::portability_enumeration::NAME.as_ptr());
        flags |= vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR;
    }

    let mut layer_names = Vec::new();
    let mut debug = false;
    if validation {
        // SAFETY: a global command with no preconditions.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }
            .map_err(vk_error("vkEnumerateInstanceLayerProperties"))?;
        if layers
            .iter()
            .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER))
        {
            layer_names.push(VALIDATION_LAYER.as_ptr());
            if has_ext(ash::ext::debug_utils::NAME) {
                ext_names.push(ash::ext::debug_utils::NAME.as_ptr());
                debug = true;
            }
        } else {
            tracing::warn!(
                "validation asked for, but VK_LAYER_KHRONOS_validation is not installed"
            );
        }
    }

    let app = vk::ApplicationInfo::default()
        .application_name(c"vkml")
        .engine_name(c"vkml")
        .api_version(api);
    let create = vk::InstanceCreateInfo::default()
        .flags(flags)
        .application_info(&app)
        .enabled_extension_names(&ext_names)
        .enabled_layer_names(&layer_names);
    // SAFETY: `create` and everything it points to (names, app info) live across the call.
    let instance = unsafe { entry.create_instance(&create, None) }.map_err(|r| {
        VulkanError::NoLoader(format!(
            "vkCreateInstance failed: {r} (is a driver installed?)"
        ))
    })?;

    let debug = if debug {
        let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
        let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback));
        // SAFETY: the instance was created with VK_EXT_debug_utils enabled; the callback is a
        // plain function valid for the whole program.
        match unsafe { utils.create_debug_utils_messenger(&info, None) } {
            Ok(m) => Some((utils, m)),
            Err(e) => {
                tracing::warn!("cannot create the validation messenger: {e}");
                None
            }
        }
    } else {
        None
    };
    Ok(Instance {
        entry,
        instance,
        debug,
    })
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    VALIDATION_MESSAGES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the layer passes a valid callback-data struct for the duration of the call, and
    // its message, when not null, is a NUL-terminated string.
    let message = unsafe {
        data.as_ref()
            .filter(|d| !d.p_message.is_null())
            .map(|d| CStr::from_ptr(d.p_message).to_string_lossy())
            .unwrap_or_default()
    };
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        tracing::error!("vulkan validation: {message}");
    } else {
        tracing::warn!("vulkan validation: {message}");
    }
    vk::FALSE
}
