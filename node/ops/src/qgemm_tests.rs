//! QGemm against hand-computed values, against QLinearMatMul (its product without C or
//! transposes is QLinearMatMul's), and its GPU kernel against its CPU kernel byte for byte.

use super::*;
use crate::conv::q8_tests::{bytes, same_on_gpu, scales, zero_points};
use crate::testkit::{Rng, node, run};
use crate::{AttrValue, MS_DOMAIN};

fn qgemm(trans_a: bool, trans_b: bool, alpha: f32) -> Box<dyn Op> {
    let spec = NodeSpec {
        name: "qgemm",
        op_type: "QGemm",
        attrs: &crate::Attrs(
            [
                ("transA", AttrValue::Int(trans_a as i64)),
                ("transB", AttrValue::Int(trans_b as i64)),
                ("alpha", AttrValue::Float(alpha)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        ),
        opset: 1,
        num_inputs: 9,
        num_outputs: 1,
    };
    crate::build_in(MS_DOMAIN, &spec).unwrap()
}

fn transposed(t: &Tensor) -> Tensor {
    let (r, c) = (t.shape()[0], t.shape()[1]);
    let b = t.bytes();
    let v: Vec<u8> = (0..r * c).map(|i| b[(i % r) * c + i / r]).collect();
    Tensor::from_bytes(t.dtype(), vec![c, r], v.into()).unwrap()
}

#[test]
fn requantizes_by_hand() {
    // A = [[2, 4]] - 1, B' = [[1], [3]] (stored transposed): 1*1 + 3*3 = 10, plus C = 5;
    // x 0.5 x 0.25 / 0.125 = 15, plus y's zero point 100. Without y_scale: 15 x 0.125.
    let op = qgemm(false, true, 1.0);
    let a = Tensor::from_vec(vec![1, 2], vec![2u8, 4]);
    let b = Tensor::from_vec(vec![1, 2], vec![1u8, 3]);
    let c = Tensor::from_vec(vec![1], vec![5i32]);
    let f = Tensor::scalar;
    let (za, zb, zy) = (
        Tensor::scalar(1u8),
        Tensor::scalar(0u8),
        Tensor::scalar(100u8),
    );
    let (sa, sb, sy) = (f(0.5f32), f(0.25f32), f(0.125f32));
    let mut inputs = vec![
        Some(&a),
        Some(&sa),
        Some(&za),
        Some(&b),
        Some(&sb),
        Some(&zb),
        Some(&c),
        Some(&sy),
        Some(&zy),
    ];
    let y = run(&*op, &inputs).unwrap();
    assert_eq!(y[0].dtype(), DType::U8);
    assert_eq!(y[0].to_i64_vec().unwrap(), [115]);
    inputs.truncate(7);
    let y = run(&*op, &inputs).unwrap();
    assert_eq!(*y[0].view::<f32>().unwrap(), [1.875]);
    // alpha 2 doubles the float result.
    let y = run(&*qgemm(false, true, 2.0), &inputs).unwrap();
    assert_eq!(*y[0].view::<f32>().unwrap(), [3.75]);
}

#[test]
fn without_c_it_is_qlinear_matmul() {
    let mut rng = Rng::new(31);
    let matmul = node("QLinearMatMul", 10, vec![], 8, 1).unwrap();
    for (i, (m, k, n)) in [(3, 5, 4), (1, 8, 7), (6, 13, 2)].into_iter().enumerate() {
        let (ta, tb) = if i % 2 == 0 {
            (DType::U8, DType::I8)
        } else {
            (DType::I8, DType::U8)
        };
        let a = bytes(&mut rng, ta, &[m, k]);
        let b = bytes(&mut rng, tb, &[k, n]);
        let (sa, sb, sy) = (
            scales(&mut rng, 1, 0.02),
            scales(&mut rng, n, 0.01),
            scales(&mut rng, 1, 0.05),
        );
        let (za, zb, zy) = (
            zero_points(&mut rng, ta, None),
            zero_points(&mut rng, tb, Some(n)),
            zero_points(&mut rng, DType::U8, None),
        );
        let want = run(
            &*matmul,
            &[
                Some(&a),
                Some(&sa),
                Some(&za),
                Some(&b),
                Some(&sb),
                Some(&zb),
                Some(&sy),
                Some(&zy),
            ],
        )
        .unwrap();
        // Every way of storing the same product.
        for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
            let at = if trans_a { transposed(&a) } else { a.clone() };
            let bt = if trans_b { transposed(&b) } else { b.clone() };
            let got = run(
                &*qgemm(trans_a, trans_b, 1.0),
                &[
                    Some(&at),
                    Some(&sa),
                    Some(&za),
                    Some(&bt),
                    Some(&sb),
                    Some(&zb),
                    None,
                    Some(&sy),
                    Some(&zy),
                ],
            )
            .unwrap();
            assert_eq!(
                got[0].bytes(),
                want[0].bytes(),
                "{m}x{k}x{n} {trans_a} {trans_b}"
            );
        }
    }
}

#[test]
fn gpu_matches_the_cpu() {
    let mut rng = Rng::new(32);
    let cases = [
        (5, 12, 7, false),
        (33, 70, 65, true),
        (1, 9, 130, true),
        (70, 256, 3, false),
    ];
    for (i, (m, k, n, trans_b)) in cases.into_iter().enumerate() {
        let (ta, tb, ty) = match i % 3 {
            0 => (DType::U8, DType::I8, DType::U8),
            1 => (DType::I8, DType::I8, DType::I8),
            _ => (DType::U8, DType::U8, DType::I8),
        };
        let a = bytes(&mut rng, ta, &[m, k]);
        let b = bytes(&mut rng, tb, &if trans_b { [n, k] } else { [k, n] });
        let per = i % 2 == 0;
        let (sa, sb, sy) = (
            scales(&mut rng, 1, 0.02),
            scales(&mut rng, if per { n } else { 1 }, 0.01),
            scales(&mut rng, 1, 0.05 * (k as f32).sqrt()),
        );
        let (za, zb, zy) = (
            zero_points(&mut rng, ta, None),
            zero_points(&mut rng, tb, per.then_some(n)),
            zero_points(&mut rng, ty, None),
        );
        let c: Vec<i32> = (0..n).map(|_| rng.range(0, 2000) as i32 - 1000).collect();
        let c = Tensor::from_vec(vec![n], c);
        let inputs = [
            Some(&a),
            Some(&sa),
            Some(&za),
            Some(&b),
            Some(&sb),
            Some(&zb),
            Some(&c),
            Some(&sy),
            Some(&zy),
        ];
        let what = format!("{m}x{k}x{n} transB {trans_b} {ta}x{tb}->{ty}");
        same_on_gpu(&*qgemm(false, trans_b, 1.0), &inputs, &what);
    }
}

#[test]
fn bad_inputs_are_named() {
    let op = qgemm(false, false, 1.0);
    let a = Tensor::from_vec(vec![2, 3], vec![0u8; 6]);
    let b = Tensor::from_vec(vec![2, 3], vec![0u8; 6]);
    let s = Tensor::scalar(1.0f32);
    let e = run(&*op, &[Some(&a), Some(&s), None, Some(&b), Some(&s)]).unwrap_err();
    assert!(
        e.to_string().contains("A' has 3 columns but B' has 2 rows"),
        "{e}"
    );
    let c = Tensor::from_vec(vec![3], vec![0i32; 3]);
    let b = Tensor::from_vec(vec![3, 2], vec![0u8; 6]);
    let e = run(
        &*op,
        &[Some(&a), Some(&s), None, Some(&b), Some(&s), None, Some(&c)],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("does not broadcast to [2, 2]"),
        "{e}"
    );
}
