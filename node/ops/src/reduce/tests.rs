//! Reductions against hand-derived values, and the shaders against the CPU kernels.

use crate::AttrValue;
use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, assert_close, build, f64s, gpu_matches_cpu, run};

fn reduce(op: &str, opset: i64, attrs: &[(&str, AttrValue)], ins: &[Option<&Tensor>]) -> Tensor {
    run(&*build(op, opset, attrs).unwrap(), ins)
        .unwrap()
        .remove(0)
}

fn x234() -> Tensor {
    Tensor::from_vec(vec![2, 3, 4], (1..=24).map(|v| v as f32).collect())
}

fn axes(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec())
}

#[test]
fn sum_over_attribute_and_input_axes() {
    let x = x234();
    // Axis 1 of 1..24 in [2,3,4]: column sums 1+5+9=15, ...
    let want = [15., 18., 21., 24., 51., 54., 57., 60.];
    let k0 = ("keepdims", AttrValue::Int(0));
    let y = reduce(
        "ReduceSum",
        11,
        &[("axes", AttrValue::Ints(vec![1])), k0.clone()],
        &[Some(&x)],
    );
    assert_eq!(y.shape(), &[2, 4]);
    assert_close(&f64s(&y), &want, 0.0);
    let a = axes(&[-2]);
    let y = reduce("ReduceSum", 13, &[], &[Some(&x), Some(&a)]);
    assert_eq!(y.shape(), &[2, 1, 4]);
    assert_close(&f64s(&y), &want, 0.0);
    // No axes: everything; noop_with_empty_axes: the input itself.
    let y = reduce("ReduceSum", 13, &[], &[Some(&x)]);
    assert_eq!(y.shape(), &[1, 1, 1]);
    assert_close(&f64s(&y), &[300.], 0.0);
    let empty = axes(&[]);
    let noop = ("noop_with_empty_axes", AttrValue::Int(1));
    let y = reduce(
        "ReduceSum",
        13,
        std::slice::from_ref(&noop),
        &[Some(&x), Some(&empty)],
    );
    assert_eq!(y, x);
    let y = reduce(
        "ReduceSumSquare",
        18,
        std::slice::from_ref(&noop),
        &[Some(&x)],
    );
    let squares: Vec<f64> = (1..=24).map(|v| (v * v) as f64).collect();
    assert_eq!((y.shape(), f64s(&y)), (x.shape(), squares));
    let o = build("ReduceL1", 18, &[noop]).unwrap();
    gpu_matches_cpu(&*o, &[Some(&x.clone())], 0.0);
    // Axes 0 and 2 together.
    let y = reduce("ReduceSum", 18, &[k0], &[Some(&x), Some(&axes(&[0, 2]))]);
    // Row j of both blocks: (sum of 4j+1..4j+4) + (same + 48).
    assert_close(&f64s(&y), &[10. + 58., 26. + 74., 42. + 90.], 0.0);
}

#[test]
fn every_kind_by_hand() {
    let x = Tensor::from_vec(vec![2, 2], vec![1f32, -2., 3., 4.]);
    let a = ("axes", AttrValue::Ints(vec![1]));
    let cases: &[(&str, [f64; 2])] = &[
        ("ReduceMean", [-0.5, 3.5]),
        ("ReduceMax", [1., 4.]),
        ("ReduceMin", [-2., 3.]),
        ("ReduceProd", [-2., 12.]),
        ("ReduceL1", [3., 7.]),
        ("ReduceL2", [2.23606797749979, 5.0]),
        ("ReduceSumSquare", [5., 25.]),
        (
            "ReduceLogSumExp",
            [1.048_587_351_573_742, 4.313_261_687_518_223],
        ),
    ];
    for (op, want) in cases {
        let y = reduce(op, 13, std::slice::from_ref(&a), &[Some(&x)]);
        assert_eq!(y.shape(), &[2, 1], "{op}");
        assert_close(&f64s(&y), want, 1e-6);
    }
    let p = Tensor::from_vec(vec![2, 2], vec![1f64, 2., 3., 4.]);
    let y = reduce("ReduceLogSum", 13, &[a], &[Some(&p)]);
    assert_close(&f64s(&y), &[3f64.ln(), 7f64.ln()], 1e-12);
}

#[test]
fn empty_sets_give_identities() {
    let x = Tensor::zeros(DType::F32, vec![2, 0, 4]);
    let a = axes(&[1]);
    let cases: &[(&str, f64)] = &[
        ("ReduceSum", 0.),
        ("ReduceProd", 1.),
        ("ReduceMax", f64::NEG_INFINITY),
        ("ReduceMin", f64::INFINITY),
        ("ReduceL2", 0.),
        ("ReduceLogSum", f64::NEG_INFINITY),
        ("ReduceLogSumExp", f64::NEG_INFINITY),
    ];
    for (op, want) in cases {
        let y = reduce(op, 18, &[], &[Some(&x), Some(&a)]);
        assert_eq!(y.shape(), &[2, 1, 4]);
        assert!(f64s(&y).iter().all(|v| v == want), "{op}: {:?}", f64s(&y));
    }
    let i = Tensor::from_vec(vec![0, 2], Vec::<i32>::new());
    let y = reduce("ReduceMax", 18, &[], &[Some(&i), Some(&axes(&[0]))]);
    assert_eq!(y.to_i64_vec().unwrap(), vec![i32::MIN as i64; 2]);
}

#[test]
fn integers_and_bools() {
    let x = Tensor::from_vec(vec![3], vec![i32::MAX, 1, 5]);
    let y = reduce("ReduceSum", 13, &[], &[Some(&x)]);
    assert_eq!(y.dtype(), DType::I32);
    // Wraps as int32 does.
    assert_eq!(y.to_i64_vec().unwrap(), vec![(i32::MIN + 5) as i64]);
    let y = reduce(
        "ReduceMean",
        13,
        &[],
        &[Some(&Tensor::from_vec(vec![2], vec![-3i64, 0]))],
    );
    assert_eq!(y.to_i64_vec().unwrap(), vec![-1]);
    let b = Tensor::from_bools(vec![2, 2], vec![true, false, false, false]);
    let y = reduce("ReduceMax", 20, &[], &[Some(&b), Some(&axes(&[1]))]);
    assert_eq!(y.dtype(), DType::Bool);
    assert_eq!(y.to_i64_vec().unwrap(), vec![1, 0]);
    let y = reduce("ReduceMin", 20, &[], &[Some(&b), Some(&axes(&[0]))]);
    assert_eq!(y.to_i64_vec().unwrap(), vec![0, 0]);
}

#[test]
fn nan_propagates_and_bad_axes_are_errors() {
    let x = Tensor::from_vec(vec![3], vec![1f32, f32::NAN, 2.]);
    assert!(f64s(&reduce("ReduceMax", 13, &[], &[Some(&x)]))[0].is_nan());
    let op = build("ReduceSum", 11, &[("axes", AttrValue::Ints(vec![3]))]).unwrap();
    assert!(run(&*op, &[Some(&x)]).is_err());
    let op = build("ReduceSum", 11, &[("axes", AttrValue::Ints(vec![0, -1]))]).unwrap();
    assert!(run(&*op, &[Some(&x)]).is_err());
}

#[test]
fn argmax_argmin() {
    let x = Tensor::from_vec(vec![2, 3], vec![1f32, 5., 5., 7., 0., 0.]);
    let y = reduce("ArgMax", 13, &[("axis", AttrValue::Int(1))], &[Some(&x)]);
    assert_eq!(y.shape(), &[2, 1]);
    assert_eq!(y.to_i64_vec().unwrap(), vec![1, 0]);
    let last = ("select_last_index", AttrValue::Int(1));
    let y = reduce(
        "ArgMax",
        13,
        &[
            ("axis", AttrValue::Int(-1)),
            ("keepdims", AttrValue::Int(0)),
            last.clone(),
        ],
        &[Some(&x)],
    );
    assert_eq!(y.shape(), &[2]);
    assert_eq!(y.to_i64_vec().unwrap(), vec![2, 0]);
    let y = reduce(
        "ArgMin",
        13,
        &[("axis", AttrValue::Int(1)), last],
        &[Some(&x)],
    );
    assert_eq!(y.to_i64_vec().unwrap(), vec![0, 2]);
    let y = reduce("ArgMin", 13, &[], &[Some(&x)]);
    assert_eq!(y.shape(), &[1, 3]);
    assert_eq!(y.to_i64_vec().unwrap(), vec![0, 1, 1]);
    assert!(
        run(
            &*build("ArgMax", 13, &[]).unwrap(),
            &[Some(&Tensor::scalar(1f32))]
        )
        .is_err()
    );
    let i = Tensor::from_vec(vec![3], vec![3i64, -9, 4]);
    assert_eq!(
        reduce("ArgMin", 13, &[], &[Some(&i)]).to_i64_vec().unwrap(),
        vec![1]
    );
}

#[test]
fn gpu_reductions_match_cpu() {
    let mut rng = Rng::new(5);
    let kinds = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ];
    let shapes: &[(&[usize], &[i64], i64)] = &[
        (&[3, 5, 7], &[1], 1),
        (&[3, 5, 7], &[0, 2], 0),
        (&[2, 300], &[1], 1),
        (&[1000, 3], &[0], 0),
        (&[4, 0, 3], &[1], 1),
        (&[2, 3, 70], &[0, 2], 1),
    ];
    for op in kinds {
        for (shape, ax, keep) in shapes {
            let n: usize = shape.iter().product();
            // Positive values so LogSum is defined; Prod over long rows stays finite near 1.
            let v: Vec<f32> = rng.f32s(n).iter().map(|x| 1.0 + 0.01 * x).collect();
            let x = Tensor::from_vec(shape.to_vec(), v.clone());
            let a = axes(ax);
            let o = build(op, 18, &[("keepdims", AttrValue::Int(*keep))]).unwrap();
            gpu_matches_cpu(&*o, &[Some(&x), Some(&a)], 1e-4);
            let h = Tensor::from_vec(
                shape.to_vec(),
                v.iter().map(|&f| half::f16::from_f32(f)).collect(),
            );
            gpu_matches_cpu(&*o, &[Some(&h), Some(&a)], 1e-2);
            // f64 (GPUs with shaderFloat64) keeps f64's precision: exp and log of the shader's
            // own, by range reduction and series.
            let wide: Vec<f64> = rng.f64s(n).iter().map(|x| 1.0 + 3.0 * x).collect();
            let d = Tensor::from_vec(shape.to_vec(), wide);
            gpu_matches_cpu(&*o, &[Some(&d), Some(&a)], 1e-13);
            if matches!(op, "ReduceMax" | "ReduceMin") && n > 0 {
                // Any and all, on bytes of 0 and 1 (the empty set stays on the CPU).
                let bits: Vec<bool> = rng.f32s(n).iter().map(|x| *x > 0.6).collect();
                let t = Tensor::from_bools(shape.to_vec(), bits);
                gpu_matches_cpu(&*o, &[Some(&t), Some(&a)], 0.0);
            }
            if !matches!(op, "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp") {
                let iv: Vec<i32> = rng.f32s(n).iter().map(|x| (x * 100.0) as i32).collect();
                let i = Tensor::from_vec(shape.to_vec(), iv.clone());
                gpu_matches_cpu(&*o, &[Some(&i), Some(&a)], 0.0);
                let l = Tensor::from_vec(shape.to_vec(), iv.iter().map(|&v| v as i64).collect());
                gpu_matches_cpu(&*o, &[Some(&l), Some(&a)], 0.0);
                // 8-bit: values wrap on overflow, the same on both sides.
                let b = Tensor::from_vec(shape.to_vec(), iv.iter().map(|&v| v as i8).collect());
                gpu_matches_cpu(&*o, &[Some(&b), Some(&a)], 0.0);
                let u = Tensor::from_vec(shape.to_vec(), iv.iter().map(|&v| v as u8).collect());
                gpu_matches_cpu(&*o, &[Some(&u), Some(&a)], 0.0);
            }
        }
    }
}

#[test]
fn gpu_reductions_over_mergeable_axes_match_the_cpu() {
    // The GPU kernel merges neighbouring axes of one kind and drops size-1 axes before it
    // builds its index table: adjacent reduced axes between kept ones around a size-1 axis,
    // reduced axes spanning a size-1 axis, a whole tensor long enough to be split over
    // workgroups, and alternating axes that cannot merge.
    let mut rng = Rng::new(16);
    let cases: [(&[usize], &[i64]); 4] = [
        (&[3, 1, 40, 50, 7], &[2, 3]),
        (&[3, 1, 4, 5, 7], &[1, 2, 3]),
        (&[1, 16, 64, 80], &[0, 1, 2, 3]),
        (&[2, 3, 4, 5], &[0, 2]),
    ];
    for (shape, ax) in cases {
        let n = shape.iter().product();
        let x = Tensor::from_vec(shape.to_vec(), rng.f32s(n));
        let a = axes(ax);
        for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceLogSumExp"] {
            let o = build(op, 18, &[("keepdims", AttrValue::Int(1))]).unwrap();
            gpu_matches_cpu(&*o, &[Some(&x), Some(&a)], 1e-4);
        }
    }
}

#[test]
fn gpu_long_reductions_split_over_workgroups() {
    let mut rng = Rng::new(15);
    let kinds = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceL2",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ];
    // 2 x 3 outputs over 100,000 positions each (axes 1 and 3, not contiguous).
    let shape = [2usize, 400, 3, 250];
    let n: usize = shape.iter().product();
    let v: Vec<f32> = rng.f32s(n).iter().map(|x| x * 4.0).collect();
    let x = Tensor::from_vec(shape.to_vec(), v.clone());
    let i = Tensor::from_vec(
        shape.to_vec(),
        v.iter().map(|&f| (f * 10.0) as i64).collect(),
    );
    let a = axes(&[1, 3]);
    for op in kinds {
        let o = build(op, 18, &[("keepdims", AttrValue::Int(0))]).unwrap();
        let k = {
            let t = crate::ValueType::of(&x);
            let out = crate::ValueType::new(DType::F32, vec![2, 3]);
            let at = crate::ValueType::of(&a);
            let inputs = [
                Some(crate::InferInput {
                    ty: &t,
                    value: None,
                }),
                Some(crate::InferInput {
                    ty: &at,
                    value: Some(&a),
                }),
            ];
            o.infer(&inputs).unwrap();
            // Without keepdims the shapes alone do not say which axes went.
            assert!(
                o.gpu(&[Some(&t), Some(&at)], std::slice::from_ref(&out))
                    .is_none()
            );
            o.gpu_planned(&inputs, &[out], &crate::KernelTuning::default())
                .unwrap()
        };
        assert_eq!(k.dispatches.len(), 2, "{op}");
        gpu_matches_cpu(&*o, &[Some(&x), Some(&a)], 1e-4);
        if !matches!(op, "ReduceL2" | "ReduceLogSumExp") {
            gpu_matches_cpu(&*o, &[Some(&i), Some(&a)], 0.0);
        }
    }
    // LogSumExp with -inf everywhere but one element, and with a +inf.
    let mut w = vec![f32::NEG_INFINITY; 70_000];
    w[69_999] = 1.0;
    let o = build("ReduceLogSumExp", 18, &[]).unwrap();
    gpu_matches_cpu(
        &*o,
        &[Some(&Tensor::from_vec(vec![70_000], w.clone()))],
        1e-6,
    );
    w[5] = f32::INFINITY;
    gpu_matches_cpu(&*o, &[Some(&Tensor::from_vec(vec![70_000], w))], 1e-6);
}

#[test]
fn gpu_arg_matches_cpu() {
    let mut rng = Rng::new(6);
    for op in ["ArgMax", "ArgMin"] {
        for last in [0, 1] {
            for axis in [0i64, 1, -1] {
                // Few distinct values, so ties are common.
                let v: Vec<f32> = rng
                    .f32s(4 * 5 * 6)
                    .iter()
                    .map(|x| (x * 3.0).round())
                    .collect();
                let x = Tensor::from_vec(vec![4, 5, 6], v.clone());
                let o = build(
                    op,
                    13,
                    &[
                        ("axis", AttrValue::Int(axis)),
                        ("select_last_index", AttrValue::Int(last)),
                    ],
                )
                .unwrap();
                gpu_matches_cpu(&*o, &[Some(&x)], 0.0);
                let i = Tensor::from_vec(vec![4, 5, 6], v.iter().map(|&f| f as i64).collect());
                gpu_matches_cpu(&*o, &[Some(&i)], 0.0);
                let b = Tensor::from_vec(vec![4, 5, 6], v.iter().map(|&f| f as i8).collect());
                gpu_matches_cpu(&*o, &[Some(&b)], 0.0);
                let h = Tensor::from_vec(
                    vec![4, 5, 6],
                    v.iter().map(|&f| half::f16::from_f32(f)).collect(),
                );
                gpu_matches_cpu(&*o, &[Some(&h)], 0.0);
            }
        }
    }
}

#[test]
fn gpu_arg_long_rows_match_cpu() {
    let mut rng = Rng::new(16);
    for op in ["ArgMax", "ArgMin"] {
        for last in [0, 1] {
            let o = build(
                op,
                13,
                &[
                    ("axis", AttrValue::Int(1)),
                    ("select_last_index", AttrValue::Int(last)),
                ],
            )
            .unwrap();
            // Ties everywhere, a NaN in one row.
            let mut v: Vec<f32> = rng
                .f32s(3 * 1000)
                .iter()
                .map(|x| (x * 5.0).round())
                .collect();
            v[1500] = f32::NAN;
            v[1700] = f32::NAN;
            let x = Tensor::from_vec(vec![3, 1000], v.clone());
            gpu_matches_cpu(&*o, &[Some(&x)], 0.0);
            let i = Tensor::from_vec(
                vec![3, 1000],
                v.iter()
                    .map(|&f| if f.is_nan() { 0 } else { f as i32 })
                    .collect(),
            );
            gpu_matches_cpu(&*o, &[Some(&i)], 0.0);
            let u = Tensor::from_vec(
                vec![3, 1000],
                v.iter()
                    .map(|&f| if f.is_nan() { 7 } else { (f + 5.0) as u8 })
                    .collect(),
            );
            gpu_matches_cpu(&*o, &[Some(&u)], 0.0);
        }
    }
}
