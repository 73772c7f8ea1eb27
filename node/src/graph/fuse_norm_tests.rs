//! The norm-into-product pass on hand-built graphs: what it fuses (a decode step's norms and
//! the products that read them), what it leaves (more rows than the matrix-vector kernel takes,
//! a norm read by anything but a product's A), and that the fused graph computes what the
//! unfused one does, op by op on the CPU and as a session on Vulkan.

use super::fuse_tests::{graph, ramp, run, session_outputs};
use super::{Graph, Specialized};
use crate::onnx::proto::{GraphProto, NodeProto, OperatorSetIdProto};
use crate::onnx::tests::{TempDir, model_with, node, write_model};
use crate::ops::{MS_DOMAIN, ValueType, fused, norm_matmul, swiglu_matmul};
use crate::tensor::{DType, Tensor};

const K: usize = 8;

fn model(g: GraphProto) -> crate::onnx::proto::ModelProto {
    let mut m = model_with(g);
    m.opset_import.push(OperatorSetIdProto {
        domain: MS_DOMAIN.into(),
        version: 1,
    });
    m
}

fn graph_of(g: GraphProto) -> Graph {
    let dir = TempDir::new("fuse-norm");
    let path = write_model(&dir, "m.onnx", &model(g));
    Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap()
}

fn ms(mut n: NodeProto) -> NodeProto {
    n.domain = MS_DOMAIN.into();
    n
}

fn values(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
        .collect()
}

/// A layer's head: the residual norm of x and r (a second input, x's shape here a constant)
/// read by two products; the residual sum is a graph output, as the next layer's norm reads it.
fn layer(rows: i64, extra_reader: bool) -> GraphProto {
    let w = values(K * 16, 0.05);
    let (sk, g) = (values(K * rows as usize, 0.3), values(K, 0.1));
    let mut nodes = vec![
        ms(node(
            "SkipSimplifiedLayerNormalization",
            "ln",
            &["x", "skip", "gamma"],
            &["n", "", "", "sum"],
        )),
        node("MatMul", "q", &["n", "wq"], &["q"]),
        node("MatMul", "k", &["n", "wk"], &["k"]),
        node(
            "SimplifiedLayerNormalization",
            "ln2",
            &["sum", "gamma"],
            &["n2"],
        ),
        node("MatMul", "head", &["n2", "wq"], &["logits"]),
    ];
    let mut outs = vec!["q", "k", "sum", "logits"];
    if extra_reader {
        nodes.push(node("Add", "also", &["n", "n"], &["twice"]));
        outs.push("twice");
    }
    let skip_dims = [1, rows, K as i64];
    graph(
        nodes,
        &[
            ("skip", &skip_dims, &sk),
            ("gamma", &[K as i64], &g),
            ("wq", &[K as i64, 16], &w),
            ("wk", &[K as i64, 16], &w[..K * 16]),
        ],
        &[1, rows, K as i64],
        &outs,
    )
}

fn specs(g: &Graph, rows: usize) -> (Specialized, Specialized) {
    let types = [ValueType::new(DType::F32, vec![1, rows, K])];
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_chains(&mut fused);
    g.fuse_norms(&mut fused);
    (plain, fused)
}

fn op_types(g: &Graph, spec: &Specialized) -> Vec<String> {
    spec.live
        .iter()
        .map(|&i| spec.node(g, i).op_type.clone())
        .collect()
}

fn close(got: &[Tensor], want: &[Tensor]) {
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.shape(), w.shape());
        let (g, w) = (g.view::<f32>().unwrap(), w.view::<f32>().unwrap());
        for (a, b) in g.iter().zip(w.iter()) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

#[test]
fn a_decode_step_s_norms_go_into_their_products() {
    let g = graph_of(layer(1, false));
    let (plain, fused) = specs(&g, 1);
    // Both norms go: the residual sum comes from the first product (q), which the second
    // norm's product reads after it.
    assert_eq!(
        op_types(&g, &fused),
        [
            norm_matmul::OP_TYPE,
            norm_matmul::OP_TYPE,
            norm_matmul::OP_TYPE
        ]
    );
    let q = fused.node(&g, fused.live[0]);
    assert_eq!(q.outputs.len(), 2);
    assert_eq!(fused.node(&g, fused.live[1]).outputs.len(), 1);
    let x = ramp(&[1, 1, K]);
    close(&run(&g, &fused, &x), &run(&g, &plain, &x));
}

#[test]
fn more_rows_or_another_reader_keep_the_norm_apart() {
    let g = graph_of(layer(5, false));
    let (plain, fused) = specs(&g, 5);
    assert_eq!(op_types(&g, &fused), op_types(&g, &plain));
    let g = graph_of(layer(1, true));
    let (_, fused) = specs(&g, 1);
    let types = op_types(&g, &fused);
    // The residual norm's output is also read by the Add: it and its products stay; the
    // head's norm still goes into the head.
    assert_eq!(
        types.iter().filter(|t| *t == "MatMul").count(),
        2,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == norm_matmul::OP_TYPE).count(),
        1
    );
}

/// Whole sessions, on Vulkan where there is one (fusion on), against the unfused graph run op
/// by op on the CPU.
#[test]
fn a_fused_session_matches_the_unfused_graph() {
    for made in [layer(1, false), mlp(1)] {
        let g = graph_of(made.clone());
        let (plain, _) = specs(&g, 1);
        let x = ramp(&[1, 1, K]);
        let want = run(&g, &plain, &x);
        let dir = TempDir::new("fuse-norm-session");
        let path = write_model(&dir, "m.onnx", &model(made));
        for got in session_outputs(&path, &x) {
            close(&got, &want);
        }
    }
}

/// An MLP: gate and up products of x, silu(gate) * up as exporters write it, the down
/// product; `rows` rows of x.
fn mlp(rows: i64) -> GraphProto {
    let (w, wd) = (values(K * 16, 0.05), values(16 * K, 0.04));
    graph(
        vec![
            node("MatMul", "gate", &["x", "wg"], &["g"]),
            node("MatMul", "up", &["x", "wu"], &["u"]),
            node("Sigmoid", "sig", &["g"], &["s"]),
            node("Mul", "silu", &["g", "s"], &["a"]),
            node("Mul", "gated", &["a", "u"], &["h"]),
            node("MatMul", "down", &["h", "wd"], &["y"]),
        ],
        &[
            ("wg", &[K as i64, 16], &w),
            ("wu", &[K as i64, 16], &w[..K * 16]),
            ("wd", &[16, K as i64], &wd),
        ],
        &[1, rows, K as i64],
        &["y"],
    )
}

#[test]
fn a_decode_step_s_gated_activation_goes_into_the_down_product() {
    let g = graph_of(mlp(1));
    let (plain, fused) = specs(&g, 1);
    assert_eq!(
        op_types(&g, &fused),
        ["MatMul", "MatMul", swiglu_matmul::OP_TYPE]
    );
    let x = ramp(&[1, 1, K]);
    close(&run(&g, &fused, &x), &run(&g, &plain, &x));
    // Five rows: the chain is fused, the product is not.
    let g = graph_of(mlp(5));
    let (_, fused5) = specs(&g, 5);
    assert_eq!(
        op_types(&g, &fused5),
        ["MatMul", "MatMul", fused::OP_TYPE, "MatMul"]
    );
}
