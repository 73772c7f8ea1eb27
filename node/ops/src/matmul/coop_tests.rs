//! The tensor-core kernels (coop.rs) on the test GPU, against products computed here in f64
//! from the same half-precision inputs. Each kernel runs only where the GPU has the features
//! its shaders need (lavapipe has none: there these tests check nothing and say so).

use super::MatMul;
use super::coop::kernels_in;
use crate::KernelTuning;
use crate::tensor::{DType, Tensor};
use crate::testkit::gpu as testing;
use crate::testkit::{Rng, build, f64s};
use crate::tuning::CoopKernels;
use crate::{AttrValue, GpuKernel, InferInput, Kernel, Op, ValueType};
use vkml_shaders::{gemm_coop, gemm_coop2};

/// gemm_coop's kernel for a layout pair (A, B transposed or not), `exact` or with bounds.
fn khr_kernel(ta: bool, tb: bool, exact: bool, dtype: DType) -> Kernel {
    use gemm_coop::Variant as V;
    let v = match (ta, tb, exact, dtype == DType::F16) {
        (false, false, false, true) => V::NnF16,
        (false, true, false, true) => V::NtF16,
        (true, false, false, true) => V::TnF16,
        (true, true, false, true) => V::TtF16,
        (false, false, true, true) => V::NnExactF16,
        (false, true, true, true) => V::NtExactF16,
        (true, false, true, true) => V::TnExactF16,
        (true, true, true, true) => V::TtExactF16,
        (false, false, false, false) => V::NnBf16,
        (false, true, false, false) => V::NtBf16,
        (true, false, false, false) => V::TnBf16,
        (true, true, false, false) => V::TtBf16,
        (false, false, true, false) => V::NnExactBf16,
        (false, true, true, false) => V::NtExactBf16,
        (true, false, true, false) => V::TnExactBf16,
        (true, true, true, false) => V::TtExactBf16,
    };
    v.kernel()
}

/// Whether `k` is one of gemm_coop2's kernels, and whether one of its `exact` ones.
fn nv2_kind(k: Kernel) -> Option<bool> {
    use gemm_coop2::Variant as V;
    let exact = [V::ExactF16, V::ExactBf16, V::ExactWideF16, V::ExactWideBf16];
    V::ALL
        .iter()
        .any(|v| v.kernel() == k)
        .then(|| exact.iter().any(|v| v.kernel() == k))
}

fn random_half(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.next_u64() % 20_001) as f64 / 10_000.0 - 1.0)
        .collect();
    match dtype {
        DType::F16 => Tensor::from_vec(
            shape.to_vec(),
            v.iter().map(|&x| half::f16::from_f64(x)).collect(),
        ),
        DType::BF16 => Tensor::from_vec(
            shape.to_vec(),
            v.iter().map(|&x| half::bf16::from_f64(x)).collect(),
        ),
        other => panic!("not a half type: {other}"),
    }
}

/// Y[z] = alpha * A'[z] B'[z] + beta * C in f64: A' is m x k at `a(z, i, p)`, B' k x n at
/// `b(z, p, j)`, C broadcast by `c(i, j)`.
#[allow(clippy::too_many_arguments)]
fn reference(
    batch: usize,
    (m, n, k): (usize, usize, usize),
    a: impl Fn(usize, usize, usize) -> f64,
    b: impl Fn(usize, usize, usize) -> f64,
    alpha: f64,
    beta: f64,
    c: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    let mut y = vec![0.0; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| a(z, i, p) * b(z, p, j)).sum();
                y[(z * m + i) * n + j] = alpha * dot + beta * c(i, j);
            }
        }
    }
    y
}

/// A B for row-major m x k A and k x n B, in f64.
fn plain_product(av: &[f64], bv: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    reference(
        1,
        (m, n, k),
        |_, i, p| av[i * k + p],
        |_, p, j| bv[p * n + j],
        1.0,
        0.0,
        |_, _| 0.0,
    )
}

/// Runs every preferred kernel of `op` the test GPU can run on `inputs`; each must give `want`
/// within 1e-2 of the output's scale (the rounding of a half-precision result, plus f32
/// accumulation in another order). Returns the shaders run.
fn check(op: &dyn Op, inputs: &[Option<&Tensor>], want: &[f64], what: &str) -> Vec<Kernel> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let planned: Vec<Option<InferInput<'_>>> = types
        .iter()
        .zip(inputs)
        .map(|(ty, t)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
        .collect();
    let outs = op.infer(&planned).expect("shape rule");
    let kernels = op.gpu_preferred(&planned, &outs, &KernelTuning::default());
    check_kernels(&kernels, inputs, &outs, want, what)
}

fn check_kernels(
    kernels: &[GpuKernel],
    inputs: &[Option<&Tensor>],
    outs: &[ValueType],
    want: &[f64],
    what: &str,
) -> Vec<Kernel> {
    let Some(gpu) = vkml_testkit::test_gpu() else {
        return Vec::new();
    };
    assert!(!kernels.is_empty(), "{what}: no tensor-core kernel offered");
    let scale = want.iter().map(|v| v * v).sum::<f64>().sqrt() / (want.len() as f64).sqrt();
    let mut ran = Vec::new();
    for k in kernels {
        let shader = k.dispatches[0].kernel();
        if !shader.needs().met_by(gpu.info().shader_features) {
            continue;
        }
        let got = testing::run_kernel_on(gpu, k, inputs, outs)
            .unwrap_or_else(|e| panic!("{what}: {shader} failed: {e}"));
        assert_eq!(ValueType::of(&got[0]), outs[0], "{what}: {shader}");
        let got = f64s(&got[0]);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-2 * (w.abs() + scale),
                "{what}: {shader}: element {i} is {g}, want {w} (scale {scale})"
            );
        }
        ran.push(shader);
    }
    if ran.is_empty() {
        eprintln!("{what}: this GPU has no tensor-core path; nothing checked");
    }
    ran
}

#[test]
fn gpu_coop_matmul_matches_f64() {
    for dtype in [DType::F16, DType::BF16] {
        let mut rng = Rng::new(11);
        // Edges in every direction (M, N and K are not multiples of the tiles), then whole
        // 128x128x32 tiles (the `exact` kernel), aligned and batched further down.
        for (m, k, n) in [(300, 200, 260), (256, 96, 384)] {
            let a = random_half(&mut rng, &[m, k], dtype);
            let b = random_half(&mut rng, &[k, n], dtype);
            let (av, bv) = (f64s(&a), f64s(&b));
            let want = plain_product(&av, &bv, (m, k, n));
            let op = build("MatMul", 13, &[]).unwrap();
            let ran = check(
                &*op,
                &[Some(&a), Some(&b)],
                &want,
                &format!("{dtype} matmul {m}x{k}x{n}"),
            );
            if let Some(exact) = ran.first().and_then(|&k| nv2_kind(k)) {
                assert_eq!(exact, m == 256, "{:?}", ran[0]);
            }
        }
        let op = build("MatMul", 13, &[]).unwrap();

        // Batched, B broadcast over the batch.
        let (m, k, n) = (130, 72, 150);
        let a = random_half(&mut rng, &[2, 3, m, k], dtype);
        let b = random_half(&mut rng, &[k, n], dtype);
        let (av, bv) = (f64s(&a), f64s(&b));
        let want = reference(
            6,
            (m, n, k),
            |z, i, p| av[(z * m + i) * k + p],
            |_, p, j| bv[p * n + j],
            1.0,
            0.0,
            |_, _| 0.0,
        );
        check(
            &*op,
            &[Some(&a), Some(&b)],
            &want,
            &format!("{dtype} batched matmul"),
        );
    }
}

#[test]
fn gpu_coop_gemm_transposes_scale_and_bias_match_f64() {
    // (200, 136, 190): unaligned or partial fragments (gemm_coop2, gemm_coop_any);
    // (208, 136, 176): gemm_coop's variants with bounds, alpha and C, in every layout.
    for (dtype, (m, k, n)) in [
        (DType::F16, (200, 136, 190)),
        (DType::BF16, (200, 136, 190)),
        (DType::F16, (208, 136, 176)),
        (DType::BF16, (208, 136, 176)),
    ] {
        let mut rng = Rng::new(12);
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let a = random_half(&mut rng, &if ta { [k, m] } else { [m, k] }, dtype);
            let b = random_half(&mut rng, &if tb { [n, k] } else { [k, n] }, dtype);
            let c = random_half(&mut rng, &[n], dtype);
            let (av, bv, cv) = (f64s(&a), f64s(&b), f64s(&c));
            let (alpha, beta) = (0.5, -2.0);
            let want = reference(
                1,
                (m, n, k),
                |_, i, p| if ta { av[p * m + i] } else { av[i * k + p] },
                |_, p, j| if tb { bv[j * k + p] } else { bv[p * n + j] },
                alpha,
                beta,
                |_, j| cv[j],
            );
            let op = build(
                "Gemm",
                13,
                &[
                    ("alpha", AttrValue::Float(alpha as f32)),
                    ("beta", AttrValue::Float(beta as f32)),
                    ("transA", AttrValue::Int(ta as i64)),
                    ("transB", AttrValue::Int(tb as i64)),
                ],
            )
            .unwrap();
            let what = format!("{dtype} gemm {m}x{k}x{n} transA {ta} transB {tb}");
            let ran = check(&*op, &[Some(&a), Some(&b), Some(&c)], &want, &what);
            if let Some(shader) = ran.first().filter(|_| m == 208) {
                assert_eq!(*shader, khr_kernel(ta, tb, false, dtype), "{what}");
            }
        }
    }
}

#[test]
fn gpu_coop_exact_tiles_in_every_layout_match_f64() {
    // Whole 128x128x32 tiles, alpha 1 and no C: gemm_coop's `exact` variants, one per
    // layout pair (Gemm's transA/transB).
    for dtype in [DType::F16, DType::BF16] {
        let mut rng = Rng::new(14);
        let (m, k, n) = (256, 96, 128);
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let a = random_half(&mut rng, &if ta { [k, m] } else { [m, k] }, dtype);
            let b = random_half(&mut rng, &if tb { [n, k] } else { [k, n] }, dtype);
            let (av, bv) = (f64s(&a), f64s(&b));
            let want = reference(
                1,
                (m, n, k),
                |_, i, p| if ta { av[p * m + i] } else { av[i * k + p] },
                |_, p, j| if tb { bv[j * k + p] } else { bv[p * n + j] },
                1.0,
                0.0,
                |_, _| 0.0,
            );
            let op = build(
                "Gemm",
                13,
                &[
                    ("transA", AttrValue::Int(ta as i64)),
                    ("transB", AttrValue::Int(tb as i64)),
                ],
            )
            .unwrap();
            let what = format!("{dtype} exact gemm transA {ta} transB {tb}");
            let ran = check(&*op, &[Some(&a), Some(&b)], &want, &what);
            if let Some(shader) = ran.first() {
                assert_eq!(*shader, khr_kernel(ta, tb, true, dtype), "{what}");
            }
        }
    }
}

#[test]
fn gpu_coop_wide_tiles_match_f64() {
    // The 128x256 tiles of gemm_coop2's wide variant, which only products with many tiles get
    // by default; edges in every direction.
    // N = 300 leaves B's rows 8 bytes off 16-byte boundaries (the general kernel); N = 296
    // keeps every row aligned (the `a8` kernel); 256 x 512 x 128 is whole 128x256x64 tiles
    // (the `exact` kernel).
    use gemm_coop2::Variant as V;
    for (dtype, (m, k, n), kind) in [
        (DType::F16, (200, 136, 300), V::WideF16),
        (DType::BF16, (200, 136, 300), V::WideBf16),
        (DType::F16, (200, 136, 296), V::A8WideF16),
        (DType::BF16, (200, 136, 296), V::A8WideBf16),
        (DType::F16, (256, 128, 512), V::ExactWideF16),
        (DType::BF16, (256, 128, 512), V::ExactWideBf16),
    ] {
        let mut rng = Rng::new(13);
        let a = random_half(&mut rng, &[m, k], dtype);
        let b = random_half(&mut rng, &[k, n], dtype);
        let (av, bv) = (f64s(&a), f64s(&b));
        let want = plain_product(&av, &bv, (m, k, n));
        let (ta, tb) = (ValueType::of(&a), ValueType::of(&b));
        let (_, g) = MatMul::describe(&[Some(&ta), Some(&tb)]).unwrap();
        let kernels = kernels_in(&g, dtype, CoopKernels::Nv2Wide);
        assert_eq!(
            kernels[0].dispatches[0].groups,
            [n.div_ceil(256) as u32, m.div_ceil(128) as u32, 1]
        );
        assert_eq!(kernels[0].dispatches[0].kernel(), kind.kernel());
        let out = ValueType::new(dtype, vec![m, n]);
        let ran = check_kernels(
            &kernels,
            &[Some(&a), Some(&b)],
            &[out],
            &want,
            &format!("{dtype} wide tiles, n = {n}"),
        );
        if let Some(shader) = ran.first() {
            assert_eq!(*shader, kind.kernel());
        }
    }
}
