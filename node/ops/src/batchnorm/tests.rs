//! BatchNormalization against the formula evaluated directly in f64, and the ONNX example
//! worked by hand.

use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, assert_within, node, run, tensor};
use crate::{AttrValue, InferInput, ValueType};

/// `(x - mean) / sqrt(var + eps) * scale + b`, with statistics indexed by `stat(i)`.
fn reference(x: &[f64], p: &[Vec<f64>; 4], eps: f64, stat: impl Fn(usize) -> usize) -> Vec<f64> {
    let [scale, b, mean, var] = p;
    (0..x.len())
        .map(|i| {
            let j = stat(i);
            (x[i] - mean[j]) / (var[j] + eps).sqrt() * scale[j] + b[j]
        })
        .collect()
}

pub fn random_params(rng: &mut Rng, n: usize) -> [Vec<f64>; 4] {
    let var = (0..n).map(|_| rng.unit().abs() + 0.1).collect();
    [rng.values(n), rng.values(n), rng.values(n), var]
}

fn bn(opset: i64, attrs: Vec<(&str, AttrValue)>, inputs: &[Tensor]) -> Tensor {
    let op = node("BatchNormalization", opset, attrs, 5, 1).unwrap();
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    run(op.as_ref(), &refs).unwrap().remove(0)
}

#[test]
fn onnx_example_by_hand() {
    // x = [[[[-1, 0, 1]], [[2, 3, 4]]]], scale [1, 1.5], B [0, 1], mean [0, 3], var [1, 1.5].
    let x = Tensor::from_vec(vec![1, 2, 1, 3], vec![-1.0f32, 0., 1., 2., 3., 4.]);
    let t = |v: Vec<f32>| Tensor::from_vec(vec![2], v);
    let y = bn(
        15,
        vec![],
        &[
            x,
            t(vec![1., 1.5]),
            t(vec![0., 1.]),
            t(vec![0., 3.]),
            t(vec![1., 1.5]),
        ],
    );
    let eps = 1e-5f32 as f64;
    let s0 = 1.0 / (1.0 + eps).sqrt();
    let s1 = 1.5 / (1.5 + eps).sqrt();
    let want = [-s0, 0., s0, 1. - s1, 1., 1. + s1];
    assert_within(&y.to_f64_vec().unwrap(), &want, &[1e-6; 6], "example");
}

#[test]
fn random_shapes_match_the_formula() {
    let mut rng = Rng::new(5);
    for case in 0..40 {
        let rank = 2 + case % 4;
        let shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 4)).collect();
        let c = shape[1];
        let s: usize = shape[2..].iter().product();
        let x = rng.values(shape.iter().product());
        let mut p = random_params(&mut rng, c);
        let f64_params = case % 2 == 0;
        if !f64_params {
            // Stored as f32 below: the reference sees the same rounded values.
            p.iter_mut().flatten().for_each(|v| *v = *v as f32 as f64);
        }
        let eps = [1e-5, 1e-3, 0.5][case % 3];
        // The attribute is a float: the reference uses the same rounded epsilon.
        let want = reference(&x, &p, eps as f32 as f64, |i| (i / s) % c);
        for f64_dtype in [false, true] {
            let mut inputs = vec![tensor(&shape, &x, f64_dtype)];
            // From opset 15 the statistics may be of another float type than X.
            inputs.extend(p.iter().map(|v| tensor(&[c], v, f64_params)));
            let attrs = vec![("epsilon", AttrValue::Float(eps as f32))];
            let y = bn(15, attrs, &inputs);
            let tol = if f64_dtype { 1e-12 } else { 1e-6 };
            let tols: Vec<f64> = want.iter().map(|w| tol + tol * w.abs()).collect();
            assert_within(
                &y.to_f64_vec().unwrap(),
                &want,
                &tols,
                &format!("{shape:?}"),
            );
        }
    }
}

#[test]
fn spatial_zero_normalises_per_activation() {
    let mut rng = Rng::new(9);
    let shape = [3, 2, 2, 3];
    let sample = 12;
    let x = rng.values(36);
    let p = random_params(&mut rng, sample);
    let want = reference(&x, &p, 1e-5f32 as f64, |i| i % sample);
    let mut inputs = vec![tensor(&shape, &x, true)];
    inputs.extend(p.iter().map(|v| tensor(&shape[1..], v, true)));
    let y = bn(7, vec![("spatial", AttrValue::Int(0))], &inputs);
    assert_within(&y.to_f64_vec().unwrap(), &want, &[1e-12; 36], "spatial=0");
}

fn build_err(opset: i64, attrs: Vec<(&str, AttrValue)>, outputs: usize) -> String {
    node("BatchNormalization", opset, attrs, 5, outputs)
        .unwrap_err()
        .to_string()
}

#[test]
fn opset_rules_and_bad_shapes() {
    // Training mode builds (train.rs tests it).
    assert!(
        node(
            "BatchNormalization",
            14,
            vec![("training_mode", AttrValue::Int(1))],
            5,
            3
        )
        .is_ok()
    );
    let e = build_err(15, vec![], 3);
    assert!(e.contains("training mode only"), "{e}");
    let e = build_err(9, vec![], 5);
    assert!(e.starts_with("not supported"), "{e}");
    let e = build_err(9, vec![("spatial", AttrValue::Int(0))], 1);
    assert!(e.contains("removed in opset 9"), "{e}");
    // Old opsets: is_test and momentum only matter when training.
    let attrs = vec![
        ("is_test", AttrValue::Int(1)),
        ("momentum", AttrValue::Float(0.9)),
    ];
    assert!(node("BatchNormalization", 6, attrs, 5, 1).is_ok());

    let op = node("BatchNormalization", 15, vec![], 5, 1).unwrap();
    let x = ValueType::new(DType::F32, vec![2, 3, 4]);
    let good = ValueType::new(DType::F32, vec![3]);
    let bad = ValueType::new(DType::F32, vec![4]);
    let types = [&x, &good, &bad, &good, &good];
    let inputs: Vec<_> = types
        .iter()
        .map(|ty| Some(InferInput { ty, value: None }))
        .collect();
    let e = op.infer(&inputs).unwrap_err().to_string();
    assert!(e.contains("B has shape [4] but X has 3 channels"), "{e}");
    let xi = ValueType::new(DType::I32, vec![2, 3]);
    let types = [&xi, &good, &good, &good, &good];
    let inputs: Vec<_> = types
        .iter()
        .map(|ty| Some(InferInput { ty, value: None }))
        .collect();
    assert!(
        op.infer(&inputs)
            .unwrap_err()
            .to_string()
            .starts_with("not supported")
    );
}
