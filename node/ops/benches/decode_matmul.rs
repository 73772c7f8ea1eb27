//! A decode step's matrix products alone on a GPU: `cargo bench -p vkml-ops --bench
//! decode_matmul [-- 1b|8b]`. For each projection of a Llama-shaped model (one row of A, as in
//! generating one token) it times the f16 MatMul through gemv.comp at every lane count of both
//! its workgroup sizes, with K split at a few lane and slice counts, and
//! through the kernel the op would take without it (tensor cores where the GPU has them, else
//! the f16 tiles), and the int4 MatMulNBits GEMV, each as the rate its weights are read at.
//! Each kernel runs many times in one command buffer with a barrier between runs, as dependent
//! ops of a model do, so the figure includes what a barrier costs; the last lines sum a
//! token's products over the layers. The cold columns read B from a different copy in each
//! run (256 MB of copies in all), so that it comes from memory as a model's weights do rather
//! than from the L2 cache that holds a small B repeated.

use std::time::Instant;

use vkml_ops::tuning::Gemv;
use vkml_ops::{
    AttrValue, Attrs, DType, GpuKernel, InferInput, KernelTuning, MS_DOMAIN, NodeSpec, Op, Tensor,
    ValueType,
};
use vkml_testkit::kernel::{KernelTimer, Slot};
use vkml_vulkan::Gpu;

mod common;
use common::kernel_run_repeated;

/// A model's shape: hidden size, key/value width, MLP width, vocabulary, layers.
struct Shape {
    name: &'static str,
    hidden: usize,
    kv: usize,
    mlp: usize,
    vocab: usize,
    layers: usize,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "1b",
        hidden: 2048,
        kv: 512,
        mlp: 8192,
        vocab: 128_256,
        layers: 16,
    },
    Shape {
        name: "8b",
        hidden: 4096,
        kv: 1024,
        mlp: 14_336,
        vocab: 128_256,
        layers: 32,
    },
];

/// The projections of one token: (name, K, N, times per token).
fn projections(s: &Shape) -> Vec<(&'static str, usize, usize, usize)> {
    vec![
        ("q, o", s.hidden, s.hidden, 2 * s.layers),
        ("k, v", s.hidden, s.kv, 2 * s.layers),
        ("gate, up", s.hidden, s.mlp, 2 * s.layers),
        ("down", s.mlp, s.hidden, s.layers),
        ("lm_head", s.hidden, s.vocab, 1),
    ]
}

fn build(op_type: &str, domain: &str, attrs: &[(&str, i64)], inputs: usize) -> Box<dyn Op> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), AttrValue::Int(*v)))
            .collect(),
    );
    vkml_ops::build_in(
        domain,
        &NodeSpec {
            name: "bench",
            op_type,
            attrs: &attrs,
            opset: 13,
            num_inputs: inputs,
            num_outputs: 1,
        },
    )
    .expect("the op builds")
}

fn half(shape: Vec<usize>, v: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, vec![half::f16::from_f32(v); n])
}

/// The best median of a few rounds of `timer`, per run of the `repeat` in its list.
fn per_run(timer: &KernelTimer, repeat: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let mut t = timer.time(7).expect("the kernel runs");
        t.sort_by(f64::total_cmp);
        best = best.min(t[t.len() / 2]);
    }
    best / repeat as f64
}

/// One kernel's time per run, in seconds: runs repeated in one list so that the list's
/// fixed cost is spread thin, best median of a few rounds.
fn time(gpu: &Gpu, k: &GpuKernel, inputs: &[Tensor], out: &ValueType, bytes: usize) -> f64 {
    let repeat = (256usize << 20).div_ceil(bytes).clamp(4, 200);
    let ins: Vec<Option<&[u8]>> = inputs.iter().map(|t| Some(&t.bytes()[..])).collect();
    let timer = KernelTimer::new(
        gpu,
        &kernel_run_repeated(k, repeat),
        &ins,
        &[out.bytes() as u64],
    )
    .expect("the kernel records");
    per_run(&timer, repeat)
}

/// [`time`] with B (input 1) read from a different copy in each run, enough copies for
/// 256 MB in all, so that B comes from memory as in a model, where each layer's weights are
/// read once a token, rather than from the 50 MB L2 cache that holds a small B repeated.
fn time_cold(gpu: &Gpu, k: &GpuKernel, inputs: &[Tensor], out: &ValueType, bytes: usize) -> f64 {
    let repeat = (256usize << 20).div_ceil(bytes).clamp(4, 200);
    let copies = (256usize << 20).div_ceil(bytes).clamp(1, repeat);
    let mut run = kernel_run_repeated(k, repeat);
    let dispatches = run.dispatches.len() / repeat;
    for (i, d) in run.dispatches.iter_mut().enumerate() {
        for slot in &mut d.slots {
            match slot {
                Slot::Input(1) => *slot = Slot::Input(1 + (i / dispatches) % copies),
                // The inputs after B (MatMulNBits' scales) follow the copies.
                Slot::Input(j) if *j > 1 => *slot = Slot::Input(*j + copies - 1),
                _ => {}
            }
        }
    }
    let b = &inputs[1].bytes()[..];
    let ins: Vec<Option<&[u8]>> = std::iter::once(Some(&inputs[0].bytes()[..]))
        .chain((0..copies).map(|_| Some(b)))
        .chain(inputs[2..].iter().map(|t| Some(&t.bytes()[..])))
        .collect();
    let timer = KernelTimer::new(gpu, &run, &ins, &[out.bytes() as u64]).expect("records");
    per_run(&timer, repeat)
}

fn types(inputs: &[Tensor]) -> Vec<ValueType> {
    inputs.iter().map(ValueType::of).collect()
}

/// The kernels of the f16 product [1, K] x [K, N] worth timing: (label, kernel).
fn f16_kernels(gpu: &Gpu, k: usize, n: usize) -> (Vec<Tensor>, Vec<(String, GpuKernel)>) {
    let op = build("MatMul", "", &[], 2);
    let inputs = vec![half(vec![1, k], 0.01), half(vec![k, n], 0.01)];
    let ty = types(&inputs);
    let planned: Vec<Option<InferInput<'_>>> = ty
        .iter()
        .map(|ty| Some(InferInput { ty, value: None }))
        .collect();
    let out = [ValueType::new(DType::F16, vec![1, n])];
    let have = gpu.info().shader_features;
    let mut kernels = Vec::new();
    let lanes = [1u8, 2, 4, 8, 16, 32];
    let modes = std::iter::once((Gemv::Auto, "gemv auto".to_string()))
        .chain(lanes.iter().map(|&l| (Gemv::Lanes(l), format!("gemv {l}"))))
        .chain(
            lanes
                .iter()
                .map(|&l| (Gemv::Wide(l), format!("gemv wide {l}"))),
        )
        .chain(std::iter::once((Gemv::Unsplit, "gemv unsplit".to_string())))
        .chain(
            [
                (16u8, 4u8),
                (16, 8),
                (16, 16),
                (16, 32),
                (8, 8),
                (8, 16),
                (32, 8),
                (32, 16),
            ]
            .map(|(l, s)| (Gemv::Split(l, s), format!("gemv {l}x{s}"))),
        )
        .chain(
            [
                (2u8, 1u8),
                (4, 1),
                (8, 1),
                (16, 1),
                (32, 1),
                (8, 2),
                (8, 4),
                (16, 2),
                (16, 4),
                (16, 8),
                (32, 4),
                (32, 8),
            ]
            .map(|(l, s)| (Gemv::Row(l, s), format!("gemv row {l}x{s}"))),
        )
        .chain(std::iter::once((Gemv::Off, "without gemv".to_string())));
    for (mode, label) in modes {
        let tuning = KernelTuning {
            gemv: mode,
            ..KernelTuning::default()
        };
        let preferred = op.gpu_preferred(&planned, &out, &tuning);
        let chosen = preferred
            .into_iter()
            .find(|k| k.dispatches.iter().all(|d| d.kernel().needs().met_by(have)))
            .or_else(|| op.gpu_planned(&planned, &out, &tuning));
        if let Some(kernel) = chosen {
            let name = format!("{label} ({})", kernel.dispatches[0].kernel());
            kernels.push((name, kernel));
        }
    }
    (inputs, kernels)
}

/// MatMulNBits' int4 product [1, K] x B (blocks of 32, f16 scales, no zero points).
fn int4_kernel(k: usize, n: usize) -> (Vec<Tensor>, Option<GpuKernel>, usize) {
    let op = build(
        "MatMulNBits",
        MS_DOMAIN,
        &[
            ("K", k as i64),
            ("N", n as i64),
            ("bits", 4),
            ("block_size", 32),
        ],
        3,
    );
    let blocks = k / 32;
    let inputs = vec![
        half(vec![1, k], 0.01),
        Tensor::from_vec(vec![n, blocks, 16], vec![0x77u8; n * k / 2]),
        half(vec![n, blocks], 0.01),
    ];
    let ty = types(&inputs);
    let planned: Vec<Option<InferInput<'_>>> = ty
        .iter()
        .map(|ty| Some(InferInput { ty, value: None }))
        .collect();
    let out = [ValueType::new(DType::F16, vec![1, n])];
    let kernel = op.gpu_planned(&planned, &out, &KernelTuning::default());
    (inputs, kernel, n * k / 2 + n * blocks * 2)
}

fn main() {
    let Some(gpu) = vkml_testkit::test_gpu() else {
        println!("no GPU (VKML_SKIP_VULKAN=1): nothing to time");
        return;
    };
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!("decode products on {}", gpu.info().name);
    println!(
        "| shape | product | K x N | kernel | us | GB/s | cold us | cold GB/s |\n\
         |---|---|---|---|---:|---:|---:|---:|"
    );
    let warm = Instant::now();
    for s in SHAPES
        .iter()
        .filter(|s| only.as_deref().is_none_or(|o| o == s.name))
    {
        // Seconds per token of each kind: the best f16 kernel, gemv auto, without gemv, int4,
        // gemv auto cold, gemv unsplit cold.
        let mut token = [0.0f64; 6];
        for (what, k, n, times) in projections(s) {
            let (inputs, kernels) = f16_kernels(gpu, k, n);
            let out = ValueType::new(DType::F16, vec![1, n]);
            let bytes = k * n * 2;
            if warm.elapsed().as_secs() < 5 {
                // An idle GPU takes seconds to reach its clocks.
                let (_, first) = &kernels[0];
                while warm.elapsed().as_secs() < 5 {
                    time(gpu, first, &inputs, &out, bytes);
                }
            }
            let mut best = f64::MAX;
            for (label, kernel) in &kernels {
                let t = time(gpu, kernel, &inputs, &out, bytes);
                let cold = time_cold(gpu, kernel, &inputs, &out, bytes);
                best = best.min(t);
                if label.starts_with("gemv auto") {
                    token[1] += t * times as f64;
                    token[4] += cold * times as f64;
                }
                if label.starts_with("gemv unsplit") {
                    token[5] += cold * times as f64;
                }
                if label.starts_with("without") {
                    token[2] += t * times as f64;
                }
                println!(
                    "| {} | {what} | {k} x {n} | f16 {label} | {:.1} | {:.0} | {:.1} | {:.0} |",
                    s.name,
                    t * 1e6,
                    bytes as f64 / t / 1e9,
                    cold * 1e6,
                    bytes as f64 / cold / 1e9
                );
            }
            token[0] += best * times as f64;
            drop(inputs);
            let (inputs, kernel, bytes) = int4_kernel(k, n);
            if let Some(kernel) = kernel {
                let t = time(gpu, &kernel, &inputs, &out, bytes);
                let cold = time_cold(gpu, &kernel, &inputs, &out, bytes);
                token[3] += t * times as f64;
                println!(
                    "| {} | {what} | {k} x {n} | int4 ({}) | {:.1} | {:.0} | {:.1} | {:.0} |",
                    s.name,
                    kernel.dispatches[0].kernel(),
                    t * 1e6,
                    bytes as f64 / t / 1e9,
                    cold * 1e6,
                    bytes as f64 / cold / 1e9
                );
            }
        }
        println!(
            "{}: a token's products take {:.3} ms in f16 with the best lane count, {:.3} with \
             gemv auto ({:.3} with B cold; unsplit {:.3} cold), {:.3} without gemv; {:.3} in \
             int4",
            s.name,
            token[0] * 1e3,
            token[1] * 1e3,
            token[4] * 1e3,
            token[5] * 1e3,
            token[2] * 1e3,
            token[3] * 1e3
        );
    }
}
