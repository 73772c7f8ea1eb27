//! MatMulNBits alone, as an int4 LLM's linear layers run it: `cargo bench -p vkml-ops --bench
//! matmul_nbits`. A 4096 x 4096 weight in 4-bit blocks of 32 with packed zero points (the
//! model builder's asymmetric layout), A of 1 and 4 rows (decode: the GEMV kernel, memory-bound,
//! reported as the rate B's packed bytes are read at) and of 64 and 512 rows (prefill: the
//! tiled kernel, in TFLOP/s); the CPU kernel beside each, on this machine's cores.

use std::time::Instant;

use vkml_ops::{
    AttrValue, Attrs, DType, InferInput, KernelTuning, MS_DOMAIN, NodeSpec, Op, Tensor, ValueType,
};
use vkml_testkit::kernel::KernelTimer;

mod common;
use common::kernel_run;

const K: usize = 4096;
const N: usize = 4096;
const BLOCK: usize = 32;

fn op() -> Box<dyn Op> {
    let attrs = Attrs(
        [("K", K), ("N", N), ("bits", 4), ("block_size", BLOCK)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), AttrValue::Int(v as i64)))
            .collect(),
    );
    vkml_ops::build_in(
        MS_DOMAIN,
        &NodeSpec {
            name: "bench",
            op_type: "MatMulNBits",
            attrs: &attrs,
            opset: 13,
            num_inputs: 4,
            num_outputs: 1,
        },
    )
    .expect("the op builds")
}

/// Deterministic bytes (what is timed does not depend on the values).
fn bytes(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

/// A, B, scales, zero points for `m` rows of A in `dtype`.
fn inputs(m: usize, dtype: DType) -> Vec<Tensor> {
    let kb = K / BLOCK;
    let float = |shape: Vec<usize>, v: f32| -> Tensor {
        let n = shape.iter().product();
        match dtype {
            DType::F16 => Tensor::from_vec(shape, vec![half::f16::from_f32(v); n]),
            _ => Tensor::from_vec(shape, vec![v; n]),
        }
    };
    vec![
        float(vec![m, K], 0.25),
        Tensor::from_vec(vec![N, kb, BLOCK / 2], bytes(N * K / 2, 1)),
        float(vec![N, kb], 0.01),
        Tensor::from_vec(vec![N, kb / 2], bytes(N * kb / 2, 2)),
    ]
}

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let op = op();
    let gpu = vkml_testkit::test_gpu();
    let have = gpu.map(|g| g.info().shader_features);
    println!(
        "\nMatMulNBits {K}x{N}, 4-bit blocks of {BLOCK}, packed zero points: GPU {}",
        gpu.map_or("none (VKML_SKIP_VULKAN=1)".into(), |g| g
            .info()
            .name
            .clone())
    );
    println!("| A | kernel | GPU us | GPU rate | CPU us |\n|---|---|---:|---:|---:|");
    let mut warmed = false;
    for dtype in [DType::F32, DType::F16] {
        for m in [1, 4, 64, 512] {
            let ins = inputs(m, dtype);
            let types: Vec<ValueType> = ins.iter().map(ValueType::of).collect();
            let planned: Vec<Option<InferInput<'_>>> = types
                .iter()
                .map(|ty| Some(InferInput { ty, value: None }))
                .collect();
            let out = op.infer(&planned).expect("the inputs fit");
            let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
            let runs = if m > 64 { 3 } else { 10 };
            let cpu = median(
                (0..runs)
                    .map(|_| {
                        let t = Instant::now();
                        op.run_cpu(&refs, &out).expect("the CPU kernel runs");
                        t.elapsed().as_secs_f64()
                    })
                    .collect(),
            );
            let kernel = op.gpu_planned(&planned, &out, &KernelTuning::default());
            let (name, gpu_t) = match (gpu, kernel) {
                (Some(g), Some(k))
                    if k.dispatches
                        .iter()
                        .all(|d| d.kernel().needs().met_by(have.expect("a GPU"))) =>
                {
                    let bytes: Vec<Option<&[u8]>> =
                        ins.iter().map(|t| Some(&t.bytes()[..])).collect();
                    let timer =
                        KernelTimer::new(g, &kernel_run(&k), &bytes, &[out[0].bytes() as u64])
                            .expect("the kernel records");
                    if !warmed {
                        // An idle GPU takes seconds to reach its clocks.
                        let start = Instant::now();
                        while start.elapsed().as_secs() < 5 {
                            timer.time(10).expect("the kernel runs");
                        }
                        warmed = true;
                    }
                    let t = median(timer.time(runs).expect("the kernel runs"));
                    (k.dispatches[0].kernel().to_string(), Some(t))
                }
                _ => ("-".to_string(), None),
            };
            let rate = gpu_t.map_or("-".into(), |t| {
                if m <= 4 {
                    format!("{:.0} GB/s", (N * K / 2) as f64 / t / 1e9)
                } else {
                    format!("{:.2} TFLOP/s", 2.0 * (m * N * K) as f64 / t / 1e12)
                }
            });
            println!(
                "| {dtype}[{m}, {K}] | {name} | {} | {rate} | {:.0} |",
                gpu_t.map_or("-".into(), |t| format!("{:.0}", t * 1e6)),
                cpu * 1e6
            );
        }
    }
}
