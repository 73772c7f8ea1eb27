//! TreeEnsemble against ONNX's node tests and against a recursive walker written here from
//! the spec, on random forests of every mode, on the CPU and the GPU.

use super::*;
use crate::AttrValue;
use crate::ml::ML_DOMAIN;
use crate::testkit::gpu::run_op;
use crate::testkit::{Rng, assert_close, infer_known, run_one};

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

fn tensor_attr(v: &[f64], dtype: DType) -> AttrValue {
    AttrValue::Tensor(match dtype {
        DType::F32 => Tensor::from_vec(vec![v.len()], v.iter().map(|&a| a as f32).collect()),
        _ => Tensor::from_vec(vec![v.len()], v.to_vec()),
    })
}

fn try_build(attrs: Vec<(&str, AttrValue)>) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    crate::build_in(
        ML_DOMAIN,
        &NodeSpec {
            name: "t",
            op_type: "TreeEnsemble",
            attrs: &attrs,
            opset: 1,
            num_inputs: 1,
            num_outputs: 1,
        },
    )
}

/// A forest in the attributes' terms, kept to walk it independently.
#[derive(Clone)]
struct Forest {
    features: Vec<i64>,
    modes: Vec<u8>,
    splits: Vec<f64>,
    yes: Vec<i64>,
    no: Vec<i64>,
    yes_leaf: Vec<i64>,
    no_leaf: Vec<i64>,
    nan_true: Vec<i64>,
    targets: Vec<i64>,
    weights: Vec<f64>,
    roots: Vec<i64>,
    /// Per node: its member set (MEMBER nodes only).
    sets: Vec<Vec<f64>>,
    n_targets: i64,
}

impl Forest {
    fn attrs(&self, dtype: DType, aggregate: i64) -> Vec<(&'static str, AttrValue)> {
        let mut members = Vec::new();
        for (i, s) in self.sets.iter().enumerate() {
            if self.modes[i] == 6 {
                members.extend(s.iter().copied());
                members.push(f64::NAN);
            }
        }
        let modes = Tensor::from_vec(vec![self.modes.len()], self.modes.clone());
        vec![
            ("nodes_featureids", ints(&self.features)),
            ("nodes_modes", AttrValue::Tensor(modes)),
            ("nodes_splits", tensor_attr(&self.splits, dtype)),
            ("nodes_truenodeids", ints(&self.yes)),
            ("nodes_falsenodeids", ints(&self.no)),
            ("nodes_trueleafs", ints(&self.yes_leaf)),
            ("nodes_falseleafs", ints(&self.no_leaf)),
            ("nodes_missing_value_tracks_true", ints(&self.nan_true)),
            ("leaf_targetids", ints(&self.targets)),
            ("leaf_weights", tensor_attr(&self.weights, dtype)),
            ("tree_roots", ints(&self.roots)),
            ("membership_values", tensor_attr(&members, dtype)),
            ("n_targets", AttrValue::Int(self.n_targets)),
            ("aggregate_function", AttrValue::Int(aggregate)),
        ]
    }

    /// The spec's walk, recursively: the leaf a row reaches from node `i`.
    fn walk(&self, i: usize, row: &[f64]) -> usize {
        let x = row[self.features[i] as usize];
        let s = self.splits[i];
        let hit = match self.modes[i] {
            0 => x <= s,
            1 => x < s,
            2 => x >= s,
            3 => x > s,
            4 => x == s,
            5 => x != s,
            _ => self.sets[i].contains(&x),
        } || (x.is_nan() && self.nan_true[i] == 1);
        let (id, leaf) = if hit {
            (self.yes[i], self.yes_leaf[i])
        } else {
            (self.no[i], self.no_leaf[i])
        };
        if leaf == 1 {
            id as usize
        } else {
            self.walk(id as usize, row)
        }
    }

    /// Y in f64, aggregated as ONNX's reference does (AVERAGE adds weight / trees).
    fn predict(&self, x: &[f64], f: usize, aggregate: i64, dtype: DType) -> Vec<f64> {
        let big = if dtype == DType::F32 {
            f64::from(f32::MAX)
        } else {
            f64::MAX
        };
        let t = self.n_targets as usize;
        let mut y = Vec::new();
        for row in x.chunks(f) {
            let init = match aggregate {
                2 => big,
                3 => -big,
                _ => 0.0,
            };
            let mut out = vec![init; t];
            for &r in &self.roots {
                let l = self.walk(r as usize, row);
                let (k, w) = (self.targets[l] as usize, self.weights[l]);
                out[k] = match aggregate {
                    0 => out[k] + w / self.roots.len() as f64,
                    1 => out[k] + w,
                    2 => out[k].min(w),
                    _ => out[k].max(w),
                };
            }
            y.extend(out);
        }
        y
    }
}

/// A random forest: `trees` trees of up to `depth` levels over `f` features, splits and
/// members drawn from a small grid so that rows hit them exactly (EQ, MEMBER) too.
fn forest(rng: &mut Rng, trees: usize, f: usize, n_targets: i64) -> Forest {
    let mut fo = Forest {
        features: vec![],
        modes: vec![],
        splits: vec![],
        yes: vec![],
        no: vec![],
        yes_leaf: vec![],
        no_leaf: vec![],
        nan_true: vec![],
        targets: vec![],
        weights: vec![],
        roots: vec![],
        sets: vec![],
        n_targets,
    };
    for _ in 0..trees {
        let root = grow(rng, &mut fo, f, 4);
        fo.roots.push(root);
    }
    fo
}

fn grid(rng: &mut Rng) -> f64 {
    rng.range(0, 8) as f64 * 0.5 - 2.0
}

/// Adds a subtree of interior nodes; returns its root's index.
fn grow(rng: &mut Rng, fo: &mut Forest, f: usize, depth: usize) -> i64 {
    let i = fo.features.len();
    fo.features.push(rng.range(0, f - 1) as i64);
    let mode = rng.range(0, 6) as u8;
    fo.modes.push(mode);
    fo.splits.push(if mode == 6 { 0.0 } else { grid(rng) });
    fo.sets
        .push((0..rng.range(1, 3)).map(|_| grid(rng)).collect());
    fo.nan_true.push(rng.coin() as i64);
    fo.yes.push(0);
    fo.yes_leaf.push(0);
    fo.no.push(0);
    fo.no_leaf.push(0);
    for side in 0..2 {
        let (id, leaf) = if depth > 1 && rng.range(0, 3) > 0 {
            (grow(rng, fo, f, depth - 1), 0)
        } else {
            fo.targets
                .push(rng.range(0, fo.n_targets as usize - 1) as i64);
            // f32 values, so that both element types hold the same weights.
            fo.weights.push((rng.unit() * 10.0) as f32 as f64);
            ((fo.weights.len() - 1) as i64, 1)
        };
        if side == 0 {
            (fo.yes[i], fo.yes_leaf[i]) = (id, leaf);
        } else {
            (fo.no[i], fo.no_leaf[i]) = (id, leaf);
        }
    }
    i as i64
}

#[test]
// The single-tree test splits at 3.14, a number of its own rather than pi.
#[allow(clippy::approx_constant)]
fn onnx_node_tests_numbers() {
    let membership = vec![
        ("aggregate_function", AttrValue::Int(1)),
        ("leaf_targetids", ints(&[0, 1, 2, 3])),
        (
            "leaf_weights",
            tensor_attr(&[1.0, 10.0, 1000.0, 100.0], DType::F32),
        ),
        (
            "membership_values",
            tensor_attr(
                &[1.2, 3.7, 8.0, 9.0, f64::NAN, 12.0, 7.0, f64::NAN],
                DType::F32,
            ),
        ),
        ("n_targets", AttrValue::Int(4)),
        ("nodes_falseleafs", ints(&[1, 0, 1])),
        ("nodes_falsenodeids", ints(&[2, 2, 3])),
        ("nodes_featureids", ints(&[0, 0, 0])),
        (
            "nodes_modes",
            AttrValue::Tensor(Tensor::from_vec(vec![3], vec![0u8, 6, 6])),
        ),
        (
            "nodes_splits",
            tensor_attr(&[11.0, 232344.0, f64::NAN], DType::F32),
        ),
        ("nodes_trueleafs", ints(&[0, 1, 1])),
        ("nodes_truenodeids", ints(&[1, 0, 1])),
        ("post_transform", AttrValue::Int(0)),
        ("tree_roots", ints(&[0])),
    ];
    let op = try_build(membership).unwrap();
    let x = Tensor::from_vec(vec![6, 1], vec![1.2f32, 3.4, -0.12, f32::NAN, 12.0, 7.0]);
    let want = [
        1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 1000.0, 0.0, 0.0,
        0.0, 1000.0, 0.0, 0.0, 10.0, 0.0, 0.0,
    ];
    let y = run_one(&*op, &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), [6, 4]);
    assert_eq!(y.to_f64_vec().unwrap(), want);
    if let Some(g) = gpu(&*op, &x) {
        assert_eq!(g.to_f64_vec().unwrap(), want);
    }

    let single = vec![
        ("leaf_targetids", ints(&[0, 1, 0, 1])),
        (
            "leaf_weights",
            tensor_attr(&[5.23, 12.12, -12.23, 7.21], DType::F64),
        ),
        ("n_targets", AttrValue::Int(2)),
        ("nodes_falseleafs", ints(&[0, 1, 1])),
        ("nodes_falsenodeids", ints(&[2, 2, 3])),
        ("nodes_featureids", ints(&[0, 0, 0])),
        (
            "nodes_modes",
            AttrValue::Tensor(Tensor::from_vec(vec![3], vec![0u8, 0, 0])),
        ),
        ("nodes_splits", tensor_attr(&[3.14, 1.2, 4.2], DType::F64)),
        ("nodes_trueleafs", ints(&[0, 1, 1])),
        ("nodes_truenodeids", ints(&[1, 0, 1])),
        ("tree_roots", ints(&[0])),
    ];
    let op = try_build(single).unwrap();
    let x = Tensor::from_vec(vec![3, 2], vec![1.2f64, 3.4, -0.12, 1.66, 4.14, 1.77]);
    let want = [5.23, 0.0, 5.23, 0.0, 0.0, 12.12];
    assert_eq!(
        run_one(&*op, &[Some(&x)]).unwrap().to_f64_vec().unwrap(),
        want
    );
    if let Some(g) = gpu(&*op, &x) {
        assert_eq!(g.to_f64_vec().unwrap(), want);
    }
}

fn gpu(op: &dyn Op, x: &Tensor) -> Option<Tensor> {
    let types = infer_known(op, &[Some(x)]).unwrap();
    match run_op(op, &[Some(x)], &types) {
        Err(e) if e == "skipped" => None,
        Err(e) => panic!("GPU run: {e}"),
        Ok(mut out) => Some(out.remove(0)),
    }
}

#[test]
fn random_forests_match_the_spec_walk_on_cpu_and_gpu() {
    let mut rng = Rng::new(11);
    let (rows, f) = (67, 5);
    for (case, dtype) in [DType::F32, DType::F64, DType::F32, DType::F64]
        .into_iter()
        .enumerate()
    {
        let fo = forest(&mut rng, 3 + case * 2, f, 1 + case as i64);
        // Grid values hit splits and members exactly; some are NaN.
        let xs: Vec<f64> = (0..rows * f)
            .map(|_| {
                if rng.range(0, 9) == 0 {
                    f64::NAN
                } else {
                    grid(&mut rng)
                }
            })
            .collect();
        let x = match dtype {
            DType::F32 => Tensor::from_vec(vec![rows, f], xs.iter().map(|&v| v as f32).collect()),
            _ => Tensor::from_vec(vec![rows, f], xs.clone()),
        };
        for aggregate in 0..4 {
            let op = try_build(fo.attrs(dtype, aggregate)).unwrap();
            let want = fo.predict(&xs, f, aggregate, dtype);
            let y = run_one(&*op, &[Some(&x)]).unwrap();
            assert_eq!(y.shape(), [rows, fo.n_targets as usize]);
            let y = y.to_f64_vec().unwrap();
            // f32 sums round at each tree; Average divides once at the end where the
            // reference divides each weight.
            assert_close(&y, &want, 1e-5);
            if let Some(g) = gpu(&*op, &x) {
                assert_close(&g.to_f64_vec().unwrap(), &y, 1e-6);
            }
        }
    }
}

#[test]
fn post_transforms_and_refusals() {
    let mut rng = Rng::new(3);
    let fo = forest(&mut rng, 4, 3, 3);
    let x = Tensor::from_vec(vec![5, 3], rng.f32s(15));
    let xs = x.to_f64_vec().unwrap();
    let raw = fo.predict(&xs, 3, 1, DType::F32);
    let mut attrs = fo.attrs(DType::F32, 1);
    attrs.push(("post_transform", AttrValue::Int(2)));
    let y = run_one(&*try_build(attrs).unwrap(), &[Some(&x)]).unwrap();
    let logistic: Vec<f64> = raw.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    assert_close(&y.to_f64_vec().unwrap(), &logistic, 1e-6);
    let mut attrs = fo.attrs(DType::F32, 1);
    attrs.push(("post_transform", AttrValue::Int(1)));
    let y = run_one(&*try_build(attrs).unwrap(), &[Some(&x)]).unwrap();
    for (r, row) in raw.chunks(3).enumerate() {
        let e: Vec<f64> = row.iter().map(|v| v.exp()).collect();
        let s: f64 = e.iter().sum();
        let want: Vec<f64> = e.iter().map(|v| v / s).collect();
        assert_close(&y.to_f64_vec().unwrap()[r * 3..r * 3 + 3], &want, 1e-6);
    }

    // A cycle, a leaf out of range, a target out of range, too few features.
    let mut cyc = fo.clone();
    cyc.yes[0] = 0;
    cyc.yes_leaf[0] = 0;
    assert!(try_build(cyc.attrs(DType::F32, 1)).is_err());
    let mut bad = fo.clone();
    bad.yes_leaf[0] = 1;
    bad.yes[0] = 999;
    assert!(try_build(bad.attrs(DType::F32, 1)).is_err());
    let mut bad = fo.clone();
    bad.targets[0] = 3;
    assert!(try_build(bad.attrs(DType::F32, 1)).is_err());
    let op = try_build(fo.attrs(DType::F32, 1)).unwrap();
    let narrow = Tensor::from_vec(vec![2, 1], vec![0.0f32, 1.0]);
    assert!(infer_known(&*op, &[Some(&narrow)]).is_err());
}
