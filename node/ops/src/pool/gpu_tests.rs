//! The pool shaders against the CPU kernels (themselves checked against the reference in
//! tests.rs), on the same random configurations (MaxPool's Indices included) and on planes
//! larger than a workgroup.

use super::tests::Case;
use crate::tensor::Tensor;
use crate::testkit::gpu::gpu_and_cpu;
use crate::testkit::{Rng, assert_within, node, tensor};

/// Max is exact; averages within 1e-4 relative (the sums' orders may differ).
fn compare(gpu: &Tensor, cpu: &Tensor, exact: bool, what: &str) {
    let (g, c) = (gpu.to_f64_vec().unwrap(), cpu.to_f64_vec().unwrap());
    let tol: Vec<f64> = c
        .iter()
        .map(|v| if exact { 0.0 } else { 1e-4 * v.abs() + 1e-6 })
        .collect();
    assert_within(&g, &c, &tol, what);
}

#[test]
fn pool_shader_matches_the_cpu() {
    let mut rng = Rng::new(11);
    for i in 0..200 {
        let case = Case::random(&mut rng, 1 + i % 3);
        let x = tensor(
            &case.x_shape(),
            &rng.values(case.x_shape().iter().product()),
            false,
        );
        let Some((gpu, cpu)) = gpu_and_cpu(case.op().as_ref(), &[Some(&x)]) else {
            return;
        };
        compare(&gpu[0], &cpu[0], case.max, &format!("{case:?}"));
        if case.indices {
            let (g, c) = (gpu[1].to_i64_vec().unwrap(), cpu[1].to_i64_vec().unwrap());
            assert_eq!(g, c, "{case:?} indices");
        }
    }
}

#[test]
fn larger_pools_match_the_cpu() {
    let mut rng = Rng::new(12);
    let mut case = Case::random(&mut rng, 2);
    case.n = 2;
    case.c = 5;
    case.input = vec![57, 43];
    case.kernel = vec![3, 3];
    case.strides = vec![2, 2];
    case.dilations = vec![1, 1];
    case.pads = vec![1, 0, 1, 2];
    case.auto_pad = "NOTSET";
    case.indices = false;
    for (max, include_pad, ceil) in [
        (true, false, true),
        (false, true, true),
        (false, false, false),
    ] {
        let c = Case {
            max,
            count_include_pad: include_pad,
            ceil_mode: ceil,
            indices: max,
            storage_order: true,
            ..case.clone()
        };
        let x = tensor(
            &c.x_shape(),
            &rng.values(c.x_shape().iter().product()),
            false,
        );
        let Some((gpu, cpu)) = gpu_and_cpu(c.op().as_ref(), &[Some(&x)]) else {
            return;
        };
        compare(&gpu[0], &cpu[0], max, &format!("{c:?}"));
        if max {
            assert_eq!(
                gpu[1].to_i64_vec().unwrap(),
                cpu[1].to_i64_vec().unwrap(),
                "{c:?}"
            );
        }
    }
}

#[test]
fn global_pool_shader_matches_the_cpu() {
    let mut rng = Rng::new(13);
    // Planes below, at and well above the 256 threads of a workgroup; no spatial axes at all.
    let shapes: [&[usize]; 5] = [
        &[2, 3, 5, 5],
        &[1, 4, 16, 16],
        &[1, 3, 40, 41],
        &[2, 2, 3, 4, 5],
        &[3, 7],
    ];
    for shape in shapes {
        let x = tensor(shape, &rng.values(shape.iter().product()), false);
        for (op_type, max) in [("GlobalAveragePool", false), ("GlobalMaxPool", true)] {
            let op = node(op_type, 22, vec![], 1, 1).unwrap();
            let Some((gpu, cpu)) = gpu_and_cpu(op.as_ref(), &[Some(&x)]) else {
                return;
            };
            compare(&gpu[0], &cpu[0], max, &format!("{op_type} {shape:?}"));
        }
    }
}

#[test]
fn byte_max_pools_match_the_cpu() {
    // QDQ models run MaxPool on the 8-bit values between a DequantizeLinear and a
    // QuantizeLinear of one scale (graph/fuse_qdq.rs): the shader's u8 and i8 variants.
    let mut rng = Rng::new(14);
    for i in 0..40 {
        let mut case = Case::random(&mut rng, 1 + i % 3);
        case.max = true;
        case.indices = false;
        let n: usize = case.x_shape().iter().product();
        let signed = i % 2 == 1;
        let x = if signed {
            let v: Vec<i8> = (0..n)
                .map(|_| (rng.range(0, 255) as i32 - 128) as i8)
                .collect();
            Tensor::from_vec(case.x_shape(), v)
        } else {
            let v: Vec<u8> = (0..n).map(|_| rng.range(0, 255) as u8).collect();
            Tensor::from_vec(case.x_shape(), v)
        };
        let Some((gpu, cpu)) = gpu_and_cpu(case.op().as_ref(), &[Some(&x)]) else {
            return;
        };
        assert_eq!(gpu[0].dtype(), x.dtype(), "{case:?}");
        compare(&gpu[0], &cpu[0], true, &format!("{case:?}"));
    }
}
