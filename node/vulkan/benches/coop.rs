//! How fast the tensor cores multiply through each Vulkan path, with nothing else in the way:
//! `cargo bench -p vkml-vulkan --bench coop` on a GPU with cooperative matrices. It
//! runs probes/coop_peak.comp (VK_KHR_cooperative_matrix) and probes/coop2_peak.comp
//! (VK_NV_cooperative_matrix2), each in a variant that keeps its operands in registers and
//! one that reloads them as the GEMM kernels do, checks every accumulator of one workgroup
//! against the exact value, and prints TFLOP/s. Set beside the GEMM kernels' rates, it says
//! whether a kernel is limited by its own loads or by the rate the driver reaches on the
//! matrix products themselves.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::probes::{coop_peak, coop2_peak};
use vkml_testkit::{device_copy, test_gpu};
use vkml_vulkan::{Gpu, GpuBuffer, Kernel, MemoryUse, Step};

const LONG: Duration = Duration::from_secs(120);

/// A probe kernel: the KHR one writes `y` only, the NV2 one also reads the operands `a`.
#[derive(Clone, Copy)]
enum Which {
    Khr(coop_peak::Variant),
    Nv2(coop2_peak::Variant),
}

impl Which {
    fn kernel(self) -> Kernel {
        match self {
            Which::Khr(v) => v.kernel(),
            Which::Nv2(v) => v.kernel(),
        }
    }

    fn dispatch(self, a: u64, y: u64, iters: u32, groups: u32) -> Step<'static> {
        let groups = [groups, 1, 1];
        match self {
            Which::Khr(v) => Step::dispatch(
                v,
                coop_peak::Buffers { y },
                coop_peak::Params { iters },
                groups,
            ),
            Which::Nv2(v) => Step::dispatch(
                v,
                coop2_peak::Buffers { a, y },
                coop2_peak::Params { iters },
                groups,
            ),
        }
    }
}

struct Probe {
    which: Which,
    /// Floating-point operations of one iteration of one workgroup.
    flops_per_iter: f64,
    /// Elements workgroup 0 stores, and what each must be after `iters` iterations.
    outputs: usize,
    expect: fn(u32) -> f32,
    /// Workgroups and iterations, when not the report's defaults.
    shape: Option<(u32, u32)>,
}

/// A KHR probe: 4 subgroups x 16 products of 16x16x16 per iteration; each accumulator ends at
/// iters / 16.
const fn khr(variant: coop_peak::Variant) -> Probe {
    Probe {
        which: Which::Khr(variant),
        flops_per_iter: 16.0 * 4.0 * 2.0 * 4096.0,
        outputs: 4 * 16 * 256,
        expect: |iters| iters as f32 / 16.0,
        shape: None,
    }
}

/// An NV2 probe with a 128 x `bn` accumulator, 32 deep: each element ends at iters * 32 / 256.
/// The NV2 probe reads its operands `a` (all 1/16 in f16).
const fn nv2(variant: coop2_peak::Variant, bn: usize, shape: Option<(u32, u32)>) -> Probe {
    Probe {
        which: Which::Nv2(variant),
        flops_per_iter: 2.0 * 128.0 * bn as f64 * 32.0,
        outputs: 128 * bn,
        expect: |iters| iters as f32 * 32.0 / 256.0,
        shape,
    }
}

const PROBES: &[Probe] = &[
    khr(coop_peak::Variant::Regs),
    khr(coop_peak::Variant::Shared),
    nv2(coop2_peak::Variant::Regs, 256, None),
    nv2(coop2_peak::Variant::Global, 256, None),
    nv2(coop2_peak::Variant::Strided, 256, None),
    // One 4096^3 product: 512 tiles of 128 x 256, 128 steps of 32 each.
    nv2(coop2_peak::Variant::Big, 256, Some((512, 128))),
    nv2(coop2_peak::Variant::NarrowRegs, 128, None),
];

/// The operand buffer of test_coop2_peak, large enough for its `big` variant's two 4096 x
/// 4096 matrices, all 1/16.
fn operands(gpu: &Gpu) -> GpuBuffer {
    let halves = 2 * 4096 * 4096;
    let bytes: Vec<u8> = std::iter::repeat_n(half::f16::from_f32(1.0 / 16.0).to_le_bytes(), halves)
        .flatten()
        .collect();
    // In device memory, so the reloading variants read from the GPU's own caches and memory.
    device_copy(gpu, &bytes, "probe operands").unwrap()
}

fn main() {
    let Some(gpu) = test_gpu() else { return };
    if gpu.info().is_cpu {
        println!(
            "{}: a CPU implementation; nothing to measure",
            gpu.info().name
        );
        return;
    }
    let have = gpu.info().shader_features;
    let a = operands(gpu);
    let mut rows = Vec::new();
    for probe in PROBES {
        // By default several workgroups per multiprocessor on any current GPU, and enough
        // iterations that one dispatch runs for milliseconds.
        let (groups, iters) = probe.shape.unwrap_or((1024, 4096));
        let kernel = probe.which.kernel();
        if !kernel.needs().met_by(have) {
            println!("{kernel}: not supported by {}", gpu.info().name);
            continue;
        }
        let y = gpu
            .create_buffer(4 * probe.outputs as u64, MemoryUse::Device, "probe y")
            .unwrap();
        let back = gpu
            .create_buffer(4 * probe.outputs as u64, MemoryUse::Readback, "probe back")
            .unwrap();
        let dispatch = probe
            .which
            .dispatch(a.address(), y.address(), iters, groups);
        let list = gpu
            .record(&[
                dispatch,
                Step::Barrier,
                Step::Copy {
                    src: &y,
                    src_offset: 0,
                    dst: &back,
                    dst_offset: 0,
                    bytes: y.size(),
                },
            ])
            .unwrap();
        let mut times = Vec::new();
        for run in 0..6 {
            let t = Instant::now();
            let v = gpu.submit(&list).unwrap();
            assert!(gpu.wait(v, LONG).unwrap());
            // The first run warms the clocks and compiles nothing (recording did): left out.
            if run > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        let mut out = vec![0f32; probe.outputs];
        back.read(0, bytemuck::cast_slice_mut(&mut out)).unwrap();
        let want = (probe.expect)(iters);
        let wrong = out.iter().filter(|&&x| x != want).count();
        assert_eq!(
            wrong, 0,
            "{}: {wrong} of {} accumulators differ from {want} (first {})",
            kernel, probe.outputs, out[0]
        );
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let tflops = probe.flops_per_iter * f64::from(iters) * f64::from(groups) / median / 1e12;
        rows.push((kernel, groups, iters, median * 1e3, tflops));
    }
    println!("\n{}: tensor-core probes", gpu.info().name);
    println!("| shader | workgroups | iterations | ms | TFLOP/s |\n|---|---:|---:|---:|---:|");
    for (shader, groups, iters, ms, tflops) in rows {
        println!("| {shader} | {groups} | {iters} | {ms:.3} | {tflops:.1} |");
    }
}
