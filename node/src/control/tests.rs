//! Bodies by hand: values computed from the ops' definitions.

use super::*;
use crate::model::{Dim, GraphDef, ValueDef};
use crate::ops::{Attrs, ValueType};
use crate::session::{DeviceSelection, Session, SessionOptions};
use crate::tensor::{DType, Tensor};

fn n(op: &str, ins: &[&str], outs: &[&str], attrs: Vec<(&str, AttrValue)>) -> NodeDef {
    NodeDef {
        name: format!("{op}_{}", outs.first().copied().unwrap_or("")),
        op_type: op.into(),
        domain: String::new(),
        inputs: ins.iter().map(|s| s.to_string()).collect(),
        outputs: outs.iter().map(|s| s.to_string()).collect(),
        attrs: Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
    }
}

fn v(name: &str, dtype: DType, dims: Option<&[usize]>) -> ValueDef {
    ValueDef {
        name: name.into(),
        dtype: Some(dtype),
        dims: dims.map(|d| d.iter().map(|&x| Dim::Fixed(x)).collect()),
        kind: Default::default(),
    }
}

fn graph(
    nodes: Vec<NodeDef>,
    inputs: Vec<ValueDef>,
    outputs: Vec<ValueDef>,
    inits: Vec<(&str, Tensor)>,
) -> GraphDef {
    GraphDef {
        name: "g".into(),
        nodes,
        initializers: inits.into_iter().map(|(k, t)| (k.to_string(), t)).collect(),
        inputs,
        outputs,
        ..Default::default()
    }
}

fn session(g: GraphDef, opset: i64, devices: DeviceSelection) -> Session {
    let m = ModelDef {
        ir_version: 8,
        opset,
        producer: "test".into(),
        graph: g,
    };
    Session::from_model_def(
        &m,
        SessionOptions {
            devices,
            ..Default::default()
        },
    )
    .unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_f64_vec()
        .unwrap()
        .into_iter()
        .map(|x| x as f32)
        .collect()
}

#[test]
fn captured_names_are_the_reads_of_outer_values() {
    let inner = graph(
        vec![n("Add", &["a", "outer2"], &["b"], vec![])],
        vec![],
        vec![v("b", DType::F32, None)],
        vec![],
    );
    let body = graph(
        vec![
            n("Mul", &["x", "outer1"], &["a"], vec![]),
            n(
                "If",
                &["c"],
                &["o"],
                vec![
                    ("then_branch", AttrValue::Graph(Box::new(inner.clone()))),
                    ("else_branch", AttrValue::Graph(Box::new(inner))),
                ],
            ),
        ],
        vec![v("x", DType::F32, None)],
        vec![v("o", DType::F32, None)],
        vec![("c", Tensor::from_bools(vec![], vec![true]))],
    );
    let got: Vec<String> = captured(&body).into_iter().collect();
    assert_eq!(got, ["outer1", "outer2"]);
}

/// y = x; for i in 0..m: y = y * 2 + outer; also stacks i * 1.0 (a scan output) and reads an
/// outer value in the body.
fn loop_model(with_cond: bool) -> GraphDef {
    let body = graph(
        vec![
            n("Mul", &["y_in", "two"], &["t"], vec![]),
            n("Add", &["t", "outer"], &["y_out"], vec![]),
            n("Cast", &["i"], &["i_f"], vec![("to", AttrValue::Int(1))]),
            n("Identity", &["cond_in"], &["cond_out"], vec![]),
        ],
        vec![
            v("i", DType::I64, Some(&[])),
            v("cond_in", DType::Bool, Some(&[])),
            v("y_in", DType::F32, None),
        ],
        vec![
            v("cond_out", DType::Bool, None),
            v("y_out", DType::F32, None),
            v("i_f", DType::F32, None),
        ],
        vec![("two", Tensor::scalar(2.0f32))],
    );
    let cond = if with_cond { "cond" } else { "" };
    graph(
        vec![n(
            "Loop",
            &["m", cond, "x"],
            &["y", "is"],
            vec![("body", AttrValue::Graph(Box::new(body)))],
        )],
        vec![
            v("x", DType::F32, Some(&[2])),
            v("m", DType::I64, Some(&[])),
            v("outer", DType::F32, Some(&[2])),
        ],
        vec![v("y", DType::F32, None), v("is", DType::F32, None)],
        vec![("cond", Tensor::from_bools(vec![], vec![true]))],
    )
}

#[test]
fn loop_carries_scans_and_reads_outer_values() {
    for devices in [DeviceSelection::Cpu, DeviceSelection::Vulkan] {
        if devices == DeviceSelection::Vulkan && vkml_testkit::test_gpu().is_none() {
            continue;
        }
        for with_cond in [true, false] {
            let s = session(loop_model(with_cond), 13, devices);
            for m in [0i64, 1, 3] {
                let out = s
                    .run(&[
                        ("x", Tensor::from_vec(vec![2], vec![1.0f32, -1.0])),
                        ("m", Tensor::scalar(m)),
                        ("outer", Tensor::from_vec(vec![2], vec![0.5f32, 0.25])),
                    ])
                    .unwrap();
                let (mut a, mut b) = (1.0f32, -1.0f32);
                for _ in 0..m {
                    a = a * 2.0 + 0.5;
                    b = b * 2.0 + 0.25;
                }
                assert_eq!(f32s(&out[0].1), [a, b]);
                let is: Vec<f32> = (0..m).map(|i| i as f32).collect();
                assert_eq!(f32s(&out[1].1), is);
                assert_eq!(out[1].1.shape(), [m as usize]);
            }
        }
    }
}

/// A trip count known while planning and a condition the body hands back through Identity
/// (as exporters write it): the scan output's length is the trip count, found from types
/// alone, so a cluster can plan the loop without the inputs' values.
#[test]
fn a_known_trip_count_plans_a_loop_from_types_alone() {
    let mut g = loop_model(true);
    g.inputs.retain(|i| i.name != "m");
    g.initializers.push(("m".into(), Tensor::scalar(3i64)));
    let s = session(g, 13, DeviceSelection::Cpu);
    let f = |d: &[usize]| ValueType::new(DType::F32, d.to_vec());
    let types = s.output_types(&[f(&[2]), f(&[2])], &[]).unwrap();
    assert_eq!(types, [f(&[2]), f(&[3])]);
}

#[test]
fn scan_runs_either_way_along_any_axis() {
    // State s [2]; scanned x [2, 3] along axis 1, reversed: s += column; output s, stacked
    // along axis 1 of [2, 3].
    let body = graph(
        vec![
            n("Add", &["s_in", "col"], &["s_out"], vec![]),
            n("Identity", &["s_out"], &["o"], vec![]),
        ],
        vec![v("s_in", DType::F32, None), v("col", DType::F32, None)],
        vec![v("s_out", DType::F32, None), v("o", DType::F32, None)],
        vec![],
    );
    let g = graph(
        vec![n(
            "Scan",
            &["s0", "x"],
            &["s", "os"],
            vec![
                ("body", AttrValue::Graph(Box::new(body))),
                ("num_scan_inputs", AttrValue::Int(1)),
                ("scan_input_axes", AttrValue::Ints(vec![1])),
                ("scan_input_directions", AttrValue::Ints(vec![1])),
                ("scan_output_axes", AttrValue::Ints(vec![-1])),
            ],
        )],
        vec![
            v("s0", DType::F32, Some(&[2])),
            v("x", DType::F32, Some(&[2, 3])),
        ],
        vec![v("s", DType::F32, None), v("os", DType::F32, None)],
        vec![],
    );
    let s = session(g, 16, DeviceSelection::Cpu);
    let x = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0]);
    let out = s
        .run(&[
            ("s0", Tensor::from_vec(vec![2], vec![0.0f32, 0.0])),
            ("x", x),
        ])
        .unwrap();
    assert_eq!(f32s(&out[0].1), [6.0, 60.0]);
    // Columns taken last first: running sums 3, 5, 6 and 30, 50, 60, at steps 0, 1, 2.
    assert_eq!(out[1].1.shape(), [2, 3]);
    assert_eq!(f32s(&out[1].1), [3.0, 5.0, 6.0, 30.0, 50.0, 60.0]);
}

#[test]
fn if_branches_of_different_shapes_plan_per_condition() {
    let then = graph(
        vec![n("Identity", &["x"], &["a"], vec![])],
        vec![],
        vec![v("a", DType::F32, None)],
        vec![],
    );
    let other = graph(
        vec![n(
            "Concat",
            &["x", "x"],
            &["b"],
            vec![("axis", AttrValue::Int(0))],
        )],
        vec![],
        vec![v("b", DType::F32, None)],
        vec![],
    );
    let g = graph(
        vec![n(
            "If",
            &["c"],
            &["y"],
            vec![
                ("then_branch", AttrValue::Graph(Box::new(then))),
                ("else_branch", AttrValue::Graph(Box::new(other))),
            ],
        )],
        vec![
            v("c", DType::Bool, Some(&[])),
            v("x", DType::F32, Some(&[2])),
        ],
        vec![v("y", DType::F32, None)],
        vec![],
    );
    let s = session(g, 13, DeviceSelection::Cpu);
    let x = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
    for (c, want) in [(true, vec![1.0, 2.0]), (false, vec![1.0, 2.0, 1.0, 2.0])] {
        let out = s
            .run(&[("c", Tensor::from_bools(vec![], vec![c])), ("x", x.clone())])
            .unwrap();
        assert_eq!(f32s(&out[0].1), want);
    }
}

#[test]
fn malformed_control_flow_is_refused_by_name() {
    let body = graph(vec![], vec![], vec![], vec![]);
    let g = graph(
        vec![n(
            "Loop",
            &["", "", "x"],
            &["y"],
            vec![("body", AttrValue::Graph(Box::new(body)))],
        )],
        vec![v("x", DType::F32, Some(&[2]))],
        vec![v("y", DType::F32, None)],
        vec![],
    );
    let m = ModelDef {
        ir_version: 8,
        opset: 13,
        producer: String::new(),
        graph: g,
    };
    let e = Session::from_model_def(&m, SessionOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("Loop") && e.contains("body takes the iteration number"),
        "{e}"
    );
}

#[test]
fn nested_bodies_read_values_two_scopes_out() {
    // Loop (3 times) whose body holds an If on the iteration's parity; both branches read
    // `outer` from the main graph: y += outer on even iterations, y -= 1 on odd ones.
    let then = graph(
        vec![n("Add", &["y_in", "outer"], &["a"], vec![])],
        vec![],
        vec![v("a", DType::F32, None)],
        vec![],
    );
    let other = graph(
        vec![n("Sub", &["y_in", "one"], &["b"], vec![])],
        vec![],
        vec![v("b", DType::F32, None)],
        vec![],
    );
    let body = graph(
        vec![
            n("Mod", &["i", "two"], &["r"], vec![]),
            n("Equal", &["r", "zero"], &["even"], vec![]),
            n(
                "If",
                &["even"],
                &["y_out"],
                vec![
                    ("then_branch", AttrValue::Graph(Box::new(then))),
                    ("else_branch", AttrValue::Graph(Box::new(other))),
                ],
            ),
            n("Identity", &["cond_in"], &["cond_out"], vec![]),
        ],
        vec![
            v("i", DType::I64, Some(&[])),
            v("cond_in", DType::Bool, Some(&[])),
            v("y_in", DType::F32, None),
        ],
        vec![
            v("cond_out", DType::Bool, None),
            v("y_out", DType::F32, None),
        ],
        vec![
            ("two", Tensor::scalar(2i64)),
            ("zero", Tensor::scalar(0i64)),
            ("one", Tensor::scalar(1.0f32)),
        ],
    );
    let g = graph(
        vec![n(
            "Loop",
            &["m", "", "x"],
            &["y"],
            vec![("body", AttrValue::Graph(Box::new(body)))],
        )],
        vec![
            v("x", DType::F32, Some(&[2])),
            v("outer", DType::F32, Some(&[2])),
        ],
        vec![v("y", DType::F32, None)],
        vec![("m", Tensor::scalar(3i64))],
    );
    let s = session(g, 13, DeviceSelection::Cpu);
    let out = s
        .run(&[
            ("x", Tensor::from_vec(vec![2], vec![1.0f32, 2.0])),
            ("outer", Tensor::from_vec(vec![2], vec![10.0f32, 20.0])),
        ])
        .unwrap();
    // Iterations 0 and 2 add outer, 1 subtracts 1.
    assert_eq!(f32s(&out[0].1), [20.0, 41.0]);
}
