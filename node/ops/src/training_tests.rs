//! The optimizers against their definitions: numbers from ONNX's node tests, and the spec's
//! pseudo code written out here in f64 on several groups of odd sizes, on the CPU and the GPU.

use super::*;
use crate::AttrValue;
use crate::testkit::gpu::run_op;
use crate::testkit::{Rng, assert_close, infer_known, run};

fn node(op_type: &str, attrs: Vec<(&str, AttrValue)>, ins: usize, outs: usize) -> Box<dyn Op> {
    try_node(op_type, attrs, ins, outs).expect("the node builds")
}

fn try_node(
    op_type: &str,
    attrs: Vec<(&str, AttrValue)>,
    ins: usize,
    outs: usize,
) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    crate::build_in(
        TRAINING_DOMAIN,
        &NodeSpec {
            name: "t",
            op_type,
            attrs: &attrs,
            opset: 1,
            num_inputs: ins,
            num_outputs: outs,
        },
    )
}

fn f(v: f32) -> AttrValue {
    AttrValue::Float(v)
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

/// R, T, then the groups' tensors in input order.
fn inputs(r: f32, t: i64, tensors: &[Tensor]) -> Vec<Tensor> {
    let mut v = vec![Tensor::scalar(r), Tensor::scalar(t)];
    v.extend(tensors.iter().cloned());
    v
}

fn run_all(op: &dyn Op, ins: &[Tensor]) -> Vec<Tensor> {
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    run(op, &refs).unwrap()
}

/// The GPU's outputs, or `None` when GPU tests are skipped.
fn run_gpu(op: &dyn Op, ins: &[Tensor]) -> Option<Vec<Tensor>> {
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    let types = infer_known(op, &refs).unwrap();
    match run_op(op, &refs, &types) {
        Err(e) if e == "skipped" => None,
        Err(e) => panic!("GPU run of {op:?}: {e}"),
        Ok(out) => Some(out),
    }
}

#[test]
fn numbers_of_the_onnx_node_tests() {
    let attrs = vec![
        ("decay_factor", f(0.1)),
        ("epsilon", f(1e-5)),
        ("norm_coefficient", f(0.001)),
    ];
    let op = node("Adagrad", attrs, 5, 2);
    let one = |v: f32| Tensor::from_vec(vec![1], vec![v]);
    let ins = inputs(0.1, 0, &[one(1.0), one(-1.0), one(2.0)]);
    let out = run_all(&*op, &ins);
    assert_close(&vals(&out[0]), &[1.0576962], 1e-6);
    assert_close(&vals(&out[1]), &[2.998001], 1e-6);

    let two = |a: f32, b: f32| Tensor::from_vec(vec![2], vec![a, b]);
    let (x, g, v) = (two(1.2, 2.8), two(-0.94, -2.5), two(1.7, 3.6));
    let attrs = vec![
        ("alpha", f(0.95)),
        ("beta", f(0.1)),
        ("epsilon", f(1e-7)),
        ("norm_coefficient", f(0.001)),
    ];
    let op = node("Adam", attrs, 6, 3);
    let ins = inputs(0.1, 0, &[x.clone(), g.clone(), v.clone(), two(0.1, 0.1)]);
    let out = run_all(&*op, &ins);
    assert_close(&vals(&out[0]), &[1.0250363, 2.6610327], 1e-6);
    assert_close(&vals(&out[1]), &[1.56806, 3.2951398], 1e-6);
    assert_close(&vals(&out[2]), &[0.8032108, 5.622407], 1e-6);

    let attrs = vec![
        ("alpha", f(0.95)),
        ("beta", f(1.0)),
        ("mode", AttrValue::String("nesterov".into())),
        ("norm_coefficient", f(0.01)),
    ];
    let op = node("Momentum", attrs, 5, 2);
    let out = run_all(&*op, &inputs(0.1, 0, &[x, g, v]));
    assert_close(&vals(&out[0]), &[1.227535, 2.95714], 1e-6);
    assert_close(&vals(&out[1]), &[0.68700004, 0.94799995], 1e-6);
}

/// Three groups of odd sizes (one past a workgroup, a 3-D one, a single element).
const SHAPES: [&[usize]; 3] = [&[257], &[3, 7, 13], &[1]];

/// `kinds` tensors per group, for every group, kind by kind as the inputs list them; state
/// tensors (kind 2 on) are positive as accumulated squares are.
fn group_tensors(seed: u64, kinds: usize, f64s: bool) -> Vec<Tensor> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for kind in 0..kinds {
        for shape in SHAPES {
            let n = crate::tensor::numel(shape);
            let v: Vec<f64> = rng
                .f64s(n)
                .into_iter()
                .map(|a| if kind >= 2 { a.abs() * 3.0 } else { a * 2.0 })
                .collect();
            out.push(if f64s {
                Tensor::from_vec(shape.to_vec(), v)
            } else {
                Tensor::from_vec(shape.to_vec(), v.iter().map(|&a| a as f32).collect())
            });
        }
    }
    out
}

/// The spec's pseudo code per element: (x, g, states) to the new x and states.
fn reference(op: &str, r: f64, t: i64, x: f64, g: f64, s: &[f64]) -> Vec<f64> {
    // The op's attributes are f32: the same values, widened.
    let c = |v: f32| f64::from(v);
    let (norm, alpha, beta, eps) = (c(0.02), c(0.85), c(0.97), c(1e-4));
    let gr = norm * x + g;
    match op {
        "Adagrad" => {
            let decay = c(0.3);
            let rr = r / (1.0 + t as f64 * decay);
            let h = s[0] + gr * gr;
            vec![x - rr * gr / (h.sqrt() + eps), h]
        }
        "Adam" => {
            let post = c(0.05);
            let v = alpha * s[0] + (1.0 - alpha) * gr;
            let h = beta * s[1] + (1.0 - beta) * gr * gr;
            let ra = if t > 0 {
                r * (1.0 - beta.powf(t as f64)).sqrt() / (1.0 - alpha.powf(t as f64))
            } else {
                r
            };
            vec![(1.0 - post) * (x - ra * v / (h.sqrt() + eps)), v, h]
        }
        _ => {
            let b = if t > 0 { beta } else { 1.0 };
            let v = alpha * s[0] + b * gr;
            let dir = if op == "Nesterov" { gr + alpha * v } else { v };
            vec![x - r * dir, v]
        }
    }
}

fn attrs_for(op: &str) -> (&'static str, Vec<(&'static str, AttrValue)>) {
    // The values `reference` uses.
    match op {
        "Adagrad" => (
            "Adagrad",
            vec![
                ("norm_coefficient", f(0.02)),
                ("epsilon", f(1e-4)),
                ("decay_factor", f(0.3)),
            ],
        ),
        "Adam" => (
            "Adam",
            vec![
                ("norm_coefficient", f(0.02)),
                ("norm_coefficient_post", f(0.05)),
                ("alpha", f(0.85)),
                ("beta", f(0.97)),
                ("epsilon", f(1e-4)),
            ],
        ),
        mode => (
            "Momentum",
            vec![
                ("norm_coefficient", f(0.02)),
                ("alpha", f(0.85)),
                ("beta", f(0.97)),
                (
                    "mode",
                    AttrValue::String(
                        if mode == "Nesterov" {
                            "nesterov"
                        } else {
                            "standard"
                        }
                        .into(),
                    ),
                ),
            ],
        ),
    }
}

/// Checks outputs (new X of every group, then each state) against [`reference`].
fn check(op: &str, t: i64, ins: &[Tensor], out: &[Tensor], tol: f64) {
    let groups = SHAPES.len();
    let kinds = (ins.len() - 2) / groups;
    for j in 0..groups {
        let got: Vec<Vec<f64>> = (0..kinds - 1).map(|k| vals(&out[k * groups + j])).collect();
        let inp: Vec<Vec<f64>> = (0..kinds).map(|k| vals(&ins[2 + k * groups + j])).collect();
        for i in 0..inp[0].len() {
            let states: Vec<f64> = (2..kinds).map(|k| inp[k][i]).collect();
            let want = reference(op, 0.0625, t, inp[0][i], inp[1][i], &states);
            for (k, w) in want.iter().enumerate() {
                let g = got[k][i];
                assert!(
                    (g - w).abs() <= tol * w.abs().max(1.0),
                    "{op} T={t} group {j} output kind {k} element {i}: got {g}, want {w}"
                );
            }
        }
    }
}

#[test]
fn every_rule_on_several_groups_cpu_and_gpu() {
    for op in ["Adagrad", "Adam", "Momentum", "Nesterov"] {
        let (op_type, attrs) = attrs_for(op);
        let kinds = if op == "Adam" { 4 } else { 3 };
        let node = node(op_type, attrs, 2 + kinds * 3, (kinds - 1) * 3);
        for (seed, t) in [(1, 0i64), (2, 1), (3, 7), (4, 1_000_000_000_000)] {
            for f64s in [false, true] {
                let ins = inputs(0.0625, t, &group_tensors(seed, kinds, f64s));
                let ins = if f64s {
                    let mut v = ins;
                    v[0] = Tensor::scalar(0.0625f64);
                    v
                } else {
                    ins
                };
                check(op, t, &ins, &run_all(&*node, &ins), 1e-6);
                if let Some(gpu) = run_gpu(&*node, &ins) {
                    check(op, t, &ins, &gpu, if f64s { 1e-6 } else { 2e-5 });
                }
            }
        }
    }
}

#[test]
fn malformed_nodes_and_inputs_are_refused() {
    let (_, attrs) = attrs_for("Adam");
    // Adam takes four tensors per group.
    assert!(try_node("Adam", attrs.clone(), 5, 2).is_err());
    assert!(try_node("Adam", attrs, 6, 2).is_err());
    let no_mode = vec![
        ("alpha", f(0.9)),
        ("beta", f(1.0)),
        ("norm_coefficient", f(0.0)),
    ];
    assert!(try_node("Momentum", no_mode.clone(), 5, 2).is_err());
    let mut odd = no_mode;
    odd.push(("mode", AttrValue::String("heavy".into())));
    assert!(try_node("Momentum", odd, 5, 2).is_err());

    let (_, attrs) = attrs_for("Adagrad");
    let op = node("Adagrad", attrs, 5, 2);
    let x = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]);
    let short = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
    let ins = inputs(0.1, 0, &[x.clone(), short, x.clone()]);
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    assert!(infer_known(&*op, &refs).is_err());
    let mut ins = inputs(0.1, 0, &[x.clone(), x.clone(), x]);
    ins[1] = Tensor::scalar(0i32);
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    assert!(infer_known(&*op, &refs).is_err());
}
