//! The Vulkan layer's errors.

use ash::vk;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VulkanError {
    /// No Vulkan loader (libvulkan.so.1 / vulkan-1.dll) could be opened, or it is too old.
    #[error("Vulkan is not available: {0}")]
    NoLoader(String),
    /// The loader works but no device meets VKML's requirements.
    #[error("no usable Vulkan device: {0}")]
    NoDevice(String),
    #[error("out of GPU memory: cannot allocate {bytes} bytes for '{name}'")]
    OutOfMemory { bytes: u64, name: String },
    /// The driver reset or crashed; everything on this GPU is gone.
    #[error("the Vulkan device was lost (driver reset, GPU fault or hang)")]
    DeviceLost,
    /// A caller's mistake: out-of-bounds access, too many push constants, foreign handles...
    #[error("{0}")]
    Invalid(String),
    /// Any other failure of a Vulkan call.
    #[error("{call} failed: {result}")]
    Vk {
        call: &'static str,
        result: vk::Result,
    },
}

impl VulkanError {
    pub(crate) fn invalid(msg: impl Into<String>) -> VulkanError {
        VulkanError::Invalid(msg.into())
    }
}

/// Maps a failed Vulkan call to an error, naming the call.
pub(crate) fn vk_error(call: &'static str) -> impl Fn(vk::Result) -> VulkanError {
    move |result| match result {
        vk::Result::ERROR_DEVICE_LOST => VulkanError::DeviceLost,
        result => VulkanError::Vk { call, result },
    }
}
