//! Expected values by hand from ONNX's definitions (and ONNX's backend tests through
//! tests/conformance.rs); the GPU against the CPU.

use super::*;
use crate::AttrValue;
use crate::testkit::{build, gpu_matches_cpu, run};

fn ints(t: &Tensor) -> Vec<i64> {
    t.to_i64_vec().unwrap()
}

#[test]
fn quantize_rounds_half_to_even_adds_the_zero_point_and_clips() {
    let q = build("QuantizeLinear", 13, &[]).unwrap();
    let x = Tensor::from_vec(vec![6], vec![0.0f32, 2.0, 3.0, 5.0, -1000.0, 1000.0]);
    let s = Tensor::scalar(2.0f32);
    let z = Tensor::scalar(128u8);
    let y = run(&*q, &[Some(&x), Some(&s), Some(&z)]).unwrap();
    // 0/2 = 0, 1, 1.5 -> 2, 2.5 -> 2; then + 128, clipped to [0, 255].
    assert_eq!(ints(&y[0]), [128, 129, 130, 130, 0, 255]);
    // Without a zero point: uint8, zero point 0.
    let y = run(&*q, &[Some(&x), Some(&s)]).unwrap();
    assert_eq!(
        (y[0].dtype(), ints(&y[0])),
        (DType::U8, vec![0, 1, 2, 2, 0, 255])
    );
}

#[test]
fn per_axis_and_blocked_scales() {
    // x [2, 4]; per axis 1: scales 1, 2, 4, 8.
    let x = Tensor::from_vec(
        vec![2, 4],
        vec![8.0f32, 8.0, 8.0, 8.0, -8.0, -8.0, -8.0, -8.0],
    );
    let q = build("QuantizeLinear", 13, &[]).unwrap();
    let s = Tensor::from_vec(vec![4], vec![1.0f32, 2.0, 4.0, 8.0]);
    let z = Tensor::from_vec(vec![4], vec![0i8, 1, 2, 3]);
    let y = run(&*q, &[Some(&x), Some(&s), Some(&z)]).unwrap();
    assert_eq!(ints(&y[0]), [8, 5, 4, 4, -8, -3, 0, 2]);
    // Blocks of 3 along axis 1 (the last block short): scales [2, 2] per row.
    let q = build(
        "QuantizeLinear",
        21,
        &[
            ("axis", AttrValue::Int(1)),
            ("block_size", AttrValue::Int(3)),
        ],
    )
    .unwrap();
    let s = Tensor::from_vec(vec![2, 2], vec![1.0f32, 4.0, 2.0, 8.0]);
    let z = Tensor::from_vec(vec![2, 2], vec![0i8, 0, 0, 0]);
    let y = run(&*q, &[Some(&x), Some(&s), Some(&z)]).unwrap();
    assert_eq!(ints(&y[0]), [8, 8, 8, 2, -4, -4, -4, -1]);
    // A scale of the wrong shape is refused by name.
    let bad = Tensor::from_vec(vec![3], vec![1.0f32; 3]);
    let e = run(
        &*build("QuantizeLinear", 13, &[]).unwrap(),
        &[Some(&x), Some(&bad)],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("per-axis"), "{e}");
}

#[test]
fn narrow_types_clip_to_their_range() {
    let x = Tensor::from_vec(vec![5], vec![-20.0f32, -3.0, 0.4, 3.0, 20.0]);
    let s = Tensor::scalar(1.0f32);
    for (d, want) in [
        (DType::I4, [-8, -3, 0, 3, 7]),
        (DType::U4, [0, 0, 0, 3, 15]),
        (DType::I2, [-2, -2, 0, 1, 1]),
        (DType::U2, [0, 0, 0, 3, 3]),
        (DType::I16, [-20, -3, 0, 3, 20]),
    ] {
        let q = build(
            "QuantizeLinear",
            21,
            &[("output_dtype", AttrValue::Int(d.onnx_code().into()))],
        )
        .unwrap();
        let y = run(&*q, &[Some(&x), Some(&s)]).unwrap();
        assert_eq!((y[0].dtype(), ints(&y[0])), (d, want.to_vec()), "{d}");
    }
}

#[test]
fn dequantize_subtracts_the_zero_point_and_scales() {
    let dq = build("DequantizeLinear", 13, &[]).unwrap();
    let x = Tensor::from_vec(vec![4], vec![0u8, 3, 128, 255]);
    let s = Tensor::scalar(0.5f32);
    let z = Tensor::scalar(128u8);
    let y = run(&*dq, &[Some(&x), Some(&s), Some(&z)]).unwrap();
    assert_eq!(&*y[0].view::<f32>().unwrap(), &[-64.0, -62.5, 0.0, 63.5]);
    // int32 (a bias), per tensor, no zero point.
    let x = Tensor::from_vec(vec![2], vec![-7i32, 1 << 30]);
    let y = run(&*dq, &[Some(&x), Some(&Tensor::scalar(0.25f32))]).unwrap();
    assert_eq!(&*y[0].view::<f32>().unwrap(), &[-1.75, (1u32 << 28) as f32]);
    // A float8 zero point must be zero.
    let f8 = Tensor::from_bytes(DType::F8E4M3FN, vec![1], vec![0x38u8].into()).unwrap();
    let e = run(&*dq, &[Some(&f8), Some(&Tensor::scalar(1.0f32)), Some(&f8)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("must be zero"), "{e}");
    let y = run(&*dq, &[Some(&f8), Some(&Tensor::scalar(2.0f32))]).unwrap();
    assert_eq!(&*y[0].view::<f32>().unwrap(), &[2.0]);
}

/// Random x over every output type, per tensor, per axis and blocked, in f32 and f16, and
/// back: the GPU gives the CPU's integers and bits.
#[test]
fn gpu_matches_the_cpu() {
    let mut seed = 0x9e37_79b9_u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..3 * 5 * 4).map(|_| next() * 300.0).collect();
    let x = Tensor::from_vec(vec![3, 5, 4], x);
    let xh = crate::cast::cast_tensor(&x, DType::F16).unwrap();
    let layouts: [(i64, i64, Vec<usize>); 3] =
        [(1, 0, vec![]), (1, 0, vec![5]), (1, 2, vec![3, 3, 4])];
    let outs = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
        DType::F8E4M3FN,
        DType::F8E5M2FNUZ,
        DType::F4E2M1,
    ];
    for (axis, block, sshape) in &layouts {
        let n: usize = sshape.iter().product();
        let s: Vec<f32> = (0..n).map(|_| 0.5 + next().abs() * 4.0).collect();
        let s = Tensor::from_vec(sshape.clone(), s);
        let sh = crate::cast::cast_tensor(&s, DType::F16).unwrap();
        for &out in &outs {
            let attrs = [
                ("axis", AttrValue::Int(*axis)),
                ("block_size", AttrValue::Int(*block)),
                ("output_dtype", AttrValue::Int(out.onnx_code().into())),
                ("saturate", AttrValue::Int(0)),
            ];
            let q = build("QuantizeLinear", 21, &attrs).unwrap();
            gpu_matches_cpu(&*q, &[Some(&x), Some(&s)], 0.0);
            gpu_matches_cpu(&*q, &[Some(&xh), Some(&sh)], 0.0);
            let y = run(&*q, &[Some(&x), Some(&s)]).unwrap().remove(0);
            let dq = build(
                "DequantizeLinear",
                21,
                &[
                    ("axis", AttrValue::Int(*axis)),
                    ("block_size", AttrValue::Int(*block)),
                ],
            )
            .unwrap();
            gpu_matches_cpu(&*dq, &[Some(&y), Some(&s)], 0.0);
            gpu_matches_cpu(&*dq, &[Some(&y), Some(&sh)], 1e-3);
            if int_range(out).is_some() {
                let zp = Tensor::from_bytes(out, sshape.clone(), y.bytes().slice(..n * out.size()))
                    .unwrap();
                let zq = build("QuantizeLinear", 21, &attrs[..2]).unwrap();
                gpu_matches_cpu(&*zq, &[Some(&x), Some(&s), Some(&zp)], 0.0);
                gpu_matches_cpu(&*dq, &[Some(&y), Some(&s), Some(&zp)], 0.0);
            }
        }
    }
}
