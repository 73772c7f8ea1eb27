//! Values by hand from the ops' definitions; the GPU against the CPU.

use super::*;
use crate::AttrValue;
use crate::testkit::gpu::run_op;
use crate::testkit::{build, gpu_matches_cpu, infer_known, node, run};

fn op(name: &str, reduction: &str, ignore: Option<i64>) -> Box<dyn Op> {
    let mut attrs = vec![("reduction", AttrValue::String(reduction.into()))];
    if let Some(i) = ignore {
        attrs.push(("ignore_index", AttrValue::Int(i)));
    }
    build(name, 13, &attrs).unwrap()
}

#[test]
fn nll_by_hand() {
    // x [2, 3]: targets 2 and 0, weights 1, 2, 3.
    let x = Tensor::from_vec(vec![2, 3], vec![-1.0f32, -2.0, -3.0, -4.0, -5.0, -6.0]);
    let t = Tensor::from_vec(vec![2], vec![2i64, 0]);
    let w = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]);
    let f = |o: &dyn Op, w: Option<&Tensor>| {
        run(o, &[Some(&x), Some(&t), w]).unwrap()[0]
            .to_f64_vec()
            .unwrap()
    };
    let nll = "NegativeLogLikelihoodLoss";
    assert_eq!(f(&*op(nll, "none", None), None), [3.0, 4.0]);
    assert_eq!(f(&*op(nll, "none", None), Some(&w)), [9.0, 4.0]);
    assert_eq!(f(&*op(nll, "sum", None), Some(&w)), [13.0]);
    // Mean over the weights: (9 + 4) / (3 + 1).
    assert_eq!(f(&*op(nll, "mean", None), Some(&w)), [3.25]);
    // Target 0 ignored: 9 / 3.
    assert_eq!(f(&*op(nll, "mean", Some(0)), Some(&w)), [3.0]);
    let bad_t = Tensor::from_vec(vec![2], vec![3i64, 0]);
    let e = run(&*op(nll, "sum", None), &[Some(&x), Some(&bad_t)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("target 3"), "{e}");
}

#[test]
fn softmax_cross_entropy_by_hand() {
    // Two equal scores: log-softmax ln(1/2) each; loss ln 2 per row.
    let x = Tensor::from_vec(vec![2, 2], vec![5.0f32, 5.0, -1.0, -1.0]);
    let t = Tensor::from_vec(vec![2], vec![1i64, 0]);
    let sce = node("SoftmaxCrossEntropyLoss", 13, vec![], 2, 2).unwrap();
    let y = run(&*sce, &[Some(&x), Some(&t)]).unwrap();
    let ln2 = std::f64::consts::LN_2;
    assert!((y[0].to_f64_vec().unwrap()[0] - ln2).abs() < 1e-6);
    for v in y[1].to_f64_vec().unwrap() {
        assert!((v + ln2).abs() < 1e-6);
    }
    assert_eq!(y[1].shape(), [2, 2]);
}

#[test]
fn gpu_matches_the_cpu() {
    let mut s = 11u32;
    let mut next = move || {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (s >> 8) as f32 / (1 << 24) as f32
    };
    let x: Vec<f32> = (0..3 * 5 * 70).map(|_| -next() * 4.0).collect();
    let x = Tensor::from_vec(vec![3, 5, 7, 10], x);
    let t: Vec<i64> = (0..3 * 70).map(|_| (next() * 5.0) as i64).collect();
    let t = Tensor::from_vec(vec![3, 7, 10], t);
    let w = Tensor::from_vec(vec![5], vec![0.5f32, 1.0, 2.0, 0.25, 3.0]);
    for reduction in ["none", "sum", "mean"] {
        for ignore in [None, Some(2)] {
            let o = op("NegativeLogLikelihoodLoss", reduction, ignore);
            gpu_matches_cpu(&*o, &[Some(&x), Some(&t)], 1e-5);
            gpu_matches_cpu(&*o, &[Some(&x), Some(&t), Some(&w)], 1e-5);
        }
    }
    for reduction in ["none", "mean"] {
        let attrs = vec![
            ("reduction", AttrValue::String(reduction.into())),
            ("ignore_index", AttrValue::Int(1)),
        ];
        let sce = node("SoftmaxCrossEntropyLoss", 13, attrs.clone(), 3, 2).unwrap();
        gpu_matches_cpu(&*sce, &[Some(&x), Some(&t), Some(&w)], 1e-5);
        let sce = node("SoftmaxCrossEntropyLoss", 13, attrs, 3, 1).unwrap();
        gpu_matches_cpu(&*sce, &[Some(&x), Some(&t)], 1e-5);
    }
    // A target out of range fails the GPU run (the kernel records it; the executor words it
    // by index_fault).
    let mut bad: Vec<i64> = t.to_i64_vec().unwrap();
    bad[17] = 5;
    let bad = Tensor::from_vec(vec![3, 7, 10], bad);
    let o = op("NegativeLogLikelihoodLoss", "sum", None);
    let outs = infer_known(&*o, &[Some(&x), Some(&bad)]).unwrap();
    match run_op(&*o, &[Some(&x), Some(&bad)], &outs) {
        Err(e) if e == "skipped" => {}
        Err(e) => assert!(e.contains("index 5 (element 17"), "{e}"),
        Ok(_) => panic!("an out-of-range target passed on the GPU"),
    }
    let f = IndexFault {
        element: 17,
        index: 5,
        dim: 5,
    };
    let e = o.index_fault(&[], &f).to_string();
    assert!(e.contains("target 5 (element 17 of the targets)"), "{e}");
}
