//! Sequence models by hand; every expected value is computed in the test from the ops'
//! definitions.

use crate::error::Error;
use crate::io::Value;
use crate::model::{Dim, GraphDef, Kind, ModelDef, NodeDef, ValueDef};
use crate::ops::{AttrValue, Attrs};
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

fn v(name: &str, dtype: DType, dims: Option<&[usize]>, kind: Kind) -> ValueDef {
    ValueDef {
        name: name.into(),
        dtype: Some(dtype),
        dims: dims.map(|d| d.iter().map(|&x| Dim::Fixed(x)).collect()),
        kind,
    }
}

fn seq() -> Kind {
    Kind::Sequence(Box::new(Kind::Tensor))
}

fn session(nodes: Vec<NodeDef>, inputs: Vec<ValueDef>, outputs: Vec<ValueDef>) -> Session {
    let m = ModelDef {
        ir_version: 8,
        opset: 17,
        producer: "test".into(),
        graph: GraphDef {
            name: "g".into(),
            nodes,
            inputs,
            outputs,
            ..Default::default()
        },
    };
    let options = SessionOptions {
        devices: DeviceSelection::Cpu,
        ..Default::default()
    };
    Session::from_model_def(&m, options).unwrap()
}

fn range(shape: Vec<usize>) -> Tensor {
    let k: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..k).map(|x| x as f32).collect::<Vec<_>>())
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_tensor().unwrap().view::<f32>().unwrap().to_vec()
}

fn scalar(x: i64) -> Tensor {
    Tensor::from_vec(vec![], vec![x])
}

#[test]
fn split_then_concat_reverses_rows_through_sequence_positions() {
    // x [3, 2] split into rows, rebuilt as row 2, row 0, row 1 by SequenceAt/Insert/Erase.
    let nodes = vec![
        n(
            "SplitToSequence",
            &["x"],
            &["s"],
            vec![("axis", AttrValue::Int(0))],
        ),
        n("SequenceAt", &["s", "last"], &["r2"], vec![]),
        n("SequenceErase", &["s"], &["s01"], vec![]),
        n("SequenceInsert", &["s01", "r2", "zero"], &["s201"], vec![]),
        n("SequenceLength", &["s201"], &["len"], vec![]),
        n(
            "ConcatFromSequence",
            &["s201"],
            &["y"],
            vec![("axis", AttrValue::Int(0))],
        ),
    ];
    let s = session(
        nodes,
        vec![
            v("x", DType::F32, Some(&[3, 2]), Kind::Tensor),
            v("last", DType::I64, Some(&[]), Kind::Tensor),
            v("zero", DType::I64, Some(&[]), Kind::Tensor),
        ],
        vec![
            v("y", DType::F32, None, Kind::Tensor),
            v("len", DType::I64, None, Kind::Tensor),
        ],
    );
    let out = s
        .run(&[
            ("x", range(vec![3, 2])),
            ("last", scalar(-1)),
            ("zero", scalar(0)),
        ])
        .unwrap();
    assert_eq!(out[0].1.shape(), &[3, 2]);
    assert_eq!(
        out[0].1.view::<f32>().unwrap().to_vec(),
        vec![4.0, 5.0, 0.0, 1.0, 2.0, 3.0]
    );
    assert_eq!(out[1].1.to_i64_vec().unwrap(), vec![3]);
    // The positions fed in key the lowering: another value, another order.
    let out = s
        .run(&[
            ("x", range(vec![3, 2])),
            ("last", scalar(0)),
            ("zero", scalar(2)),
        ])
        .unwrap();
    // Row 0 taken, the last row erased, row 0 inserted at the end: rows 0, 1, 0.
    assert_eq!(
        out[0].1.view::<f32>().unwrap().to_vec(),
        vec![0.0, 1.0, 2.0, 3.0, 0.0, 1.0]
    );
}

#[test]
fn sequences_in_and_out_and_new_axis_concat() {
    let nodes = vec![
        n("SequenceInsert", &["s", "t"], &["u"], vec![]),
        n(
            "ConcatFromSequence",
            &["u"],
            &["stacked"],
            vec![
                ("axis", AttrValue::Int(-1)),
                ("new_axis", AttrValue::Int(1)),
            ],
        ),
    ];
    let s = session(
        nodes,
        vec![
            v("s", DType::F32, None, seq()),
            v("t", DType::F32, Some(&[2]), Kind::Tensor),
        ],
        vec![
            v("u", DType::F32, None, seq()),
            v("stacked", DType::F32, None, Kind::Tensor),
        ],
    );
    let a = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
    let b = Tensor::from_vec(vec![2], vec![3.0f32, 4.0]);
    let t = Tensor::from_vec(vec![2], vec![5.0f32, 6.0]);
    let feeds = [
        (
            "s",
            Value::Sequence(vec![Value::Tensor(a), Value::Tensor(b)]),
        ),
        ("t", Value::Tensor(t)),
    ];
    let out = s.run_values(&feeds).unwrap();
    let Value::Sequence(items) = &out[0].1 else {
        panic!("{:?}", out[0]);
    };
    let got: Vec<Vec<f32>> = items.iter().map(f32s).collect();
    assert_eq!(got, vec![vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0, 6.0]]);
    // Stacked on a new last axis: [2, 3], row i holding element i of each tensor.
    let stacked = out[1].1.as_tensor().unwrap();
    assert_eq!(stacked.shape(), &[2, 3]);
    assert_eq!(
        stacked.view::<f32>().unwrap().to_vec(),
        vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]
    );
    // A plain run cannot give the sequence back, and says where to go.
    let e = s.run(&[("t", Tensor::from_vec(vec![2], vec![0.0f32, 0.0]))]);
    assert!(e.is_err());
}

/// A loop appending x[0..=i] each iteration, as ONNX's loop13_seq test does.
fn growing_loop(trip: &str, cond: &str) -> Vec<NodeDef> {
    let body = GraphDef {
        name: "body".into(),
        nodes: vec![
            n("Identity", &["c_in"], &["c_out"], vec![]),
            n("Add", &["i", "one"], &["end"], vec![]),
            n("Unsqueeze", &["end", "zero"], &["ends"], vec![]),
            n("Slice", &["x", "zero", "ends"], &["part"], vec![]),
            n("SequenceInsert", &["s_in", "part"], &["s_out"], vec![]),
        ],
        initializers: vec![
            ("one".into(), scalar(1)),
            ("zero".into(), Tensor::from_vec(vec![1], vec![0i64])),
        ],
        inputs: vec![
            v("i", DType::I64, Some(&[]), Kind::Tensor),
            v("c_in", DType::Bool, Some(&[]), Kind::Tensor),
            v("s_in", DType::F32, None, seq()),
        ],
        outputs: vec![
            v("c_out", DType::Bool, Some(&[]), Kind::Tensor),
            v("s_out", DType::F32, None, seq()),
        ],
        ..Default::default()
    };
    vec![
        n("SequenceEmpty", &[], &["empty"], vec![]),
        n(
            "Loop",
            &[trip, cond, "empty"],
            &["res"],
            vec![("body", AttrValue::Graph(Box::new(body)))],
        ),
    ]
}

#[test]
fn a_loop_carrying_a_sequence_is_unrolled() {
    let s = session(
        growing_loop("m", "c"),
        vec![
            v("m", DType::I64, Some(&[]), Kind::Tensor),
            v("c", DType::Bool, Some(&[]), Kind::Tensor),
            v("x", DType::F32, Some(&[5]), Kind::Tensor),
        ],
        vec![v("res", DType::F32, None, seq())],
    );
    let x = Tensor::from_vec(vec![5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]);
    let feeds = [
        ("m", Value::Tensor(scalar(3))),
        ("c", Value::Tensor(Tensor::from_bools(vec![], vec![true]))),
        ("x", Value::Tensor(x)),
    ];
    let out = s.run_values(&feeds).unwrap();
    let Value::Sequence(items) = &out[0].1 else {
        panic!("{:?}", out[0]);
    };
    let got: Vec<Vec<f32>> = items.iter().map(f32s).collect();
    assert_eq!(got, vec![vec![1.0], vec![1.0, 2.0], vec![1.0, 2.0, 3.0]]);
}

#[test]
fn optionals_hold_or_lack_a_value() {
    let nodes = vec![
        n("OptionalHasElement", &["o"], &["has"], vec![]),
        n("Optional", &["t"], &["wrapped"], vec![]),
        n("OptionalGetElement", &["wrapped"], &["back"], vec![]),
    ];
    let opt = Kind::Optional(Box::new(Kind::Tensor));
    let s = session(
        nodes,
        vec![
            v("o", DType::F32, None, opt.clone()),
            v("t", DType::F32, Some(&[1]), Kind::Tensor),
        ],
        vec![
            v("has", DType::Bool, None, Kind::Tensor),
            v("back", DType::F32, None, Kind::Tensor),
        ],
    );
    let t = Tensor::from_vec(vec![1], vec![7.0f32]);
    for (o, want) in [
        (Value::Optional(None), false),
        (
            Value::Optional(Some(Box::new(Value::Tensor(t.clone())))),
            true,
        ),
    ] {
        let out = s
            .run_values(&[("o", o), ("t", Value::Tensor(t.clone()))])
            .unwrap();
        let has = out[0].1.as_tensor().unwrap().view_bool().unwrap().to_vec();
        assert_eq!(has, vec![want]);
        assert_eq!(f32s(&out[1].1), vec![7.0]);
    }
}

#[test]
fn structure_decided_by_data_keys_the_lowering_on_it() {
    // The position is the argmax of the data: the lowering is made for x's value.
    let nodes = vec![
        n("SplitToSequence", &["x"], &["s"], vec![]),
        n(
            "ArgMax",
            &["x"],
            &["at"],
            vec![("keepdims", AttrValue::Int(0))],
        ),
        n("SequenceAt", &["s", "at"], &["y"], vec![]),
    ];
    let s = session(
        nodes,
        vec![v("x", DType::F32, Some(&[3]), Kind::Tensor)],
        vec![v("y", DType::F32, None, Kind::Tensor)],
    );
    for x in [
        vec![1.0f32, 9.0, 3.0],
        vec![7.0, 2.0, 3.0],
        vec![1.0, 2.0, 8.0],
    ] {
        let want = x.iter().cloned().fold(f32::MIN, f32::max);
        let out = s.run(&[("x", Tensor::from_vec(vec![3], x))]).unwrap();
        assert_eq!(out[0].1.view::<f32>().unwrap().to_vec(), vec![want]);
    }
}

#[test]
fn bad_positions_and_kinds_are_named() {
    let nodes = vec![n("SequenceAt", &["s", "p"], &["y"], vec![])];
    let s = session(
        nodes,
        vec![
            v("s", DType::F32, None, seq()),
            v("p", DType::I64, Some(&[]), Kind::Tensor),
        ],
        vec![v("y", DType::F32, None, Kind::Tensor)],
    );
    let one = Value::Sequence(vec![Value::Tensor(range(vec![2]))]);
    let e = s
        .run_values(&[("s", one), ("p", Value::Tensor(scalar(3)))])
        .unwrap_err();
    assert!(
        e.to_string().contains("position 3 is outside [-1, 0]"),
        "{e}"
    );
    let e = s
        .run_values(&[
            ("s", Value::Tensor(range(vec![2]))),
            ("p", Value::Tensor(scalar(0))),
        ])
        .unwrap_err();
    assert!(matches!(e, Error::Input(_)), "{e}");
    assert!(
        e.to_string().contains("declared a sequence of tensors"),
        "{e}"
    );
}

#[test]
fn a_node_left_structured_is_refused_not_lowered_forever() {
    // A Scan whose body declares a sequence: no rule lowers it.
    let body = GraphDef {
        name: "body".into(),
        nodes: vec![n("Identity", &["x"], &["y"], vec![])],
        inputs: vec![v("x", DType::F32, None, seq())],
        outputs: vec![v("y", DType::F32, None, seq())],
        ..Default::default()
    };
    let nodes = vec![n(
        "Scan",
        &["a"],
        &["b"],
        vec![
            ("body", AttrValue::Graph(Box::new(body))),
            ("num_scan_inputs", AttrValue::Int(1)),
        ],
    )];
    let s = session(
        nodes,
        vec![v("a", DType::F32, Some(&[2]), Kind::Tensor)],
        vec![v("b", DType::F32, None, Kind::Tensor)],
    );
    let e = s.run(&[("a", range(vec![2]))]).unwrap_err().to_string();
    assert!(
        e.contains("Scan") && e.contains("sequences or optionals"),
        "{e}"
    );
}
