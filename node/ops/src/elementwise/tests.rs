use super::binary::{binary_params, mode};
use super::broadcast::{Collapsed, collapse};
use crate::AttrValue;
use crate::tensor::{Tensor, numel};
use crate::testkit::{Rng, assert_close, build, f64s, run1};

/// Numpy broadcasting written the slow, obvious way: unravel every output index and map each
/// axis onto the operand (index 0 where the operand has size 1 or lacks the axis).
fn naive_binary(
    a: &[f64],
    ash: &[usize],
    b: &[f64],
    bsh: &[usize],
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<usize>, Vec<f64>) {
    let rank = ash.len().max(bsh.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ash), pad(bsh));
    let out: Vec<usize> = pa
        .iter()
        .zip(&pb)
        .map(|(&x, &y)| if x == 1 { y } else { x })
        .collect();
    let flat = |shape: &[usize], idx: &[usize]| -> usize {
        let mut k = 0;
        for (d, i) in shape.iter().zip(idx) {
            k = k * d + if *d == 1 { 0 } else { *i };
        }
        k
    };
    let mut y = Vec::new();
    for lin in 0..numel(&out) {
        let mut idx = vec![0; rank];
        let mut r = lin;
        for ax in (0..rank).rev() {
            idx[ax] = r % out[ax];
            r /= out[ax];
        }
        y.push(f(a[flat(&pa, &idx)], b[flat(&pb, &idx)]));
    }
    (out, y)
}

fn check_random_f32(op: &str, ash: &[usize], bsh: &[usize], seed: u64) {
    let mut rng = Rng::new(seed);
    let (a, b) = (rng.tensor_f32(ash), rng.tensor_f32(bsh));
    let f: fn(f64, f64) -> f64 = match op {
        "Add" => |x, y| x + y,
        "Sub" => |x, y| x - y,
        "Mul" => |x, y| x * y,
        _ => |x, y| x / y,
    };
    let (out, want) = naive_binary(&f64s(&a), ash, &f64s(&b), bsh, f);
    let got = run1(&*build(op, 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(got.shape(), &out[..], "{op} {ash:?} {bsh:?}");
    // The kernel rounds once to f32; the reference is exact in f64.
    assert_close(&f64s(&got), &want, 1e-6);
}

#[test]
fn add_broadcasts_a_row_by_hand() {
    let a = Tensor::from_vec(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]);
    let b = Tensor::from_vec(vec![3], vec![10f32, 20., 30.]);
    let y = run1(&*build("Add", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(&*y.view::<f32>().unwrap(), &[11., 22., 33., 14., 25., 36.]);
}

#[test]
fn mul_of_column_and_row_makes_an_outer_product_by_hand() {
    let a = Tensor::from_vec(vec![2, 1], vec![2f32, 3.]);
    let b = Tensor::from_vec(vec![1, 3], vec![1f32, 10., 100.]);
    let y = run1(&*build("Mul", 13, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<f32>().unwrap(), &[2., 20., 200., 3., 30., 300.]);
}

#[test]
fn random_broadcasts_match_the_naive_loop() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[4], &[2, 3, 4]),
        (&[2, 3, 4], &[]),
        (&[], &[2, 3, 4]),
        (&[], &[]),
        (&[1], &[]),
        (&[5, 1, 3, 1], &[1, 4, 1, 2]),
        (&[2, 1, 3, 1, 2, 1, 2], &[1, 2, 1, 3, 1, 2, 1]),
        (&[0, 3], &[3]),
        (&[3, 4], &[3, 4]),
        (&[1, 1, 1], &[1]),
        // Past the parallel threshold: fast paths and the strided walk on several threads.
        (&[300, 257], &[300, 257]),
        (&[300, 257], &[1]),
        (&[300, 257], &[300, 1]),
        (&[3, 1, 257], &[100, 1]),
        (&[7, 97, 101], &[7, 1, 101]),
    ];
    for (i, (a, b)) in cases.iter().enumerate() {
        for (j, op) in ["Add", "Sub", "Mul", "Div"].iter().enumerate() {
            check_random_f32(op, a, b, (i * 4 + j) as u64);
        }
    }
}

#[test]
fn f64_sub_keeps_double_precision() {
    let a = Tensor::from_vec(vec![2], vec![1.0f64, 1e-300]);
    let b = Tensor::from_vec(vec![], vec![1e-12f64]);
    let y = run1(&*build("Sub", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<f64>().unwrap(), &[1.0 - 1e-12, 1e-300 - 1e-12]);
}

#[test]
fn integer_division_truncates_and_never_traps() {
    let a = Tensor::from_vec(vec![6], vec![7i32, -7, 7, -7, 5, i32::MIN]);
    let b = Tensor::from_vec(vec![6], vec![2i32, 2, -2, -2, 0, -1]);
    let y = run1(&*build("Div", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<i32>().unwrap(), &[3, -3, -3, 3, 0, i32::MIN]);

    let a = Tensor::from_vec(vec![3], vec![-9i64, 9, i64::MIN]);
    let b = Tensor::from_vec(vec![], vec![-4i64]);
    let y = run1(&*build("Div", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<i64>().unwrap(), &[2, -2, i64::MIN / -4]);
}

#[test]
fn integer_overflow_wraps() {
    let a = Tensor::from_vec(vec![3], vec![i32::MAX, i32::MIN, 1 << 20]);
    let b = Tensor::from_vec(vec![3], vec![1i32, 1, 1 << 12]);
    let add = run1(&*build("Add", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(
        &*add.view::<i32>().unwrap(),
        &[i32::MIN, i32::MIN + 1, (1 << 20) + (1 << 12)]
    );
    let sub = run1(&*build("Sub", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(
        &*sub.view::<i32>().unwrap(),
        &[i32::MAX - 1, i32::MAX, (1 << 20) - (1 << 12)]
    );
    let mul = run1(&*build("Mul", 14, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*mul.view::<i32>().unwrap(), &[i32::MAX, i32::MIN, 0]);
}

#[test]
fn i64_broadcast_matches_the_naive_loop() {
    let a: Vec<i64> = (0..24).map(|v| v * 1_000_000_007 - 5).collect();
    let b: Vec<i64> = vec![3, -7, 11];
    let at = Tensor::from_vec(vec![2, 4, 3], a.clone());
    let bt = Tensor::from_vec(vec![1, 1, 3], b.clone());
    let y = run1(&*build("Mul", 14, &[]).unwrap(), &[&at, &bt]).unwrap();
    let want: Vec<i64> = a.iter().enumerate().map(|(i, v)| v * b[i % 3]).collect();
    assert_eq!(&*y.view::<i64>().unwrap(), &want[..]);
}

#[test]
fn bad_inputs_are_named_errors() {
    let op = build("Add", 14, &[]).unwrap();
    let a = Tensor::zeros(crate::DType::F32, vec![2, 3]);
    let b = Tensor::zeros(crate::DType::F32, vec![4]);
    let e = run1(&*op, &[&a, &b]).unwrap_err().to_string();
    assert!(
        e.contains("Add") && e.contains("[2, 3]") && e.contains("[4]"),
        "{e}"
    );
    let c = Tensor::zeros(crate::DType::I64, vec![3]);
    let e = run1(&*op, &[&a, &c]).unwrap_err().to_string();
    assert!(e.contains("float") && e.contains("int64"), "{e}");
    // Bool is no number.
    let h = Tensor::zeros(crate::DType::Bool, vec![3]);
    assert!(run1(&*op, &[&h, &h]).is_err());
    assert!(crate::testkit::run(&*op, &[Some(&a), None]).is_err());
}

#[test]
fn legacy_broadcast_places_b_at_axis() {
    let mut rng = Rng::new(7);
    let a = rng.tensor_f32(&[2, 3, 4, 5]);
    let b = rng.tensor_f32(&[3, 4]);
    let op = build(
        "Add",
        6,
        &[
            ("broadcast", AttrValue::Int(1)),
            ("axis", AttrValue::Int(1)),
        ],
    )
    .unwrap();
    let y = run1(&*op, &[&a, &b]).unwrap();
    let (_, want) = naive_binary(
        &f64s(&a),
        &[2, 3, 4, 5],
        &f64s(&b),
        &[1, 3, 4, 1],
        |x, y| x + y,
    );
    assert_close(&f64s(&y), &want, 1e-6);

    // Without axis, B lines up with A's trailing axes.
    let b = rng.tensor_f32(&[5]);
    let op = build("Mul", 6, &[("broadcast", AttrValue::Int(1))]).unwrap();
    let y = run1(&*op, &[&a, &b]).unwrap();
    let (_, want) = naive_binary(&f64s(&a), &[2, 3, 4, 5], &f64s(&b), &[5], |x, y| x * y);
    assert_close(&f64s(&y), &want, 1e-6);

    // broadcast=0 demands equal shapes, even where numpy would broadcast.
    let op = build("Add", 6, &[]).unwrap();
    assert!(run1(&*op, &[&a, &b]).is_err());
    let op = build(
        "Add",
        6,
        &[
            ("broadcast", AttrValue::Int(1)),
            ("axis", AttrValue::Int(3)),
        ],
    )
    .unwrap();
    let b = rng.tensor_f32(&[3, 4]);
    assert!(run1(&*op, &[&a, &b]).is_err());
}

#[test]
fn unary_ops_by_hand() {
    let x = Tensor::from_vec(vec![5], vec![-2f32, -0.0, 0.5, f32::NAN, 3.0]);
    let y = run1(&*build("Relu", 14, &[]).unwrap(), &[&x]).unwrap();
    let y = y.view::<f32>().unwrap();
    assert_eq!(&y[..3], &[0., -0.0, 0.5]);
    assert!(y[3].is_nan());
    assert_eq!(y[4], 3.0);

    let xi = Tensor::from_vec(vec![3], vec![-5i64, 0, 9]);
    let yi = run1(&*build("Relu", 14, &[]).unwrap(), &[&xi]).unwrap();
    assert_eq!(&*yi.view::<i64>().unwrap(), &[0, 0, 9]);

    // Extremes must saturate, not overflow into NaN.
    let x = Tensor::from_vec(vec![5], vec![0f32, 1000., -1000., 2.0, -2.0]);
    let s = run1(&*build("Sigmoid", 13, &[]).unwrap(), &[&x]).unwrap();
    let want: Vec<f64> = [0f64, 1000., -1000., 2.0, -2.0]
        .iter()
        .map(|v| 1.0 / (1.0 + (-v).exp()))
        .collect();
    assert_close(&f64s(&s), &want, 1e-6);
    assert_eq!(s.view::<f32>().unwrap()[0], 0.5);
    let t = run1(&*build("Tanh", 13, &[]).unwrap(), &[&x]).unwrap();
    let want: Vec<f64> = [0f64, 1000., -1000., 2.0, -2.0]
        .iter()
        .map(|v| v.tanh())
        .collect();
    assert_close(&f64s(&t), &want, 1e-6);

    let x = Tensor::from_vec(vec![2], vec![-700f64, 1e-10]);
    let s = run1(&*build("Sigmoid", 13, &[]).unwrap(), &[&x]).unwrap();
    let s = s.view::<f64>().unwrap();
    assert!(s[0] > 0.0 && s[0] < 1e-300, "{}", s[0]);
    assert!((s[1] - (0.5 + 0.25e-10)).abs() < 1e-15);

    let bad = Tensor::zeros(crate::DType::I32, vec![2]);
    assert!(run1(&*build("Tanh", 13, &[]).unwrap(), &[&bad]).is_err());
}

#[test]
fn unary_over_the_parallel_threshold_is_elementwise() {
    let mut rng = Rng::new(3);
    let x = rng.tensor_f32(&[70_001]);
    let y = run1(&*build("Tanh", 13, &[]).unwrap(), &[&x]).unwrap();
    let want: Vec<f64> = f64s(&x).iter().map(|v| v.tanh()).collect();
    assert_close(&f64s(&y), &want, 1e-6);
}

#[test]
fn collapse_merges_axes_walked_together() {
    // [2,3,4] + [4]: the two outer axes merge for both operands.
    let c = collapse(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 0, 1]]);
    assert_eq!(
        c,
        Collapsed {
            dims: vec![6, 4],
            strides: vec![vec![4, 1], vec![0, 1]]
        }
    );
    // [2,1,4] * [3,1]: nothing merges, but nothing is lost either.
    let c = collapse(&[2, 3, 4], &[vec![4, 0, 1], vec![0, 1, 0]]);
    assert_eq!(c.dims, vec![2, 3, 4]);
    // Size-1 axes disappear.
    let c = collapse(&[1, 5, 1], &[vec![5, 1, 1]]);
    assert_eq!(
        c,
        Collapsed {
            dims: vec![5],
            strides: vec![vec![1]]
        }
    );
}

#[test]
fn shader_params_pick_the_mode_and_pad_to_rank_6() {
    let p = binary_params(&[2, 3], &[2, 3], &[2, 3]).unwrap();
    assert_eq!((p.mode, p.n), (mode::SAME, 6));
    assert_eq!(
        binary_params(&[2, 3], &[], &[2, 3]).unwrap().mode,
        mode::B_SCALAR
    );
    assert_eq!(
        binary_params(&[1, 1], &[2, 3], &[2, 3]).unwrap().mode,
        mode::A_SCALAR
    );
    let p = binary_params(&[2, 1, 4], &[3, 1], &[2, 3, 4]).unwrap();
    assert_eq!(p.mode, mode::STRIDED);
    assert_eq!(p.dims, [1, 1, 1, 2, 3, 4]);
    assert_eq!(&p.sa[3..], &[4, 0, 1]);
    assert_eq!(&p.sb[3..], &[0, 1, 0]);
    // Seven axes that cannot merge do not fit the shader.
    assert!(binary_params(&[2, 1, 2, 1, 2, 1, 2], &[1, 2, 1, 2, 1, 2, 1], &[2; 7]).is_none());
}
