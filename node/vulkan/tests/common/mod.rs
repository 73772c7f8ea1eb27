//! Helpers shared by the Vulkan layer's tests and benches (included by path from benches/).

#![allow(dead_code)] // each test or bench binary uses its own subset

use std::sync::Arc;
use std::time::Duration;

pub use vkml_shaders::groups_1d;
use vkml_vulkan::{Gpu, GpuBuffer, MemoryUse, Step, Vulkan};

/// The probe kernels (probes/*.comp), typed as the shipped ones are.
pub mod probes {
    include!(concat!(env!("OUT_DIR"), "/probes.rs"));
}

pub const LONG: Duration = Duration::from_secs(120);

pub fn gpu() -> Option<&'static Gpu> {
    vkml_testkit::test_gpu()
}

pub fn upload_f32(gpu: &Gpu, values: &[f32], name: &str) -> GpuBuffer {
    let b = gpu
        .create_buffer(4 * values.len() as u64, MemoryUse::Upload, name)
        .unwrap();
    b.write(0, bytemuck::cast_slice(values)).unwrap();
    b
}

pub fn read_f32(b: &GpuBuffer) -> Vec<f32> {
    let mut out = vec![0f32; (b.size() / 4) as usize];
    b.read(0, bytemuck::cast_slice_mut(&mut out)).unwrap();
    out
}

pub fn run(gpu: &Gpu, steps: &[Step<'_>]) {
    let list = gpu.record(steps).unwrap();
    let v = gpu.submit(&list).unwrap();
    assert!(gpu.wait(v, LONG).unwrap(), "GPU work timed out");
}

pub fn add_scalar(src: u64, dst: u64, n: usize, value: f32) -> Step<'static> {
    use probes::add_scalar as k;
    Step::dispatch(
        k::Variant::Main,
        k::Buffers { src, dst },
        k::Params { n: n as u32, value },
        groups_1d(n, 256),
    )
}

/// A GPU of its own, the one the other tests use: arming is per GPU, and tests running beside
/// these would disarm their lists.
pub fn own_gpu() -> Option<Arc<Gpu>> {
    let index = gpu()?.info().index;
    Some(Arc::clone(
        &Vulkan::new(&vkml_testkit::vulkan_options()).ok()?.gpus()[index],
    ))
}
