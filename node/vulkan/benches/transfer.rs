//! GPU-to-GPU bandwidth of the two ways the executor moves a value between two GPUs of one
//! process: `cargo bench -p vkml-vulkan --bench transfer [-- MAX_MIB]`.
//!
//! - bridge (exec/bridge.rs): the source GPU copies device memory into a host block both GPUs
//!   import, the destination GPU copies it out into its device memory; no CPU copy.
//! - host: the source GPU copies into its readback memory, the CPU copies that into a tensor
//!   and the tensor into the destination GPU's upload buffer (which its kernels read).
//!
//! Each figure is the median of several transfers, from the source copy's submission to the
//! destination's completion. With one GPU, both ends are that GPU (said in the output).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::LONG;
use vkml_vulkan::{BridgeProbe, Gpu, GpuBuffer, MemoryUse, Step};

fn main() {
    let Some(_) = common::gpu() else {
        println!("no GPU (VKML_SKIP_VULKAN=1): nothing to time");
        return;
    };
    let max_mib: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1024);
    let gpus = vkml_testkit::vulkan().expect("listed above").gpus();
    let (src, dst) = (&gpus[0], gpus.get(1).unwrap_or(&gpus[0]));
    println!(
        "from vulkan:0 ({}) to vulkan:{} ({}){}",
        src.info().name,
        dst.info().index,
        dst.info().name,
        if gpus.len() == 1 {
            " (one GPU: both ends on it)"
        } else {
            ""
        }
    );
    println!(
        "{:>9} | {:>10} {:>8} | {:>10} {:>8} | {:>6}",
        "bytes", "bridge ms", "GB/s", "host ms", "GB/s", "ratio"
    );
    let mut mib = 1;
    while mib <= max_mib {
        let bytes = mib << 20;
        let reps = (2048 / mib).clamp(5, 30) as usize;
        let bridge = median(reps, || bridge_once(src, dst, bytes));
        let host = median(reps, || host_once(src, dst, bytes));
        let gbs = |s: f64| bytes as f64 / s / 1e9;
        println!(
            "{:>9} | {:>10.3} {:>8.2} | {:>10.3} {:>8.2} | {:>6.2}",
            format!("{mib} MiB"),
            bridge * 1e3,
            gbs(bridge),
            host * 1e3,
            gbs(host),
            host / bridge
        );
        mib *= 4;
    }
}

/// The median of `reps` timings, after one untimed run (allocations, first touch).
fn median(reps: usize, mut once: impl FnMut() -> Box<dyn FnMut() -> f64>) -> f64 {
    let mut run = once();
    run();
    let mut times: Vec<f64> = (0..reps).map(|_| run()).collect();
    times.sort_by(f64::total_cmp);
    times[reps / 2]
}

fn device(gpu: &Gpu, bytes: u64, name: &str) -> GpuBuffer {
    gpu.create_buffer(bytes, MemoryUse::Device, name)
        .expect("device buffer")
}

fn copy<'a>(src: &'a GpuBuffer, dst: &'a GpuBuffer, bytes: u64) -> Step<'a> {
    Step::Copy {
        src,
        src_offset: 0,
        dst,
        dst_offset: 0,
        bytes,
    }
}

fn submit_and_wait(gpu: &Gpu, list: &vkml_vulkan::CommandList) {
    let v = gpu.submit(list).expect("submit");
    assert!(gpu.wait(v, LONG).expect("wait"), "transfer timed out");
}

/// Device memory of `src` to device memory of `dst` through a host block both import.
fn bridge_once(src: &Gpu, dst: &Gpu, bytes: u64) -> Box<dyn FnMut() -> f64> {
    let probe = BridgeProbe::new(src, dst, bytes).expect("bridge");
    Box::new(move || probe.run(LONG).expect("transfer").as_secs_f64())
}

/// Device memory of `src` to `dst`'s upload buffer through readback memory and a tensor.
fn host_once(src: &Gpu, dst: &Gpu, bytes: u64) -> Box<dyn FnMut() -> f64> {
    let a = device(src, bytes, "a");
    let back = src
        .create_buffer(bytes, MemoryUse::Readback, "readback")
        .expect("readback");
    let up = dst
        .create_buffer(bytes, MemoryUse::Upload, "import")
        .expect("upload");
    let out = src.record(&[copy(&a, &back, bytes)]).expect("record");
    let src = src.arc();
    Box::new(move || {
        let t = Instant::now();
        submit_and_wait(&src, &out);
        let mut tensor = vec![0u8; bytes as usize];
        back.read(0, &mut tensor).expect("read");
        up.write(0, &tensor).expect("write");
        t.elapsed().as_secs_f64()
    })
}
