//! Each GEMM kernel alone (no model around it, operands in device memory), in TFLOP/s:
//! `cargo bench -p vkml-ops --bench coop_gemm` on a GPU. Beside vkml-vulkan's `coop` bench (the
//! tensor cores' rate with nothing else in the way) it says how far each kernel is from the
//! rate its matrix operations can reach.
//!
//! The kernels come through the ops' public API, as a session gets them: a MatMul or Gemm op's
//! preferred kernels under each `CoopKernels` choice. Three products per half type reach the
//! three kinds of gemm_coop2 and gemm_coop kernel: whole tiles (`exact`), aligned operands with
//! edge tiles (M = 4000: gemm_coop2's `a8`, gemm_coop with bounds), and rows off 16-byte
//! boundaries (K = 4092: gemm_coop2's general kernel, gemm_coop_any).

use std::time::Instant;

use vkml_ops::tuning::CoopKernels;
use vkml_ops::{
    AttrValue, Attrs, DType, GpuKernel, InferInput, KernelTuning, NodeSpec, Op, Tensor, ValueType,
};
use vkml_testkit::kernel::KernelTimer;

mod common;
use common::kernel_run;

fn op(op_type: &str, attrs: Vec<(&str, AttrValue)>, inputs: usize) -> Box<dyn Op> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    vkml_ops::build(&NodeSpec {
        name: "bench",
        op_type,
        attrs: &attrs,
        opset: 13,
        num_inputs: inputs,
        num_outputs: 1,
    })
    .expect("the op builds")
}

/// Operands of `shape` in `dtype`, every element 1/16: the products stay exact, and what is
/// timed does not depend on the values.
fn operand(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    match dtype {
        DType::F16 => Tensor::from_vec(shape.to_vec(), vec![half::f16::from_f32(0.0625); n]),
        DType::BF16 => Tensor::from_vec(shape.to_vec(), vec![half::bf16::from_f32(0.0625); n]),
        _ => Tensor::from_vec(shape.to_vec(), vec![0.0625f32; n]),
    }
}

/// A product to time: its label, the op, its operands, its output's type and its flops.
struct Product {
    label: String,
    op: Box<dyn Op>,
    inputs: Vec<Tensor>,
    out: ValueType,
    flops: f64,
}

fn products() -> Vec<Product> {
    let mut out = Vec::new();
    for dtype in [DType::F16, DType::BF16] {
        for (m, k, n, what) in [
            (4096, 4096, 4096, "whole tiles"),
            (4000, 4096, 4096, "edge tiles"),
            (4096, 4092, 4096, "rows off 16 bytes"),
        ] {
            out.push(Product {
                label: format!("{dtype} {m}x{k}x{n} ({what})"),
                op: op("MatMul", vec![], 2),
                inputs: vec![operand(dtype, &[m, k]), operand(dtype, &[k, n])],
                out: ValueType::new(dtype, vec![m, n]),
                flops: 2.0 * (m * n * k) as f64,
            });
        }
    }
    // A B^T (Gemm transB, a linear layer's usual weights): B stored N x K.
    out.push(Product {
        label: "float16 4096^3, B transposed".into(),
        op: op("Gemm", vec![("transB", AttrValue::Int(1))], 2),
        inputs: vec![
            operand(DType::F16, &[4096, 4096]),
            operand(DType::F16, &[4096, 4096]),
        ],
        out: ValueType::new(DType::F16, vec![4096, 4096]),
        flops: 2.0 * 4096f64.powi(3),
    });
    out
}

fn median(timer: &KernelTimer<'_>, runs: usize) -> f64 {
    let mut t = timer.time(runs).expect("the kernel runs");
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let Some(gpu) = vkml_testkit::test_gpu() else {
        println!("no GPU (VKML_SKIP_VULKAN=1): nothing to time");
        return;
    };
    let have = gpu.info().shader_features;
    let modes = [
        (CoopKernels::Nv2Wide, "nv2 128x256"),
        (CoopKernels::Nv2Narrow, "nv2 128x128"),
        (CoopKernels::Khr, "khr 128x128"),
    ];
    let mut jobs: Vec<(String, f64, KernelTimer<'_>)> = Vec::new();
    let mut add = |label: String, kernel: &GpuKernel, p: &Product| {
        if !kernel
            .dispatches
            .iter()
            .all(|d| d.kernel().needs().met_by(have))
        {
            return;
        }
        let inputs: Vec<Option<&[u8]>> = p.inputs.iter().map(|t| Some(&t.bytes()[..])).collect();
        let out = [p.out.bytes() as u64];
        let timer = KernelTimer::new(gpu, &kernel_run(kernel), &inputs, &out).unwrap();
        jobs.push((label, p.flops, timer));
    };
    for p in &products() {
        let types: Vec<ValueType> = p.inputs.iter().map(ValueType::of).collect();
        let planned: Vec<Option<InferInput<'_>>> = types
            .iter()
            .map(|ty| Some(InferInput { ty, value: None }))
            .collect();
        for (mode, what) in modes {
            let tuning = KernelTuning {
                gemm_coop: mode,
                ..KernelTuning::default()
            };
            let outs = std::slice::from_ref(&p.out);
            if let Some(k) = p.op.gpu_preferred(&planned, outs, &tuning).first() {
                let label = format!("{} {what} ({})", p.label, k.dispatches[0].kernel());
                add(label, k, p);
            }
        }
    }
    // The f32 kernel every GPU runs, for scale.
    let f32 = Product {
        label: "float32 4096^3".into(),
        op: op("MatMul", vec![], 2),
        inputs: vec![
            operand(DType::F32, &[4096, 4096]),
            operand(DType::F32, &[4096, 4096]),
        ],
        out: ValueType::new(DType::F32, vec![4096, 4096]),
        flops: 2.0 * 4096f64.powi(3),
    };
    let types: Vec<ValueType> = f32.inputs.iter().map(ValueType::of).collect();
    let refs: Vec<Option<&ValueType>> = types.iter().map(Some).collect();
    if let Some(k) = f32.op.gpu(&refs, std::slice::from_ref(&f32.out)) {
        add(
            format!("{} ({})", f32.label, k.dispatches[0].kernel()),
            &k,
            &f32,
        );
    }
    let Some((_, _, first)) = jobs.first() else {
        println!("{}: no kernel to time", gpu.info().name);
        return;
    };
    // Ten seconds of work first (an idle GPU takes seconds to reach its clocks), then each
    // kernel's best median of three rounds of ten, so one timed while the clocks still moved
    // is not held against it.
    let start = Instant::now();
    while start.elapsed().as_secs() < 10 {
        median(first, 50);
    }
    let mut best = vec![f64::MAX; jobs.len()];
    for _ in 0..3 {
        for ((_, _, timer), best) in jobs.iter().zip(&mut best) {
            *best = best.min(median(timer, 10));
        }
    }
    println!("\n{}: GEMM kernels alone", gpu.info().name);
    println!("| kernel | TFLOP/s |\n|---|---:|");
    for ((label, flops, _), t) in jobs.iter().zip(best) {
        println!("| {label} | {:.1} |", flops / t / 1e12);
    }
}
