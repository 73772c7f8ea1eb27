//! The QDQ pass on hand-built graphs: a MatMul, a Gemm with its bias and a Reshape between
//! Q/DQ pairs become QLinearMatMul, QGemm and a Reshape of the 8-bit values, and the rewritten
//! graph gives what the float one does within one quantum of the output; forms the integer
//! ops cannot take stay float.

use super::fuse_tests::run;
use super::{Graph, Specialized};
use crate::onnx::proto::attribute_proto::AttributeType;
use crate::onnx::proto::{AttributeProto, GraphProto, NodeProto};
use crate::onnx::tests::{
    D, TempDir, f32_bytes, model_with, node, raw_tensor, tensor_value, write_model,
};
use crate::ops::ValueType;
use crate::tensor::{DType, Tensor};

const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;
const INT32: i32 = 6;
const INT64: i32 = 7;

fn attr(name: &str, i: i64, f: Option<f32>) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: if f.is_some() {
            AttributeType::Float
        } else {
            AttributeType::Int
        } as i32,
        i,
        f: f.unwrap_or(0.0),
        ..Default::default()
    }
}

/// QuantizeLinear of `v` to `{v}_q` and DequantizeLinear back to `{v}_d`.
fn qdq(v: &str, s: &str, z: &str) -> [NodeProto; 2] {
    [
        node("QuantizeLinear", "", &[v, s, z], &[&format!("{v}_q")]),
        node(
            "DequantizeLinear",
            "",
            &[&format!("{v}_q"), s, z],
            &[&format!("{v}_d")],
        ),
    ]
}

fn with(mut n: NodeProto, attrs: Vec<AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

/// x [4, 6] -> Q/DQ -> MatMul by B [6, 5] (int8, a scale per column) -> Q/DQ -> Reshape to
/// [5, 4] -> Q/DQ -> Gemm by W' (W [3, 4] int8, transB) + bias (int32 in the product's scale,
/// `alpha` as given) -> Q/DQ -> y.
fn model(alpha: f32) -> Graph {
    let (sx, sm, sg) = (0.05f32, 0.04f32, 0.03f32);
    let sb: Vec<f32> = (0..5).map(|j| 0.01 + 0.002 * j as f32).collect();
    let sw = 0.02f32;
    let b: Vec<u8> = (0..30).map(|i| ((i * 37) % 255) as u8).collect();
    let w: Vec<u8> = (0..12).map(|i| ((i * 91 + 7) % 255) as u8).collect();
    let bias: Vec<u8> = [120i32, -340, 55]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let scalar = |n: &str, v: f32| raw_tensor(n, FLOAT, &[], &f32_bytes(&[v]));
    let inits = vec![
        scalar("sx", sx),
        raw_tensor("zx", UINT8, &[], &[128]),
        raw_tensor("bq", INT8, &[6, 5], &b),
        raw_tensor("sb", FLOAT, &[5], &f32_bytes(&sb)),
        scalar("sm", sm),
        raw_tensor("zm", UINT8, &[], &[120]),
        raw_tensor(
            "shape",
            INT64,
            &[2],
            &[5i64, 4].map(i64::to_le_bytes).concat(),
        ),
        raw_tensor("wq", INT8, &[3, 4], &w),
        scalar("sw", sw),
        raw_tensor("cq", INT32, &[3], &bias),
        scalar("sc", sm * sw),
        scalar("sg", sg),
        raw_tensor("zg", UINT8, &[], &[100]),
    ];
    let mut nodes = vec![];
    nodes.extend(qdq("x", "sx", "zx"));
    nodes.push(with(
        node("DequantizeLinear", "", &["bq", "sb"], &["b"]),
        vec![attr("axis", 1, None)],
    ));
    nodes.push(node("MatMul", "mm", &["x_d", "b"], &["m"]));
    nodes.extend(qdq("m", "sm", "zm"));
    nodes.push(node("Reshape", "r", &["m_d", "shape"], &["r"]));
    nodes.extend(qdq("r", "sm", "zm"));
    nodes.push(node("DequantizeLinear", "", &["wq", "sw"], &["w"]));
    nodes.push(node("DequantizeLinear", "", &["cq", "sc"], &["c"]));
    nodes.push(with(
        node("Gemm", "gemm", &["r_d", "w", "c"], &["g"]),
        vec![attr("transB", 1, None), attr("alpha", 0, Some(alpha))],
    ));
    nodes.extend(qdq("g", "sg", "zg"));
    let g = GraphProto {
        name: "g".into(),
        node: nodes,
        initializer: inits,
        input: vec![tensor_value("x", FLOAT, Some(&[D::V(4), D::V(6)]))],
        output: vec![tensor_value("g_d", FLOAT, None)],
        ..Default::default()
    };
    let dir = TempDir::new("fuse_qdq");
    let path = write_model(&dir, "m.onnx", &model_with(g));
    Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap()
}

fn ops(g: &Graph, spec: &Specialized) -> Vec<String> {
    spec.live
        .iter()
        .map(|&i| spec.node(g, i).op_type.clone())
        .collect()
}

#[test]
fn products_and_moves_between_qdq_pairs_become_integer_ops() {
    let g = model(1.0);
    let types = [ValueType::new(DType::F32, vec![4, 6])];
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_qdq(&mut fused);
    let ops = ops(&g, &fused);
    for gone in ["MatMul", "Gemm"] {
        assert!(!ops.iter().any(|o| o == gone), "{gone} left: {ops:?}");
    }
    for made in ["QLinearMatMul", "QGemm"] {
        assert!(ops.iter().any(|o| o == made), "no {made}: {ops:?}");
    }
    // Only x's QuantizeLinear and the output's DequantizeLinear remain around them.
    let count = |t: &str| ops.iter().filter(|o| *o == t).count();
    assert_eq!(
        (count("QuantizeLinear"), count("DequantizeLinear")),
        (1, 1),
        "{ops:?}"
    );
    let reshape = fused
        .live
        .iter()
        .map(|&i| fused.node(&g, i))
        .find(|n| n.op_type == "Reshape")
        .unwrap();
    let input = fused.types[reshape.inputs[0].unwrap()].as_ref().unwrap();
    assert_eq!(input.dtype, DType::U8);
    // The same values within one quantum of y (integer requantization against float
    // rounding of the same products).
    let x = Tensor::from_vec(
        vec![4, 6],
        (0..24)
            .map(|i| ((i * 53) % 29) as f32 * 0.21 - 2.9)
            .collect::<Vec<f32>>(),
    );
    let (want, got) = (&run(&g, &plain, &x)[0], &run(&g, &fused, &x)[0]);
    let (want, got) = (want.view::<f32>().unwrap(), got.view::<f32>().unwrap());
    assert_eq!(want.len(), 15);
    let spread = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(spread > 0.5, "outputs not all clipped: {want:?}");
    for (w, g) in want.iter().zip(got.iter()) {
        assert!((w - g).abs() <= 0.03 + 1e-6, "{w} vs {g}");
    }
}

#[test]
fn a_gemm_with_alpha_stays_float() {
    // alpha 2 scales the product: the bias's scale is no longer the product's, so the Gemm
    // keeps its float form (the MatMul before it still turns integer).
    let g = model(2.0);
    let mut fused = g
        .specialize_unfused(&[ValueType::new(DType::F32, vec![4, 6])], &[])
        .unwrap();
    g.fuse_qdq(&mut fused);
    let ops = ops(&g, &fused);
    assert!(ops.iter().any(|o| o == "Gemm"), "{ops:?}");
    assert!(ops.iter().any(|o| o == "QLinearMatMul"), "{ops:?}");
}

/// x [2, 64] -> Q/DQ -> Sigmoid -> Q/DQ (int8) -> Mul by 3 -> Q/DQ -> Clip(0.1, 2) -> Q/DQ.
fn activations() -> Graph {
    let scalar = |n: &str, v: f32| raw_tensor(n, FLOAT, &[], &f32_bytes(&[v]));
    let inits = vec![
        scalar("sx", 0.04),
        raw_tensor("zx", UINT8, &[], &[128]),
        scalar("ss", 1.0 / 200.0),
        raw_tensor("zs", INT8, &[], &[(-100i8) as u8]),
        scalar("three", 3.0),
        scalar("sm", 0.02),
        raw_tensor("zm", UINT8, &[], &[3]),
        scalar("lo", 0.1),
        scalar("hi", 2.0),
    ];
    let mut nodes = vec![];
    nodes.extend(qdq("x", "sx", "zx"));
    nodes.push(node("Sigmoid", "s", &["x_d"], &["s"]));
    nodes.extend(qdq("s", "ss", "zs"));
    nodes.push(node("Mul", "m", &["s_d", "three"], &["m"]));
    nodes.extend(qdq("m", "sm", "zm"));
    nodes.push(node("Clip", "c", &["m_d", "lo", "hi"], &["c"]));
    nodes.extend(qdq("c", "sm", "zm"));
    let g = GraphProto {
        name: "g".into(),
        node: nodes,
        initializer: inits,
        input: vec![tensor_value("x", FLOAT, Some(&[D::V(2), D::V(64)]))],
        output: vec![tensor_value("c_d", FLOAT, None)],
        ..Default::default()
    };
    let dir = TempDir::new("fuse_qdq");
    let path = write_model(&dir, "m.onnx", &model_with(g));
    Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap()
}

#[test]
fn elementwise_ops_between_qdq_pairs_become_tables_with_the_same_results() {
    let g = activations();
    let types = [ValueType::new(DType::F32, vec![2, 64])];
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_qdq(&mut fused);
    let ops = ops(&g, &fused);
    assert_eq!(
        ops,
        [
            "QuantizeLinear",
            "Lookup8",
            "Lookup8",
            "Lookup8",
            "DequantizeLinear"
        ]
    );
    // Every byte x can take, and beyond its range (saturating).
    let x = Tensor::from_vec(
        vec![2, 64],
        (0..128)
            .map(|i| (i as f32 - 64.0) * 0.09)
            .collect::<Vec<f32>>(),
    );
    let (want, got) = (&run(&g, &plain, &x)[0], &run(&g, &fused, &x)[0]);
    assert_eq!(want.bytes(), got.bytes());
    let distinct: std::collections::BTreeSet<u32> = want
        .view::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert!(distinct.len() > 20, "{} distinct outputs", distinct.len());
}

/// x [2, 3, 5, 5] -> Q/DQ -> GlobalAveragePool -> Q/DQ -> a, and x's DQ -> ReduceMean over
/// the spatial axes (keepdims) -> Q/DQ -> b, and to AveragePool -> Q/DQ -> d; a ReduceMean
/// that drops the axes (c) stays float.
fn averages() -> Graph {
    let scalar = |n: &str, v: f32| raw_tensor(n, FLOAT, &[], &f32_bytes(&[v]));
    let inits = vec![
        scalar("sx", 0.04),
        raw_tensor("zx", UINT8, &[], &[128]),
        scalar("sa", 0.01),
        raw_tensor("za", UINT8, &[], &[120]),
    ];
    let axes = |keep: i64| {
        vec![
            AttributeProto {
                name: "axes".into(),
                r#type: AttributeType::Ints as i32,
                ints: vec![2, 3],
                ..Default::default()
            },
            attr("keepdims", keep, None),
        ]
    };
    let mut nodes = vec![];
    nodes.extend(qdq("x", "sx", "zx"));
    nodes.push(node("GlobalAveragePool", "gap", &["x_d"], &["a"]));
    nodes.extend(qdq("a", "sa", "za"));
    nodes.push(with(node("ReduceMean", "rm", &["x_d"], &["b"]), axes(1)));
    nodes.extend(qdq("b", "sa", "za"));
    nodes.push(with(node("ReduceMean", "flat", &["x_d"], &["c"]), axes(0)));
    nodes.extend(qdq("c", "sa", "za"));
    let window = vec![
        AttributeProto {
            name: "kernel_shape".into(),
            r#type: AttributeType::Ints as i32,
            ints: vec![3, 2],
            ..Default::default()
        },
        attr("ceil_mode", 1, None),
    ];
    nodes.push(with(node("AveragePool", "avg", &["x_d"], &["d"]), window));
    nodes.extend(qdq("d", "sa", "za"));
    let out = |n: &str| tensor_value(n, FLOAT, None);
    let g = GraphProto {
        name: "g".into(),
        node: nodes,
        initializer: inits,
        input: vec![tensor_value(
            "x",
            FLOAT,
            Some(&[D::V(2), D::V(3), D::V(5), D::V(5)]),
        )],
        output: vec![out("a_d"), out("b_d"), out("c_d"), out("d_d")],
        ..Default::default()
    };
    let dir = TempDir::new("fuse_qdq_avg");
    let path = write_model(&dir, "m.onnx", &model_with(g));
    Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap()
}

#[test]
fn averages_between_qdq_pairs_become_integer_pools() {
    let g = averages();
    let types = [ValueType::new(DType::F32, vec![2, 3, 5, 5])];
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_qdq(&mut fused);
    let ops = ops(&g, &fused);
    let count = |t: &str| ops.iter().filter(|o| *o == t).count();
    assert_eq!(count("QLinearGlobalAveragePool"), 2, "{ops:?}");
    assert_eq!(count("GlobalAveragePool"), 0, "{ops:?}");
    assert_eq!(
        count("ReduceMean"),
        1,
        "the one without keepdims stays: {ops:?}"
    );
    assert_eq!(
        (count("AveragePool"), count("QLinearAveragePool")),
        (0, 1),
        "{ops:?}"
    );
    let x = Tensor::from_vec(
        vec![2, 3, 5, 5],
        (0..150)
            .map(|i| ((i * 67) % 41) as f32 * 0.11 - 1.7)
            .collect::<Vec<f32>>(),
    );
    let (want, got) = (run(&g, &plain, &x), run(&g, &fused, &x));
    for (w, g) in want.iter().zip(&got) {
        let (w, g) = (w.view::<f32>().unwrap(), g.view::<f32>().unwrap());
        assert_eq!(w.len(), g.len());
        // Within one quantum of the output's scale.
        for (a, b) in w.iter().zip(g.iter()) {
            assert!((a - b).abs() <= 0.01 + 1e-6, "{a} vs {b}");
        }
    }
}
