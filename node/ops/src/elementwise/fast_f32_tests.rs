//! fast_f32's loops against the table's f64 formulas rounded to f32, on random values over
//! several scales, special values, and lengths that leave vector tails.
//!
//! Tolerance: |got - want| <= 1e-6 |want| + 1e-43. The relative bound is a few ulp (exp and
//! sigmoid measure within 2, erf within 7, Gelu's f32 part 9 above x = -1); the absolute one,
//! a few subnormal steps, covers exp's and sigmoid's results below f32's normal range, which
//! round once but from an approximate mantissa. NaN must give NaN, an infinity the same one.

use super::fast_f32::Fast;
use super::unary::{P, UnKind, float_fn};
use crate::AttrValue;
use crate::tensor::Tensor;
use crate::testkit::{Rng, build, run1};

const KINDS: [(UnKind, P); 23] = [
    (UnKind::Relu, [0.0; 3]),
    (UnKind::Sigmoid, [0.0; 3]),
    (UnKind::Tanh, [0.0; 3]),
    (UnKind::Exp, [0.0; 3]),
    (UnKind::Erf, [0.0; 3]),
    (UnKind::Gelu, [0.0; 3]),
    (UnKind::GeluTanh, [0.0; 3]),
    (UnKind::HardSigmoid, [0.2, 0.5, 0.0]),
    (UnKind::HardSigmoid, [0.3, 0.1, 0.0]),
    (UnKind::HardSwish, [0.0; 3]),
    (UnKind::LeakyRelu, [0.01, 0.0, 0.0]),
    (UnKind::LeakyRelu, [0.1, 0.0, 0.0]),
    (UnKind::Neg, [0.0; 3]),
    (UnKind::Abs, [0.0; 3]),
    (UnKind::Sqrt, [0.0; 3]),
    (UnKind::Reciprocal, [0.0; 3]),
    (UnKind::Floor, [0.0; 3]),
    (UnKind::Ceil, [0.0; 3]),
    (UnKind::Round, [0.0; 3]),
    (UnKind::Softsign, [0.0; 3]),
    // Swish's alpha x rounds in f32 (exactly in f64); for alpha a power of two it is exact.
    (UnKind::Swish, [1.0, 0.0, 0.0]),
    (UnKind::Swish, [0.5, 0.0, 0.0]),
    (UnKind::ThresholdedRelu, [1.0, 0.0, 0.0]),
];

/// KINDS with the attributes rounded to f32, as a model's float attributes always are.
fn kinds() -> impl Iterator<Item = (UnKind, P)> {
    KINDS
        .into_iter()
        .map(|(k, p)| (k, p.map(|v| v as f32 as f64)))
}

fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        1e-45,
        1e-30,
        -1e-30,
        0.5,
        -0.5,
        2.5,
        -2.5,
        3.0,
        -3.0,
        0.625,
        -0.625,
        4.0,
        -4.0,
        9.0,
        -9.0,
    ];
    for m in [
        20.0, 80.0, 87.0, 88.0, 88.72, 88.723, 88.8, 89.0, 100.0, 103.0, 104.0, 110.0, 1e6,
    ] {
        v.extend([m, -m]);
    }
    v
}

/// Values over the scales the formulas branch on: around 0, a few units, exp's range, huge.
fn randoms(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let u = rng.unit();
            let v = match i % 5 {
                0 => u,
                1 => 6.0 * u,
                2 => 120.0 * u,
                3 => u * 1e-3,
                _ => u.signum() * 10f64.powf(rng.unit() * 38.0),
            };
            v as f32
        })
        .collect()
}

fn check(k: UnKind, p: &P, x: &[f32], got: &[f32]) {
    let f = float_fn(k);
    for (&v, &g) in x.iter().zip(got) {
        let w = f(v as f64, p) as f32;
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            ((g - w).abs() as f64) <= 1e-6 * (w.abs() as f64) + 1e-43
        };
        assert!(ok, "{k:?} {p:?} of {v:e}: got {g:e}, want {w:e}");
    }
}

#[test]
fn fast_kernels_match_the_f64_formulas() {
    let mut rng = Rng::new(24);
    let mut x = specials();
    x.extend(randoms(&mut rng, 20_011));
    for (k, p) in kinds() {
        let fast = Fast::new(k, &p).expect("a covered kind");
        check(k, &p, &x, &fast.map(&x));
    }
}

#[test]
fn fast_kernels_are_dense_near_the_branch_points() {
    // Every f32 step over [-1.1, 1.1] would be too many; a fine grid across the points where
    // the formulas switch (tanh's 0.625, Gelu's -1, HardSwish's +-3) and near 0.
    let mut x: Vec<f32> = (-400_000..=400_000).map(|i| i as f32 * 1e-5).collect();
    for c in [-3.0f32, 3.0, -1.0, 0.625, -0.625] {
        let mut v = c;
        for _ in 0..1000 {
            x.extend([v, -v]);
            v = f32::from_bits(v.to_bits() + 1);
        }
    }
    for (k, p) in kinds() {
        check(k, &p, &x, &Fast::new(k, &p).expect("covered").map(&x));
    }
}

#[test]
fn every_length_and_the_parallel_path_agree_element_by_element() {
    let mut rng = Rng::new(7);
    // Past PARALLEL_MIN, so the rayon chunks run too; the lengths below leave every tail.
    let long = randoms(&mut rng, 70_001);
    for (k, p) in kinds() {
        let fast = Fast::new(k, &p).expect("covered");
        let whole = fast.map(&long);
        check(k, &p, &long, &whole);
        for n in [0, 1, 3, 7, 8, 9, 15, 17, 31, 33, 63, 65] {
            let part = fast.map(&long[..n]);
            let same = part
                .iter()
                .zip(&whole)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{k:?}: length {n} differs from the long run's prefix");
        }
    }
}

#[test]
fn ops_on_f32_take_the_fast_path_with_their_attributes() {
    let x = Tensor::from_vec(
        vec![2, 3],
        vec![-100.0f32, -2.0, -0.0, 0.5, 3.0, f32::INFINITY],
    );
    let y = run1(&*build("Sigmoid", 13, &[]).unwrap(), &[&x]).unwrap();
    let y = y.view::<f32>().unwrap().to_vec();
    assert_eq!(y[5], 1.0);
    assert!(y[0] >= 0.0 && y[0] < 1e-43, "sigmoid(-100) = {}", y[0]);
    let alpha = [("alpha", AttrValue::Float(0.25))];
    let y = run1(&*build("LeakyRelu", 16, &alpha).unwrap(), &[&x]).unwrap();
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![-25.0, -0.5, -0.0, 0.5, 3.0, f32::INFINITY]
    );
}

#[test]
fn edge_values_are_exact() {
    let one = |k: UnKind, v: f32| Fast::new(k, &[0.0; 3]).expect("covered").map(&[v])[0];
    assert_eq!(one(UnKind::Exp, f32::NEG_INFINITY), 0.0);
    assert_eq!(one(UnKind::Exp, 89.0), f32::INFINITY);
    assert_eq!(one(UnKind::Exp, 0.0), 1.0);
    assert_eq!(one(UnKind::Sigmoid, f32::INFINITY), 1.0);
    assert_eq!(one(UnKind::Sigmoid, f32::NEG_INFINITY), 0.0);
    assert_eq!(one(UnKind::Sigmoid, 0.0), 0.5);
    assert_eq!(one(UnKind::Tanh, f32::INFINITY), 1.0);
    assert_eq!(one(UnKind::Tanh, f32::NEG_INFINITY), -1.0);
    assert!(one(UnKind::Tanh, -0.0).is_sign_negative());
    assert_eq!(one(UnKind::Erf, f32::INFINITY), 1.0);
    assert_eq!(one(UnKind::Erf, f32::NEG_INFINITY), -1.0);
    for k in [
        UnKind::Sigmoid,
        UnKind::Tanh,
        UnKind::Exp,
        UnKind::Erf,
        UnKind::Gelu,
    ] {
        assert!(one(k, f32::NAN).is_nan(), "{k:?}");
    }
}

#[test]
fn clip_matches_the_generic_kernel() {
    let mut rng = Rng::new(6);
    let mut x = specials();
    x.extend(randoms(&mut rng, 1001));
    let want = |v: f32, lo: f32, hi: f32| {
        let v = if v < lo { lo } else { v };
        if v > hi { hi } else { v }
    };
    let bounds = [
        (0.0, 6.0),
        (-1.0, 1.0),
        (f32::NEG_INFINITY, 0.5),
        (-0.5, f32::INFINITY),
        (2.0, 1.0),
    ];
    for (lo, hi) in bounds {
        let got = Fast::clip(lo, hi).map(&x);
        for (&v, &g) in x.iter().zip(&got) {
            let w = want(v, lo, hi);
            assert!(
                g.to_bits() == w.to_bits(),
                "clip({v}, {lo}, {hi}) = {g}, want {w}"
            );
        }
    }
    // Through the op, bounds as inputs (opset 11+), one of them absent.
    let t = Tensor::from_vec(vec![4], vec![-3.0f32, 0.5, 9.0, f32::NAN]);
    let clip = crate::testkit::op("Clip", 13, vec![], 3).unwrap();
    let lo = Tensor::scalar(0.0f32);
    let y = crate::testkit::run(&*clip, &[Some(&t), Some(&lo), None]).unwrap();
    let y = y[0].view::<f32>().unwrap().to_vec();
    assert_eq!(&y[..3], &[0.0, 0.5, 9.0]);
    assert!(y[3].is_nan());
}
