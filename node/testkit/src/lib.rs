//! Helpers for tests and benches of every VKML crate (a dev-dependency only: nothing shipped
//! links it). It reads the test environment, which the libraries themselves never do:
//! `VKML_SKIP_VULKAN=1` lets GPU tests pass without a Vulkan driver, `VKML_TEST_GPU=<index>`
//! picks a GPU other than the first, `VKML_VALIDATION=1` turns on the Khronos validation layer
//! where it is installed.

#![deny(unsafe_code)]

pub mod kernel;

use std::sync::OnceLock;
use std::time::Duration;

use vkml_vulkan::{Gpu, GpuBuffer, MemoryUse, Step, Vulkan, VulkanError, VulkanOptions};

/// The Vulkan options tests run with.
pub fn vulkan_options() -> VulkanOptions {
    VulkanOptions {
        validation: std::env::var("VKML_VALIDATION").is_ok_and(|v| v.trim() == "1"),
        ..VulkanOptions::default()
    }
}

/// The process-wide Vulkan instance used by tests, or why there is none.
pub fn vulkan() -> Result<&'static Vulkan, &'static VulkanError> {
    static VULKAN: OnceLock<Result<Vulkan, VulkanError>> = OnceLock::new();
    VULKAN
        .get_or_init(|| Vulkan::new(&vulkan_options()))
        .as_ref()
}

/// The GPU tests run on: `VKML_TEST_GPU` (an index) or the first. Panics without one unless
/// `VKML_SKIP_VULKAN=1`, when it returns `None`.
pub fn test_gpu() -> Option<&'static Gpu> {
    let skip = std::env::var("VKML_SKIP_VULKAN").is_ok_and(|v| v == "1");
    let vulkan = match vulkan() {
        Ok(v) => v,
        Err(_) if skip => return None,
        Err(e) => panic!(
            "no Vulkan device for GPU tests: {e}. Install a driver (Mesa's lavapipe runs on the \
             CPU: package mesa-vulkan-drivers) or set VKML_SKIP_VULKAN=1 to skip these tests"
        ),
    };
    let index = match std::env::var("VKML_TEST_GPU") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .unwrap_or_else(|_| panic!("VKML_TEST_GPU={v:?} is not a GPU index")),
        Err(_) => 0,
    };
    match vulkan.gpus().get(index) {
        Some(gpu) => Some(gpu),
        None => panic!(
            "VKML_TEST_GPU={index} but only {} Vulkan GPU(s) exist",
            vulkan.gpus().len()
        ),
    }
}

/// A device-local buffer holding `bytes`, filled through a staging buffer.
pub fn device_copy(gpu: &Gpu, bytes: &[u8], name: &str) -> Result<GpuBuffer, String> {
    let e = |e: VulkanError| e.to_string();
    let len = bytes.len() as u64;
    let staging = gpu
        .create_buffer(len.max(4), MemoryUse::Upload, "staging")
        .map_err(e)?;
    staging.write(0, bytes).map_err(e)?;
    let buf = gpu
        .create_buffer(len.max(4), MemoryUse::Device, name)
        .map_err(e)?;
    let copy = gpu
        .record(&[Step::Copy {
            src: &staging,
            src_offset: 0,
            dst: &buf,
            dst_offset: 0,
            bytes: len,
        }])
        .map_err(e)?;
    let v = gpu.submit(&copy).map_err(e)?;
    if !gpu.wait(v, Duration::from_secs(300)).map_err(e)? {
        return Err("the upload did not finish within 300 s".into());
    }
    Ok(buf)
}
