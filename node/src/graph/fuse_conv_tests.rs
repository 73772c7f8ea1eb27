//! The CPU backend's convolution pass on hand-built graphs: Conv + Add + Relu, Conv + Clip and
//! Conv + LeakyRelu become FusedConv nodes that compute what the unfused graph does; a Conv
//! whose output is a graph output or read twice, an Add that broadcasts, a Clip with a
//! computed bound stay as they are.

use super::fuse_tests::{graph, graph_of, ramp, run};
use super::{Graph, Specialized};
use crate::onnx::proto::attribute_proto::AttributeType;
use crate::onnx::proto::{AttributeProto, NodeProto};
use crate::onnx::tests::node;
use crate::ops::{AttrValue, FUSED_CONV, MS_DOMAIN, ValueType};
use crate::tensor::DType;

const X: [usize; 4] = [1, 2, 5, 5];

fn with(mut n: NodeProto, attrs: Vec<AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

fn float(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Float as i32,
        f,
        ..Default::default()
    }
}

/// A 3x3 convolution of `x` by `w` (4 x 2 x 3 x 3) and `b`, padded to keep 5 x 5.
fn conv(name: &str, w: &str, b: &str, y: &str) -> NodeProto {
    with(
        node("Conv", name, &["x", w, b], &[y]),
        vec![AttributeProto {
            name: "pads".into(),
            r#type: AttributeType::Ints as i32,
            ints: vec![1, 1, 1, 1],
            ..Default::default()
        }],
    )
}

fn weights(seed: f32) -> Vec<f32> {
    (0..72)
        .map(|i| ((i as f32 * 0.61 + seed).sin()) * 0.4)
        .collect()
}

/// The graph of `nodes` over x [1, 2, 5, 5] with weights wa, wb (4 x 2 x 3 x 3), biases ba,
/// bb, a per-channel [4, 1, 1] tensor pc and Clip bounds lo, hi.
fn graph_with(nodes: Vec<NodeProto>, outs: &[&str]) -> Graph {
    let (wa, wb) = (weights(0.3), weights(1.7));
    graph_of(graph(
        nodes,
        &[
            ("wa", &[4, 2, 3, 3], &wa),
            ("wb", &[4, 2, 3, 3], &wb),
            ("ba", &[4], &[0.1, -0.2, 0.3, -0.4]),
            ("bb", &[4], &[-0.05, 0.15, 0.0, 0.2]),
            ("pc", &[4, 1, 1], &[1.0, -1.0, 0.5, 2.0]),
            ("lo", &[], &[-0.3]),
            ("hi", &[], &[0.25]),
        ],
        &X.map(|d| d as i64),
        outs,
    ))
}

/// The graph specialised as is, and with the pass run.
fn specs(g: &Graph) -> (Specialized, Specialized) {
    let types = [ValueType::new(DType::F32, X.to_vec())];
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_convs(&mut fused);
    (plain, fused)
}

/// The op types of the live nodes, FusedConv with its activation.
fn live(g: &Graph, spec: &Specialized) -> Vec<String> {
    spec.live
        .iter()
        .map(|&i| {
            let n = spec.node(g, i);
            match n.attrs.get("activation") {
                Some(AttrValue::String(a)) => format!("{}({a})", n.op_type),
                _ => n.op_type.clone(),
            }
        })
        .collect()
}

fn same_outputs(g: &Graph, plain: &Specialized, fused: &Specialized) {
    let x = ramp(&X);
    let (want, got) = (run(g, plain, &x), run(g, fused, &x));
    for (w, o) in want.iter().zip(&got) {
        let (w, o) = (w.to_f64_vec().unwrap(), o.to_f64_vec().unwrap());
        assert_eq!(w.len(), o.len());
        for (a, b) in w.iter().zip(&o) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} vs {b}");
        }
    }
}

#[test]
fn conv_add_relu_becomes_one_fused_conv_reading_the_residual_as_z() {
    let g = graph_with(
        vec![
            conv("ca", "wa", "ba", "a"),
            conv("cr", "wb", "bb", "r"),
            node("Add", "add", &["a", "r"], &["s"]),
            node("Relu", "relu", &["s"], &["y"]),
        ],
        &["y"],
    );
    let (plain, fused) = specs(&g);
    assert_eq!(live(&g, &fused), ["Conv", "FusedConv(Relu)"]);
    let f = fused.node(&g, fused.live[1]);
    assert_eq!(
        (f.domain.as_str(), f.op_type.as_str()),
        (MS_DOMAIN, FUSED_CONV)
    );
    // X, W, B of the first Conv, then the second Conv's output as Z, computed before it.
    let id = |name: &str| g.value_names.iter().position(|n| n == name);
    let want: Vec<Option<usize>> = ["x", "wa", "ba", "r"].iter().map(|n| id(n)).collect();
    assert_eq!(f.inputs, want);
    same_outputs(&g, &plain, &fused);
}

#[test]
fn clip_with_constant_bounds_and_leaky_relu_fuse_with_their_convs() {
    let leaky = with(
        node("LeakyRelu", "leaky", &["b"], &["y2"]),
        vec![float("alpha", 0.2)],
    );
    let g = graph_with(
        vec![
            conv("ca", "wa", "ba", "a"),
            node("Clip", "clip", &["a", "lo", "hi"], &["y1"]),
            conv("cb", "wb", "bb", "b"),
            leaky,
        ],
        &["y1", "y2"],
    );
    let (plain, fused) = specs(&g);
    assert_eq!(
        live(&g, &fused),
        ["FusedConv(Clip)", "FusedConv(LeakyRelu)"]
    );
    same_outputs(&g, &plain, &fused);
}

#[test]
fn convs_whose_output_is_needed_elsewhere_or_broadcast_stay() {
    let g = graph_with(
        vec![
            // A graph output as well as the Relu's input.
            conv("c1", "wa", "ba", "a"),
            node("Relu", "r1", &["a"], &["y1"]),
            // Read twice.
            conv("c2", "wb", "bb", "b"),
            node("Relu", "r2", &["b"], &["y2"]),
            node("Sigmoid", "s2", &["b"], &["y3"]),
            // Added to a per-channel tensor (a broadcast, not a residual).
            conv("c3", "wa", "bb", "c"),
            node("Add", "add", &["c", "pc"], &["d"]),
            node("Relu", "r3", &["d"], &["y4"]),
            // A Clip whose bound is computed.
            conv("c4", "wb", "ba", "e"),
            with(
                node("ReduceMax", "bound", &["x"], &["m"]),
                vec![AttributeProto {
                    name: "keepdims".into(),
                    r#type: AttributeType::Int as i32,
                    i: 0,
                    ..Default::default()
                }],
            ),
            node("Clip", "clip", &["e", "lo", "m"], &["y5"]),
        ],
        &["a", "y1", "y2", "y3", "y4", "y5"],
    );
    let (plain, fused) = specs(&g);
    assert_eq!(live(&g, &fused), live(&g, &plain));
    assert!(!live(&g, &fused).iter().any(|op| op.starts_with(FUSED_CONV)));
}

#[test]
fn silu_written_as_mul_by_sigmoid_fuses_unless_the_sigmoid_is_read_elsewhere() {
    let g = graph_with(
        vec![
            conv("ca", "wa", "ba", "a"),
            node("Sigmoid", "sa", &["a"], &["sa"]),
            node("Mul", "ma", &["sa", "a"], &["y1"]),
            conv("cb", "wb", "bb", "b"),
            node("Sigmoid", "sb", &["b"], &["sb"]),
            node("Mul", "mb", &["b", "sb"], &["y2"]),
            node("Relu", "rb", &["sb"], &["y3"]),
        ],
        &["y1", "y2", "y3"],
    );
    let (plain, fused) = specs(&g);
    assert_eq!(
        live(&g, &fused),
        ["FusedConv(Silu)", "Conv", "Sigmoid", "Mul", "Relu"]
    );
    same_outputs(&g, &plain, &fused);
}
