use super::*;
use crate::testkit::{Rng, assert_close, build, f64s, gpu_matches_cpu, run, run1};
use crate::{AttrValue, BufRef};

/// numpy.matmul the slow way, accumulating in f64.
fn naive_matmul(a: &[f64], ash: &[usize], b: &[f64], bsh: &[usize]) -> Vec<f64> {
    let mut a_sh = ash.to_vec();
    let mut b_sh = bsh.to_vec();
    if a_sh.len() == 1 {
        a_sh.insert(0, 1);
    }
    if b_sh.len() == 1 {
        b_sh.push(1);
    }
    let (m, k, n) = (
        a_sh[a_sh.len() - 2],
        a_sh[a_sh.len() - 1],
        b_sh[b_sh.len() - 1],
    );
    let rank = a_sh.len().max(b_sh.len());
    let pad = |s: &[usize]| [vec![1; rank - s.len()], s[..s.len() - 2].to_vec()].concat();
    let (pa, pb) = (pad(&a_sh), pad(&b_sh));
    let batch: Vec<usize> = pa
        .iter()
        .zip(&pb)
        .map(|(&x, &y)| if x == 1 { y } else { x })
        .collect();
    let flat = |shape: &[usize], idx: &[usize]| {
        shape
            .iter()
            .zip(idx)
            .fold(0, |k, (&d, &i)| k * d + if d == 1 { 0 } else { i })
    };
    let mut y = Vec::new();
    for z in 0..numel(&batch) {
        let mut idx = vec![0; batch.len()];
        let mut r = z;
        for ax in (0..batch.len()).rev() {
            idx[ax] = r % batch[ax];
            r /= batch[ax];
        }
        let (za, zb) = (flat(&pa, &idx), flat(&pb, &idx));
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| a[za * m * k + i * k + p] * b[zb * k * n + p * n + j])
                    .sum();
                y.push(s);
            }
        }
    }
    y
}

fn check_matmul(ash: &[usize], bsh: &[usize], out: &[usize], seed: u64) {
    let mut rng = Rng::new(seed);
    let (a, b) = (rng.tensor_f32(ash), rng.tensor_f32(bsh));
    let y = run1(&*build("MatMul", 13, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(y.shape(), out, "{ash:?} x {bsh:?}");
    let want = naive_matmul(&f64s(&a), ash, &f64s(&b), bsh);
    // f32 accumulation over k terms of size <= 1.
    let k = if ash.len() == 1 {
        ash[0]
    } else {
        ash[ash.len() - 1]
    };
    assert_close(&f64s(&y), &want, 1e-6 * (k as f64).max(1.0));
}

#[test]
fn matmul_by_hand() {
    let a = Tensor::from_vec(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]);
    let b = Tensor::from_vec(vec![3, 2], vec![7f32, 8., 9., 10., 11., 12.]);
    let y = run1(&*build("MatMul", 13, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<f32>().unwrap(), &[58., 64., 139., 154.]);
    let ai = Tensor::from_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]);
    let bi = Tensor::from_vec(vec![3], vec![1i64, 0, -1]);
    let y = run1(&*build("MatMul", 13, &[]).unwrap(), &[&ai, &bi]).unwrap();
    assert_eq!(y.shape(), &[2]);
    assert_eq!(&*y.view::<i64>().unwrap(), &[-2, -2]);
}

#[test]
fn matmul_shapes_follow_numpy() {
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[3], &[3], &[]),
        (&[3], &[3, 4], &[4]),
        (&[2, 3], &[3], &[2]),
        (&[5, 2, 3], &[3], &[5, 2]),
        (&[3], &[5, 3, 4], &[5, 4]),
        (&[2, 1, 4, 3], &[3, 3, 5], &[2, 3, 4, 5]),
        (&[1, 3, 2, 3], &[2, 1, 3, 2], &[2, 3, 2, 2]),
        (&[37, 61], &[61, 19], &[37, 19]),
        (&[4, 1], &[1, 5], &[4, 5]),
        (&[3, 128, 256], &[3, 256, 64], &[3, 128, 64]),
        // Large enough to be cut into blocks on rayon (cpu_gemm.rs).
        (&[200, 300], &[300, 150], &[200, 150]),
        // Batch axes that alternate broadcasting.
        (
            &[2, 1, 3, 1, 4, 5],
            &[1, 2, 1, 3, 5, 2],
            &[2, 2, 3, 3, 4, 2],
        ),
    ];
    for (i, (a, b, out)) in cases.iter().enumerate() {
        check_matmul(a, b, out, i as u64);
    }
}

#[test]
fn matmul_empty_dims() {
    let op = build("MatMul", 13, &[]).unwrap();
    let y = run1(
        &*op,
        &[
            &Tensor::zeros(DType::F32, vec![2, 0]),
            &Tensor::zeros(DType::F32, vec![0, 3]),
        ],
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    assert!(y.view::<f32>().unwrap().iter().all(|&v| v == 0.0));
    let y = run1(
        &*op,
        &[
            &Tensor::zeros(DType::F32, vec![0, 4]),
            &Tensor::zeros(DType::F32, vec![4, 3]),
        ],
    )
    .unwrap();
    assert_eq!(y.shape(), &[0, 3]);
}

#[test]
fn matmul_f64_and_int_match_references() {
    let mut rng = Rng::new(11);
    let (a, b) = (rng.f64s(3 * 5 * 4), rng.f64s(4 * 6));
    let y = run1(
        &*build("MatMul", 13, &[]).unwrap(),
        &[
            &Tensor::from_vec(vec![3, 5, 4], a.clone()),
            &Tensor::from_vec(vec![4, 6], b.clone()),
        ],
    )
    .unwrap();
    assert_close(&f64s(&y), &naive_matmul(&a, &[3, 5, 4], &b, &[4, 6]), 1e-13);

    let a: Vec<i32> = (0..12).map(|v| v - 6).collect();
    let b: Vec<i32> = (0..12).map(|v| 3 * v - 20).collect();
    let y = run1(
        &*build("MatMul", 13, &[]).unwrap(),
        &[
            &Tensor::from_vec(vec![3, 4], a.clone()),
            &Tensor::from_vec(vec![4, 3], b.clone()),
        ],
    )
    .unwrap();
    let to64 = |v: &[i32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let want = naive_matmul(&to64(&a), &[3, 4], &to64(&b), &[4, 3]);
    assert_eq!(f64s(&y), want);
}

#[test]
fn matmul_errors_name_the_shapes() {
    let op = build("MatMul", 13, &[]).unwrap();
    let z = |s: &[usize]| Tensor::zeros(DType::F32, s.to_vec());
    let e = run1(&*op, &[&z(&[2, 3]), &z(&[4, 5])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MatMul: inner dimensions differ: [2, 3] x [4, 5]"),
        "{e}"
    );
    let e = run1(&*op, &[&z(&[2, 2, 3]), &z(&[3, 3, 4])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("batch"), "{e}");
    assert!(run1(&*op, &[&z(&[]), &z(&[3])]).is_err());
    let i = Tensor::zeros(DType::I32, vec![3, 2]);
    assert!(run1(&*op, &[&z(&[2, 3]), &i]).is_err());
    // f16 runs through f32 (via_f32.rs tests the values); f16 with f32 does not mix.
    let h = Tensor::zeros(DType::F16, vec![2, 2]);
    assert_eq!(run1(&*op, &[&h, &h]).unwrap().dtype(), DType::F16);
    assert!(run1(&*op, &[&h, &z(&[2, 2])]).is_err());
}

/// alpha * A' * B' + beta * C, the slow way.
#[allow(clippy::too_many_arguments)]
fn naive_gemm(
    a: &[f64],
    b: &[f64],
    c: Option<(&[f64], &[usize])>,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
    alpha: f64,
    beta: f64,
) -> Vec<f64> {
    let mut y = Vec::new();
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| {
                    let x = if ta { a[p * m + i] } else { a[i * k + p] };
                    let w = if tb { b[j * k + p] } else { b[p * n + j] };
                    x * w
                })
                .sum();
            let cv = match c {
                None => 0.0,
                Some((c, shape)) => {
                    let sh = [vec![1; 2 - shape.len()], shape.to_vec()].concat();
                    c[(if sh[0] == 1 { 0 } else { i }) * sh[1] + if sh[1] == 1 { 0 } else { j }]
                }
            };
            y.push(alpha * s + beta * cv);
        }
    }
    y
}

#[test]
fn gemm_every_transpose_scale_and_c_shape() {
    let (m, k, n) = (5, 7, 3);
    let mut rng = Rng::new(5);
    let c_shapes: &[Option<&[usize]>] = &[
        None,
        Some(&[]),
        Some(&[1]),
        Some(&[n]),
        Some(&[1, n]),
        Some(&[m, 1]),
        Some(&[m, n]),
        Some(&[1, 1]),
    ];
    let mut seen = 0;
    for ta in [false, true] {
        for tb in [false, true] {
            for (alpha, beta) in [(1.0f32, 1.0f32), (0.5, -2.0), (-1.5, 0.0)] {
                for cs in c_shapes {
                    let a = rng.tensor_f32(&if ta { [k, m] } else { [m, k] });
                    let b = rng.tensor_f32(&if tb { [n, k] } else { [k, n] });
                    let c = cs.map(|s| rng.tensor_f32(s));
                    let attrs = [
                        ("alpha", AttrValue::Float(alpha)),
                        ("beta", AttrValue::Float(beta)),
                        ("transA", AttrValue::Int(ta as i64)),
                        ("transB", AttrValue::Int(tb as i64)),
                    ];
                    let op = build("Gemm", 13, &attrs).unwrap();
                    let y = run(&*op, &[Some(&a), Some(&b), c.as_ref()])
                        .unwrap()
                        .remove(0);
                    assert_eq!(y.shape(), &[m, n]);
                    let cv = c.as_ref().map(f64s);
                    let want = naive_gemm(
                        &f64s(&a),
                        &f64s(&b),
                        cv.as_deref().zip(*cs),
                        m,
                        k,
                        n,
                        ta,
                        tb,
                        alpha as f64,
                        beta as f64,
                    );
                    assert_close(&f64s(&y), &want, 1e-5);
                    seen += 1;
                }
            }
        }
    }
    assert_eq!(seen, 96);
}

#[test]
fn gemm_defaults_and_zero_beta() {
    // alpha = beta = 1 by default; with beta = 0 a NaN in C must not leak into Y.
    let a = Tensor::from_vec(vec![1, 2], vec![1f32, 2.]);
    let b = Tensor::from_vec(vec![2, 1], vec![3f32, 4.]);
    let c = Tensor::from_vec(vec![1], vec![0.5f32]);
    let y = run1(&*build("Gemm", 11, &[]).unwrap(), &[&a, &b, &c]).unwrap();
    assert_eq!(&*y.view::<f32>().unwrap(), &[11.5]);
    let nan = Tensor::from_vec(vec![1], vec![f32::NAN]);
    let op = build("Gemm", 11, &[("beta", AttrValue::Float(0.0))]).unwrap();
    assert_eq!(
        &*run1(&*op, &[&a, &b, &nan]).unwrap().view::<f32>().unwrap(),
        &[11.0]
    );
    let a64 = Tensor::from_vec(vec![2, 1], vec![1f64, 2.]);
    let b64 = Tensor::from_vec(vec![1, 2], vec![3f64, 4.]);
    let y = run1(&*build("Gemm", 13, &[]).unwrap(), &[&a64, &b64]).unwrap();
    assert_eq!(&*y.view::<f64>().unwrap(), &[3., 4., 6., 8.]);
}

#[test]
fn gemm_errors() {
    let z = |s: &[usize]| Tensor::zeros(DType::F32, s.to_vec());
    let op = build("Gemm", 13, &[]).unwrap();
    let e = run1(&*op, &[&z(&[2, 3]), &z(&[2, 4])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("inner dimensions differ"), "{e}");
    assert!(run1(&*op, &[&z(&[2, 3, 1]), &z(&[3, 4])]).is_err());
    let e = run1(&*op, &[&z(&[2, 3]), &z(&[3, 4]), &z(&[2])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("C [2]"), "{e}");
    assert!(run1(&*op, &[&z(&[2, 3]), &z(&[3, 4]), &z(&[1, 2, 4])]).is_err());
    assert!(run1(&*op, &[&z(&[2, 3]), &z(&[3, 4]), &z(&[4, 4])]).is_err());
}

#[test]
fn flops_count_multiply_adds() {
    let op = build("MatMul", 13, &[]).unwrap();
    let (a, b) = (
        ValueType::new(DType::F32, vec![3, 1, 4, 5]),
        ValueType::new(DType::F32, vec![2, 5, 6]),
    );
    assert_eq!(op.flops(&[Some(&a), Some(&b)], &[]), 2 * 4 * 6 * 5 * 6);
    let op = build("Gemm", 13, &[("transB", AttrValue::Int(1))]).unwrap();
    let (a, b) = (
        ValueType::new(DType::F32, vec![4, 5]),
        ValueType::new(DType::F32, vec![6, 5]),
    );
    assert_eq!(op.flops(&[Some(&a), Some(&b)], &[]), 2 * 4 * 6 * 5);
}

#[test]
fn gpu_params_carry_strides_and_batches() {
    let op = build(
        "Gemm",
        13,
        &[
            ("transA", AttrValue::Int(1)),
            ("beta", AttrValue::Float(2.0)),
        ],
    )
    .unwrap();
    let (a, b, c) = (
        ValueType::new(DType::F32, vec![7, 130]),
        ValueType::new(DType::F32, vec![7, 65]),
        ValueType::new(DType::F32, vec![130, 1]),
    );
    let k = op
        .gpu(
            &[Some(&a), Some(&b), Some(&c)],
            &[ValueType::new(DType::F32, vec![130, 65])],
        )
        .unwrap();
    let d = &k.dispatches[0];
    assert_eq!(
        (d.kernel(), d.groups),
        (vkml_shaders::gemm::Variant::F32.kernel(), [2, 3, 1])
    );
    assert_eq!(d.buffers()[2], BufRef::Input(2));
    assert_eq!(&d.params()[..7], &[130, 65, 7, 1, 1, 1, 130]);
    assert_eq!(&d.params()[10..12], &[65, 1]);
    assert_eq!(
        &d.params()[15..],
        &[1, 0, 1f32.to_bits(), 2f32.to_bits(), 1, 0, 0, 0]
    );
    assert!(8 * d.buffers.len() + 4 * d.params.len() <= 128);

    let op = build("MatMul", 13, &[]).unwrap();
    let (a, b) = (
        ValueType::new(DType::F32, vec![2, 1, 4, 3]),
        ValueType::new(DType::F32, vec![5, 3, 6]),
    );
    let out = ValueType::new(DType::F32, vec![2, 5, 4, 6]);
    let k = op.gpu(&[Some(&a), Some(&b)], &[out]).unwrap();
    let d = &k.dispatches[0];
    assert_eq!(d.groups, [1, 1, 10]);
    // Batch [2, 5]: nb1 = 2, nb2 = 5; A strides (0, 12, 0), B strides (0, 0, 18).
    assert_eq!(&d.params()[3..5], &[2, 5]);
    assert_eq!(&d.params()[7..10], &[0, 12, 0]);
    assert_eq!(&d.params()[12..15], &[0, 0, 18]);
    // Four batch axes that cannot merge: one dispatch per index of the outermost.
    let (a, b) = (
        ValueType::new(DType::F32, vec![2, 1, 3, 1, 4, 5]),
        ValueType::new(DType::F32, vec![1, 2, 1, 3, 5, 2]),
    );
    let out = ValueType::new(DType::F32, vec![2, 2, 3, 3, 4, 2]);
    let k = op.gpu(&[Some(&a), Some(&b)], &[out]).unwrap();
    assert_eq!(k.dispatches.len(), 2);
    assert_eq!(k.dispatches[1].groups, [1, 1, 18]);
    assert_eq!(&k.dispatches[1].params[20..], &[3 * 20, 0, 18 * 8]);
    assert!(
        k.dispatches
            .iter()
            .all(|d| 8 * d.buffers.len() + 4 * d.params.len() <= 128)
    );
    let i = ValueType::new(DType::I32, vec![2, 2]);
    assert!(
        op.gpu(&[Some(&i), Some(&i)], std::slice::from_ref(&i))
            .is_none()
    );
}

#[test]
fn gpu_matmul_matches_cpu() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[37, 61], &[61, 19]),
        (&[3, 128, 256], &[3, 256, 64]),
        (&[65, 130], &[130, 67]),
        (&[70, 1], &[1, 129]),
        (&[5, 0], &[0, 3]),
        (&[3], &[3]),
        (&[5, 2, 3], &[3]),
        (&[3], &[5, 3, 4]),
        (&[2, 1, 4, 3], &[3, 3, 5]),
        (&[2, 1, 3, 4, 5], &[1, 2, 1, 5, 2]),
        (&[2, 1, 3, 1, 4, 5], &[1, 2, 1, 3, 5, 2]),
        (&[3, 1, 2, 1, 2, 1, 2, 3], &[1, 2, 1, 2, 1, 2, 3, 2]),
    ];
    let mut rng = Rng::new(31);
    for (a, b) in cases {
        let (x, y) = (rng.tensor_f32(a), rng.tensor_f32(b));
        let op = build("MatMul", 13, &[]).unwrap();
        gpu_matches_cpu(&*op, &[Some(&x), Some(&y)], 1e-4);
    }
}

#[test]
fn gpu_gemm_every_transpose_scale_and_c_shape() {
    let (m, k, n) = (70, 33, 65);
    let mut rng = Rng::new(32);
    let c_shapes: &[Option<&[usize]>] =
        &[None, Some(&[]), Some(&[n]), Some(&[m, 1]), Some(&[m, n])];
    for ta in [false, true] {
        for tb in [false, true] {
            for (alpha, beta) in [(1.0f32, 1.0f32), (0.5, -2.0), (-1.5, 0.0)] {
                for cs in c_shapes {
                    let a = rng.tensor_f32(&if ta { [k, m] } else { [m, k] });
                    let b = rng.tensor_f32(&if tb { [n, k] } else { [k, n] });
                    let c = cs.map(|s| rng.tensor_f32(s));
                    let attrs = [
                        ("alpha", AttrValue::Float(alpha)),
                        ("beta", AttrValue::Float(beta)),
                        ("transA", AttrValue::Int(ta as i64)),
                        ("transB", AttrValue::Int(tb as i64)),
                    ];
                    let op = build("Gemm", 13, &attrs).unwrap();
                    gpu_matches_cpu(&*op, &[Some(&a), Some(&b), c.as_ref()], 1e-4);
                }
            }
        }
    }
}

/// The first dispatch's shader and, for a split, its slice count (gemm.comp's word 15).
fn split_of(op: &dyn Op, inputs: &[&Tensor]) -> (crate::Kernel, u32) {
    let types: Vec<ValueType> = inputs.iter().map(|t| ValueType::of(t)).collect();
    let infer_in: Vec<_> = types
        .iter()
        .map(|ty| Some(InferInput { ty, value: None }))
        .collect();
    let outs = op.infer(&infer_in).unwrap();
    let refs: Vec<Option<&ValueType>> = types.iter().map(Some).collect();
    let k = op.gpu(&refs, &outs).unwrap();
    let d = &k.dispatches[0];
    (d.kernel(), d.params()[15])
}

#[test]
fn gpu_split_k_matmul_matches_cpu() {
    let cases: &[(&[usize], &[usize], u32)] = &[
        // ResNet-50's classifier at batch 5 (one row would take gemv.comp): 16 tiles,
        // K = 2048 -> 32 slices of 4 steps.
        (&[5, 2048], &[2048, 1000], 32),
        // 3 batches x 2 tiles, K = 300 (19 steps) -> 4 slices of 5 steps, the last of 4.
        (&[3, 5, 300], &[3, 300, 70], 4),
        // B broadcast over a [2, 3] batch: 12 tiles, K = 200 (13 steps) -> 3 slices.
        (&[2, 3, 40, 200], &[200, 65], 3),
    ];
    let mut rng = Rng::new(34);
    for &(a, b, splits) in cases {
        let (x, y) = (rng.tensor_f32(a), rng.tensor_f32(b));
        let op = build("MatMul", 13, &[]).unwrap();
        assert_eq!(
            split_of(&*op, &[&x, &y]),
            (vkml_shaders::gemm_splitk::Variant::F32.kernel(), splits),
            "{a:?} x {b:?}"
        );
        gpu_matches_cpu(&*op, &[Some(&x), Some(&y)], 1e-4);
    }
}

#[test]
fn gpu_split_k_gemm_every_transpose_scale_and_c_shape() {
    // 2 x 2 tiles, K = 260 (17 steps): 4 slices of 5 steps, the last of 2.
    let (m, k, n) = (70, 260, 65);
    let mut rng = Rng::new(35);
    let c_shapes: &[Option<&[usize]>] =
        &[None, Some(&[]), Some(&[n]), Some(&[m, 1]), Some(&[m, n])];
    for ta in [false, true] {
        for tb in [false, true] {
            for (alpha, beta) in [(1.0f32, 1.0f32), (0.5, -2.0), (-1.5, 0.0)] {
                for cs in c_shapes {
                    let a = rng.tensor_f32(&if ta { [k, m] } else { [m, k] });
                    let b = rng.tensor_f32(&if tb { [n, k] } else { [k, n] });
                    let c = cs.map(|s| rng.tensor_f32(s));
                    let attrs = [
                        ("alpha", AttrValue::Float(alpha)),
                        ("beta", AttrValue::Float(beta)),
                        ("transA", AttrValue::Int(ta as i64)),
                        ("transB", AttrValue::Int(tb as i64)),
                    ];
                    let op = build("Gemm", 13, &attrs).unwrap();
                    let mut ins = vec![&a, &b];
                    ins.extend(c.as_ref());
                    assert_eq!(
                        split_of(&*op, &ins),
                        (vkml_shaders::gemm_splitk::Variant::F32.kernel(), 4)
                    );
                    gpu_matches_cpu(&*op, &[Some(&a), Some(&b), c.as_ref()], 1e-4);
                }
            }
        }
    }
}
