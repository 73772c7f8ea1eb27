//! The fusion pass on hand-built graphs and on the model fixtures: which chains it fuses, which
//! it must leave (a graph output or a value used twice inside, a broadcast the kernel cannot
//! index), and that the fused graph computes what the unfused one does.

use super::{Graph, Specialized};
use crate::onnx::proto::{GraphProto, NodeProto};
use crate::onnx::tests::{
    D, TempDir, f32_bytes, model_with, node, raw_tensor, tensor_value, write_model,
};
use crate::ops::ValueType;
use crate::ops::fused::{self, Operand};
use crate::session::{DeviceSelection, Session, SessionOptions};
use crate::tensor::{DType, Tensor};

const FLOAT: i32 = 1;

pub(super) fn graph_of(g: GraphProto) -> Graph {
    let dir = TempDir::new("fuse");
    let path = write_model(&dir, "m.onnx", &model_with(g));
    Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap()
}

pub(super) fn graph(
    nodes: Vec<NodeProto>,
    inits: &[(&str, &[i64], &[f32])],
    x: &[i64],
    outs: &[&str],
) -> GraphProto {
    GraphProto {
        name: "g".into(),
        node: nodes,
        initializer: inits
            .iter()
            .map(|(n, dims, v)| raw_tensor(n, FLOAT, dims, &f32_bytes(v)))
            .collect(),
        input: vec![tensor_value(
            "x",
            FLOAT,
            Some(&x.iter().map(|&d| D::V(d)).collect::<Vec<_>>()),
        )],
        output: outs.iter().map(|o| tensor_value(o, FLOAT, None)).collect(),
        ..Default::default()
    }
}

fn specs(g: &Graph, x: &[usize]) -> (Specialized, Specialized) {
    let types = [ValueType::new(DType::F32, x.to_vec())];
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_chains(&mut fused);
    (plain, fused)
}

/// The live nodes run one after another through their CPU kernels.
pub(super) fn run(g: &Graph, spec: &Specialized, x: &Tensor) -> Vec<Tensor> {
    let mut vals = spec.consts.clone();
    vals[g.inputs[0].0] = Some(x.clone());
    for &i in &spec.live {
        let n = spec.node(g, i);
        let outs = {
            let args: Vec<Option<&Tensor>> = n
                .inputs
                .iter()
                .map(|v| v.map(|v| vals[v].as_ref().expect("computed before")))
                .collect();
            let tys: Vec<ValueType> = n
                .outputs
                .iter()
                .map(|&o| spec.types[o].clone().unwrap())
                .collect();
            n.op.run_cpu(&args, &tys).unwrap()
        };
        for (&o, t) in n.outputs.iter().zip(outs) {
            vals[o] = Some(t);
        }
    }
    g.outputs
        .iter()
        .map(|(v, _)| vals[*v].clone().unwrap())
        .collect()
}

fn steps(g: &Graph, spec: &Specialized) -> Vec<Vec<&'static str>> {
    spec.live
        .iter()
        .filter(|&&i| spec.node(g, i).op_type == fused::OP_TYPE)
        .map(|&i| {
            let a = spec.extra_attrs(g, i).expect("a made node");
            fused::Program::from_attrs(a)
                .unwrap()
                .steps
                .iter()
                .map(|s| s.op)
                .collect()
        })
        .collect()
}

pub(super) fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        shape.to_vec(),
        (0..n).map(|i| (i as f32 - n as f32 / 2.0) * 0.37).collect(),
    )
}

/// h = x + bias; y = h * 0.5 * (1 + erf(h / sqrt 2)), as PyTorch exports GELU: h has two uses,
/// so the chain starts after it and reads h as its start value and as an operand.
fn gelu() -> GraphProto {
    graph(
        vec![
            node("Add", "bias", &["x", "b"], &["h"]),
            node("Div", "div", &["h", "s2"], &["t1"]),
            node("Erf", "erf", &["t1"], &["t2"]),
            node("Add", "one", &["t2", "c1"], &["t3"]),
            node("Mul", "mulh", &["h", "t3"], &["t4"]),
            node("Mul", "half", &["t4", "c05"], &["y"]),
        ],
        &[
            ("b", &[3], &[0.5, -1.0, 2.0]),
            ("s2", &[], &[std::f32::consts::SQRT_2]),
            ("c1", &[1], &[1.0]),
            ("c05", &[], &[0.5]),
        ],
        &[2, 3],
        &["y"],
    )
}

#[test]
fn fuses_the_gelu_chain_after_its_shared_input() {
    let g = graph_of(gelu());
    let (plain, fused) = specs(&g, &[2, 3]);
    assert_eq!(plain.live.len(), 6);
    assert_eq!(fused.live.len(), 2, "the bias Add and one fused node");
    assert_eq!(steps(&g, &fused), [["Div", "Erf", "Add", "Mul", "Mul"]]);
    let node = fused.node(&g, fused.live[1]);
    // Inputs: h (the start value, which the Mul also reads: no second buffer).
    assert_eq!(
        node.inputs,
        [Some(g.value_names.iter().position(|n| n == "h").unwrap())]
    );
    let p = fused::Program::from_attrs(fused.extra_attrs(&g, fused.live[1]).unwrap()).unwrap();
    assert_eq!(p.steps[3].operand, Operand::Input(0));
    assert_eq!(
        p.steps[0].operand,
        Operand::Scalar(std::f32::consts::SQRT_2)
    );
    let x = ramp(&[2, 3]);
    // The fused CPU kernel runs the very same per-op kernels: bit for bit the same.
    assert_eq!(run(&g, &fused, &x), run(&g, &plain, &x));
    // And against GELU by hand at one point: x = -1.11 + 0.5 (element 0).
    let h = -1.11f64 + 0.5;
    let want = h * 0.5 * (1.0 + libm_erf(h / std::f64::consts::SQRT_2));
    let got = run(&g, &fused, &x)[0].view::<f32>().unwrap()[0] as f64;
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
}

/// erf(-0.431...) to 1e-9 by its Taylor series (enough terms at |z| < 0.5).
fn libm_erf(z: f64) -> f64 {
    let mut sum = 0.0;
    let mut term = z;
    for n in 0..30 {
        sum += term / (2 * n + 1) as f64;
        term *= -z * z / (n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn stops_at_graph_outputs_and_shared_values() {
    // r is a graph output: Relu and Sigmoid stay apart.
    let g = graph_of(graph(
        vec![
            node("Relu", "relu", &["x"], &["r"]),
            node("Sigmoid", "sig", &["r"], &["y"]),
        ],
        &[],
        &[4],
        &["r", "y"],
    ));
    let (_, fused) = specs(&g, &[4]);
    assert_eq!(fused.live.len(), 2);
    assert!(steps(&g, &fused).is_empty());

    // e has two users: nothing chains through it, and each branch is a single op.
    let g = graph_of(graph(
        vec![
            node("Exp", "exp", &["x"], &["e"]),
            node("Neg", "neg", &["e"], &["n"]),
            node("Abs", "abs", &["e"], &["a"]),
        ],
        &[],
        &[4],
        &["n", "a"],
    ));
    let (_, fused) = specs(&g, &[4]);
    assert_eq!(fused.live.len(), 3);

    // A value used twice by one node (x * x) is no chain step; the Tanh after it chains on.
    let g = graph_of(graph(
        vec![
            node("Relu", "relu", &["x"], &["r"]),
            node("Mul", "sq", &["r", "r"], &["s"]),
            node("Tanh", "tanh", &["s"], &["t"]),
            node("Neg", "neg", &["t"], &["y"]),
        ],
        &[],
        &[4],
        &["y"],
    ));
    let (plain, fused) = specs(&g, &[4]);
    assert_eq!(steps(&g, &fused), [["Tanh", "Neg"]]);
    let x = ramp(&[4]);
    assert_eq!(run(&g, &fused, &x), run(&g, &plain, &x));
}

#[test]
fn leaves_steps_that_change_the_shape_or_broadcast_unevenly() {
    // The Add broadcasts x [3] up to [2,3]: the chain's type would change there.
    let g = graph_of(graph(
        vec![
            node("Relu", "relu", &["x"], &["r"]),
            node("Add", "up", &["r", "m"], &["a"]),
            node("Exp", "exp", &["a"], &["e"]),
            node("Neg", "neg", &["e"], &["y"]),
        ],
        &[("m", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        &[3],
        &["y"],
    ));
    let (plain, fused) = specs(&g, &[3]);
    // The Add heads a chain of its own: its [2,3] operand is the start value, r broadcasts.
    assert_eq!(steps(&g, &fused), [["Add", "Exp", "Neg"]]);
    let x = ramp(&[3]);
    assert_eq!(run(&g, &fused, &x), run(&g, &plain, &x));

    // [2,1,4] into [2,3,4] is not one block of dims: that Mul is not a step.
    let g = graph_of(graph(
        vec![
            node("Relu", "relu", &["x"], &["r"]),
            node("Mul", "odd", &["r", "m"], &["a"]),
            node("Exp", "exp", &["a"], &["y"]),
        ],
        &[("m", &[2, 1, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])],
        &[2, 3, 4],
        &["y"],
    ));
    let (_, fused) = specs(&g, &[2, 3, 4]);
    assert_eq!(fused.live.len(), 3);
}

#[test]
fn splits_long_chains_and_keeps_operands_and_scalars_within_the_kernel() {
    // 20 steps alternating Mul by a per-channel [4,1] tensor (one distinct tensor per step)
    // and Add of a scalar: at most 4 operand buffers and 7 scalars per fused node.
    let mut nodes = Vec::new();
    let mut inits: Vec<(String, Vec<i64>, Vec<f32>)> = Vec::new();
    let mut prev = "x".to_string();
    for k in 0..20 {
        let out = if k == 19 {
            "y".to_string()
        } else {
            format!("v{k}")
        };
        let c = format!("c{k}");
        if k % 2 == 0 {
            inits.push((c.clone(), vec![4, 1], vec![1.0 + k as f32 * 0.01; 4]));
            nodes.push(node("Mul", &format!("mul{k}"), &[&prev, &c], &[&out]));
        } else {
            inits.push((c.clone(), vec![], vec![0.125 * k as f32]));
            // Every other scalar step subtracts the running value from the constant.
            let ins: [&str; 2] = if k % 4 == 1 { [&prev, &c] } else { [&c, &prev] };
            nodes.push(node("Sub", &format!("sub{k}"), &ins, &[&out]));
        }
        prev = out;
    }
    let inits: Vec<(&str, &[i64], &[f32])> = inits
        .iter()
        .map(|(n, d, v)| (n.as_str(), d.as_slice(), v.as_slice()))
        .collect();
    let g = graph_of(graph(nodes, &inits, &[4, 5], &["y"]));
    let (plain, fused) = specs(&g, &[4, 5]);
    let lens: Vec<usize> = steps(&g, &fused).iter().map(Vec::len).collect();
    assert_eq!(lens, [8, 8, 4], "8 steps hold 4 tensors and 4 scalars");
    assert_eq!(fused.live.len(), 3);
    for &i in &fused.live {
        let p = fused::Program::from_attrs(fused.extra_attrs(&g, i).unwrap()).unwrap();
        assert!(p.fits());
    }
    let x = ramp(&[4, 5]);
    assert_eq!(run(&g, &fused, &x), run(&g, &plain, &x));
}

/// The model fixtures (tests/models/): which chains fuse in the exported BERT and GPT-2.
fn fixture(name: &str) -> (Graph, Specialized, Specialized) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/models")
        .join(name)
        .join("model.onnx");
    let g = Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap();
    let types = static_inputs(&g);
    let plain = g.specialize_unfused(&types, &[]).unwrap();
    let mut fused = g.specialize_unfused(&types, &[]).unwrap();
    g.fuse_chains(&mut fused);
    (g, plain, fused)
}

/// The input types of a model with static shapes.
fn static_inputs(g: &Graph) -> Vec<ValueType> {
    g.inputs
        .iter()
        .map(|(_, d)| {
            let dims = d.dims.as_ref().expect("static model");
            let shape = dims
                .iter()
                .map(|d| match d {
                    crate::model::Dim::Fixed(n) => *n,
                    crate::model::Dim::Sym(_) => panic!("static model"),
                })
                .collect();
            ValueType::new(d.dtype.expect("typed input"), shape)
        })
        .collect()
}

#[test]
fn fuses_gelu_and_layernorm_tails_in_bert() {
    let (g, plain, fused) = fixture("bert_static");
    let chains = steps(&g, &fused);
    // Two layers, each with one erf GELU; the decomposed LayerNorms give (Add eps, Sqrt) and
    // (Div by the deviation, Mul gamma, Add beta).
    let gelu = chains
        .iter()
        .filter(|c| c.as_slice() == ["Div", "Erf", "Add", "Mul", "Mul"]);
    assert_eq!(gelu.count(), 2, "{chains:?}");
    assert!(
        chains.iter().any(|c| c.as_slice() == ["Add", "Sqrt"]),
        "{chains:?}"
    );
    assert!(
        chains.iter().any(|c| c.as_slice() == ["Div", "Mul", "Add"]),
        "{chains:?}"
    );
    let steps_fused: usize = chains.iter().map(Vec::len).sum();
    assert_eq!(
        plain.live.len() - fused.live.len(),
        steps_fused - chains.len()
    );
    eprintln!(
        "bert_static: {} live ops -> {} ({} chains of {steps_fused} ops)",
        plain.live.len(),
        fused.live.len(),
        chains.len()
    );
}

#[test]
fn fuses_the_tanh_gelu_in_gpt2() {
    let (g, plain, fused) = fixture("gpt2_static");
    let chains = steps(&g, &fused);
    // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): from the Pow on, seven steps
    // (the exporter's 0.5 * x is a branch of its own and stays one Mul).
    let tanh_gelu = chains
        .iter()
        .filter(|c| c.contains(&"Tanh") && c.len() >= 5);
    assert_eq!(tanh_gelu.count(), 2, "{chains:?}");
    let steps_fused: usize = chains.iter().map(Vec::len).sum();
    assert_eq!(
        plain.live.len() - fused.live.len(),
        steps_fused - chains.len()
    );
    eprintln!(
        "gpt2_static: {} live ops -> {} ({} chains of {steps_fused} ops): {chains:?}",
        plain.live.len(),
        fused.live.len(),
        chains.len()
    );
}

/// The outputs of the model at `path` for input `x`, run as a session (fusion on) on the CPU
/// and on Vulkan where there is one.
pub(super) fn session_outputs(path: &std::path::Path, x: &Tensor) -> Vec<Vec<Tensor>> {
    let mut devices = vec![DeviceSelection::Cpu];
    if vkml_testkit::test_gpu().is_some() {
        devices.push(DeviceSelection::Vulkan);
    }
    devices
        .into_iter()
        .map(|d| {
            let options = SessionOptions {
                devices: d,
                device_memory_limit: None,
                ..Default::default()
            };
            let s = Session::load(path, options).unwrap();
            let got = s.run(&[("x", x.clone())]).unwrap();
            got.into_iter().map(|(_, t)| t).collect()
        })
        .collect()
}

/// A whole session, on Vulkan where there is one: the fused graph against the unfused one run
/// op by op on the CPU.
#[test]
fn a_fused_session_matches_the_unfused_graph() {
    let g = graph_of(gelu());
    let (plain, _) = specs(&g, &[2, 3]);
    let x = ramp(&[2, 3]);
    let want = run(&g, &plain, &x);
    let dir = TempDir::new("fuse-session");
    let path = write_model(&dir, "m.onnx", &model_with(gelu()));
    for got in session_outputs(&path, &x) {
        let (g, w) = (
            got[0].view::<f32>().unwrap(),
            want[0].view::<f32>().unwrap(),
        );
        for (a, b) in g.iter().zip(w.iter()) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

/// The QDQ pass on the statically quantized ResNet (tests/models/resnet_qdq): every Conv with
/// its QuantizeLinear becomes QLinearConv, every residual sum QLinearAdd, the classifier's
/// Gemm QGemm, its GlobalAveragePool QLinearGlobalAveragePool, the MaxPool and Flatten between Q/DQ pairs of one scale run on the integers,
/// and the DequantizeLinear nodes that fed only them go.
#[test]
fn qdq_convolutions_and_sums_become_integer_ops_in_the_quantized_resnet() {
    let (g, plain, _) = fixture("resnet_qdq");
    let mut fused = g.specialize_unfused(&static_inputs(&g), &[]).unwrap();
    g.fuse_qdq(&mut fused);
    let count = |spec: &Specialized, t: &str| {
        spec.live
            .iter()
            .filter(|&&i| spec.node(&g, i).op_type == t)
            .count()
    };
    let convs = count(&plain, "Conv");
    let adds = count(&plain, "Add");
    assert!(convs > 10 && adds > 4, "{convs} convolutions, {adds} sums");
    assert_eq!(count(&fused, "Conv"), 0);
    assert_eq!(count(&fused, "QLinearConv"), convs);
    assert_eq!(count(&fused, "Add"), 0);
    assert_eq!(count(&fused, "QLinearAdd"), adds);
    assert_eq!((count(&plain, "Gemm"), count(&fused, "Gemm")), (1, 0));
    assert_eq!(count(&fused, "QGemm"), 1);
    let pools = count(&plain, "GlobalAveragePool");
    assert_eq!((pools, count(&fused, "GlobalAveragePool")), (1, 0));
    assert_eq!(count(&fused, "QLinearGlobalAveragePool"), 1);
    // MaxPool and Flatten now read 8-bit values.
    for op in ["MaxPool", "Flatten"] {
        let on_bytes = fused.live.iter().any(|&i| {
            let n = fused.node(&g, i);
            let x = n.inputs[0].and_then(|x| fused.types[x].as_ref());
            n.op_type == op && x.is_some_and(|t| t.dtype == crate::tensor::DType::U8)
        });
        assert!(on_bytes, "{op} on u8");
    }
    let dq = |s: &Specialized| count(s, "DequantizeLinear");
    assert!(
        dq(&fused) < dq(&plain) / 4,
        "{} of {} left",
        dq(&fused),
        dq(&plain)
    );
}
