//! The integer convolutions' GPU kernel (conv/q8.rs) against their CPU kernels, which compute
//! in wide types from the definitions: every output byte or int32 must be the same, for both
//! variants (unpacked, and the dot-product instructions where the test GPU has them).

use crate::splitk::SplitK;
use crate::tensor::{DType, Tensor};
use crate::testkit::gpu::run_kernel_on;
use crate::testkit::{Rng, infer_known, node, run};
use crate::{AttrValue, InferInput, KernelTuning, Op, ValueType};

/// Random bytes of an 8-bit type.
pub(crate) fn bytes(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    Tensor::from_bytes(dtype, shape.to_vec(), v.into()).unwrap()
}

pub(crate) fn scales(rng: &mut Rng, n: usize, around: f32) -> Tensor {
    let v: Vec<f32> = (0..n)
        .map(|_| around * (1.25 + 0.5 * rng.unit() as f32))
        .collect();
    if n == 1 {
        Tensor::scalar(v[0])
    } else {
        Tensor::from_vec(vec![n], v)
    }
}

/// Zero points near the middle of the type's range (random bytes are centred there), so that
/// the sums spread around zero rather than clip: one value, or `n` of them.
pub(crate) fn zero_points(rng: &mut Rng, dtype: DType, n: Option<usize>) -> Tensor {
    let mid = if dtype == DType::U8 { 128 } else { 0 };
    let v: Vec<u8> = (0..n.unwrap_or(1))
        .map(|_| (mid + rng.range(0, 40) as i32 - 20) as u8)
        .collect();
    let shape = n.map_or(vec![], |n| vec![n]);
    Tensor::from_bytes(dtype, shape, v.into()).unwrap()
}

/// Runs `op` on the CPU and through each GPU kernel it offers, unsplit and split in three
/// along K where K allows, and compares the bytes. True when a kernel was split.
pub(crate) fn same_on_gpu(op: &dyn Op, inputs: &[Option<&Tensor>], what: &str) -> bool {
    [SplitK::Off, SplitK::Forced(3)]
        .iter()
        .map(|&split| same_on_gpu_with(op, inputs, split, &format!("{what}, {split:?}")))
        .fold(false, |a, b| a | b)
}

fn same_on_gpu_with(op: &dyn Op, inputs: &[Option<&Tensor>], split: SplitK, what: &str) -> bool {
    let cpu = run(op, inputs).unwrap_or_else(|e| panic!("{what}: CPU: {e}"));
    let Some(gpu) = vkml_testkit::test_gpu() else {
        return true;
    };
    let outs = infer_known(op, inputs).unwrap();
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let ins: Vec<Option<InferInput<'_>>> = types
        .iter()
        .zip(inputs)
        .map(|(ty, t)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
        .collect();
    let tuning = KernelTuning {
        conv_splitk: split,
        ..KernelTuning::default()
    };
    let planned = op
        .gpu_planned(&ins, &outs, &tuning)
        .unwrap_or_else(|| panic!("{what}: no GPU kernel"));
    let mut kernels = vec![planned];
    kernels.extend(op.gpu_preferred(&ins, &outs, &tuning));
    assert_eq!(
        kernels.len(),
        2,
        "{what}: the dot-product variant is offered"
    );
    let split_done = kernels[0].dispatches.len() == 2;
    for k in &kernels {
        let shader = k.dispatches[0].kernel();
        if !shader.needs().met_by(gpu.info().shader_features) {
            continue;
        }
        let got = run_kernel_on(gpu, k, inputs, &outs).unwrap();
        assert_eq!(got[0].dtype(), cpu[0].dtype(), "{what}: {shader}");
        assert_eq!(got[0].shape(), cpu[0].shape(), "{what}: {shader}");
        assert!(got[0].bytes() == cpu[0].bytes(), "{what}: {shader} differs");
    }
    split_done
}

struct Case {
    x: (DType, [usize; 4]),
    w: (DType, [usize; 4]),
    group: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
    /// Per-channel weight scales and zero points.
    per_channel: bool,
    y: DType,
    bias: bool,
}

fn attrs(c: &Case) -> Vec<(&'static str, AttrValue)> {
    vec![
        ("group", AttrValue::Int(c.group as i64)),
        ("strides", AttrValue::Ints(vec![c.stride as i64; 2])),
        ("pads", AttrValue::Ints(vec![c.pad as i64; 4])),
        ("dilations", AttrValue::Ints(vec![c.dilation as i64; 2])),
    ]
}

fn qlinear_conv(c: &Case, seed: u64) -> bool {
    let mut rng = Rng::new(seed);
    let x = bytes(&mut rng, c.x.0, &c.x.1);
    let w = bytes(&mut rng, c.w.0, &c.w.1);
    let oc = c.w.1[0];
    let per = if c.per_channel { oc } else { 1 };
    let x_scale = scales(&mut rng, 1, 0.02);
    let x_zero = zero_points(&mut rng, c.x.0, None);
    let w_scale = scales(&mut rng, per, 0.01);
    let w_zero = zero_points(&mut rng, c.w.0, (per > 1).then_some(per));
    let k = c.w.1[1] * c.w.1[2] * c.w.1[3];
    // The sums spread about 74 x 74 x sqrt(K) (more where zero points sit off the mean): a y
    // scale that maps that onto some 40 steps.
    let y_scale = scales(&mut rng, 1, 0.0002 * 150.0 * (k as f32).sqrt());
    let y_zero = zero_points(&mut rng, c.y, None);
    let bias: Vec<i32> = (0..oc)
        .map(|_| rng.range(0, 4_000) as i32 - 2_000)
        .collect();
    let bias = Tensor::from_vec(vec![oc], bias);
    let n = if c.bias { 9 } else { 8 };
    let op = node("QLinearConv", 10, attrs(c), n, 1).unwrap();
    let all = [
        &x, &x_scale, &x_zero, &w, &w_scale, &w_zero, &y_scale, &y_zero, &bias,
    ];
    let inputs: Vec<Option<&Tensor>> = all[..n].iter().map(|t| Some(*t)).collect();
    let out = run(&*op, &inputs).unwrap();
    // The case must exercise rounding, not only clipping.
    let v = out[0].to_i64_vec().unwrap();
    let (lo, hi) = if c.y == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    };
    let inside = v.iter().filter(|&&y| y > lo && y < hi).count();
    assert!(inside * 2 > v.len(), "case {seed}: mostly clipped: {v:?}");
    same_on_gpu(&*op, &inputs, &format!("QLinearConv case {seed}"))
}

#[test]
fn qlinear_conv_matches_the_cpu() {
    use DType::{I8, U8};
    let base = Case {
        x: (U8, [2, 5, 9, 7]),
        w: (I8, [70, 5, 3, 3]),
        group: 1,
        stride: 1,
        pad: 1,
        dilation: 1,
        per_channel: true,
        y: U8,
        bias: true,
    };
    let cases = [
        // K = 45, not a multiple of 4; two channel tiles, the second partly used.
        Case { ..base },
        Case {
            stride: 2,
            dilation: 2,
            pad: 2,
            ..base
        },
        // 1x1 over 8 channels: K a multiple of 4 (W read as words).
        Case {
            x: (U8, [1, 8, 6, 6]),
            w: (I8, [16, 8, 1, 1]),
            pad: 0,
            per_channel: false,
            ..base
        },
        // 1x1, stride 2 (a ResNet downsampling shortcut), K = 12.
        Case {
            x: (U8, [2, 12, 7, 7]),
            w: (I8, [16, 12, 1, 1]),
            pad: 0,
            stride: 2,
            ..base
        },
        // Signed input and output, unsigned weights (per-channel zero points not 0).
        Case {
            x: (I8, [1, 6, 5, 5]),
            w: (U8, [12, 3, 3, 3]),
            group: 2,
            y: I8,
            bias: false,
            ..base
        },
        Case {
            x: (I8, [3, 4, 4, 4]),
            w: (I8, [20, 4, 2, 2]),
            pad: 0,
            y: I8,
            ..base
        },
        // K = 288, split by the rule as well as forced.
        Case {
            x: (U8, [1, 32, 5, 5]),
            w: (I8, [24, 32, 3, 3]),
            ..base
        },
        // Depthwise.
        Case {
            x: (U8, [1, 8, 5, 5]),
            w: (U8, [8, 1, 3, 3]),
            group: 8,
            ..base
        },
    ];
    let mut split = false;
    for (i, c) in cases.iter().enumerate() {
        split |= qlinear_conv(c, 900 + i as u64);
    }
    assert!(split, "some case is long enough to split");
}

#[test]
fn conv_integer_matches_the_cpu() {
    let mut rng = Rng::new(77);
    let x = bytes(&mut rng, DType::U8, &[2, 5, 6, 5]);
    let w = bytes(&mut rng, DType::I8, &[10, 5, 3, 3]);
    let xz = zero_points(&mut rng, DType::U8, None);
    let wz = zero_points(&mut rng, DType::I8, Some(10));
    let pads = ("pads", AttrValue::Ints(vec![1, 0, 1, 2]));
    let mut split = false;
    for n in [2, 3, 4] {
        let op = node("ConvInteger", 10, vec![pads.clone()], n, 1).unwrap();
        let all = [&x, &w, &xz, &wz];
        let inputs: Vec<Option<&Tensor>> = all[..n].iter().map(|t| Some(*t)).collect();
        split |= same_on_gpu(&*op, &inputs, &format!("ConvInteger with {n} inputs"));
    }
    assert!(split, "K = 45 splits");
}

/// MatMulInteger and QLinearMatMul through the shader's MatMul layout: A with leading batch
/// axes, K a multiple of 4 (A read as words) and not, zero points per tensor and per column.
#[test]
fn integer_products_match_the_cpu() {
    use DType::{I8, U8};
    let mut rng = Rng::new(31);
    let mut split = false;
    for (a_shape, b_shape, (ta, tb)) in [
        (vec![2, 5, 37], [37, 70], (U8, I8)),
        (vec![7, 40], [40, 20], (I8, I8)),
        (vec![65, 64], [64, 9], (U8, U8)),
    ] {
        let a = bytes(&mut rng, ta, &a_shape);
        let b = bytes(&mut rng, tb, &b_shape);
        let n = b_shape[1];
        let az = zero_points(&mut rng, ta, None);
        let bz = zero_points(&mut rng, tb, Some(n));
        let what = format!("MatMulInteger {a_shape:?} x {b_shape:?}");
        let op = node("MatMulInteger", 10, vec![], 4, 1).unwrap();
        split |= same_on_gpu(&*op, &[Some(&a), Some(&b), Some(&az), Some(&bz)], &what);
        let op = node("MatMulInteger", 10, vec![], 2, 1).unwrap();
        same_on_gpu(&*op, &[Some(&a), Some(&b)], &what);

        let k = b_shape[0];
        let a_scale = scales(&mut rng, 1, 0.02);
        let b_scale = scales(&mut rng, n, 0.01);
        let y_scale = scales(&mut rng, 1, 0.0002 * 150.0 * (k as f32).sqrt());
        let y_zero = zero_points(&mut rng, ta, None);
        let op = node("QLinearMatMul", 10, vec![], 8, 1).unwrap();
        let ins = [&a, &a_scale, &az, &b, &b_scale, &bz, &y_scale, &y_zero].map(Some);
        let what = format!("QLinearMatMul {a_shape:?} x {b_shape:?}");
        split |= same_on_gpu(&*op, &ins, &what);
    }
    assert!(split, "K = 64 splits");
}
