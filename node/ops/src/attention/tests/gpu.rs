//! The GPU kernels against the CPU kernel on the test GPU: prefill and decode shapes, GQA,
//! causal with past, masks, lengths, rotary, f16, and the split key range merged.

use super::super::core::Plan;
use super::super::{Mapping, gpu, gqa as gqa_op, mha as mha_op, onnx as onnx_op};
use super::{gqa, mha, onnx};
use crate::tensor::{DType, Tensor};
use crate::testkit::gpu::run_kernel_on;
use crate::testkit::{assert_close, f64s, gpu_matches_cpu, infer_known};
use crate::{InferInput, NodeSpec, Op, ValueType};

fn tol(inputs: &[Option<Tensor>]) -> f64 {
    match inputs[0].as_ref().map(Tensor::dtype) {
        Some(DType::F16) => 4e-3,
        _ => 2e-5,
    }
}

fn matches(op: &dyn Op, inputs: &[Option<Tensor>]) {
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    gpu_matches_cpu(op, &ins, tol(inputs));
}

/// The plan a node maps to, with every input's value known.
fn plan_of(
    domain: &str,
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, crate::AttrValue)>,
    inputs: &[Option<Tensor>],
    outs: usize,
) -> Plan {
    let attrs = crate::Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let spec = NodeSpec {
        name: "t",
        op_type,
        attrs: &attrs,
        opset,
        num_inputs: inputs.len(),
        num_outputs: outs,
    };
    let types: Vec<Option<ValueType>> = inputs
        .iter()
        .map(|t| t.as_ref().map(ValueType::of))
        .collect();
    let ins: Vec<Option<InferInput<'_>>> = types
        .iter()
        .zip(inputs)
        .map(|(ty, t)| {
            ty.as_ref().map(|ty| InferInput {
                ty,
                value: t.as_ref(),
            })
        })
        .collect();
    let plan = match (domain, op_type) {
        ("", "Attention") => onnx_op::mapping(&spec).unwrap().plan(&ins),
        (_, "GroupQueryAttention") => gqa_op::mapping(&spec).unwrap().plan(&ins),
        _ => mha_op::mapping(&spec).unwrap().plan(&ins),
    };
    plan.unwrap().0
}

/// The kernel with the key range cut into `splits` against the CPU kernel.
fn split_matches(op: &dyn Op, plan: &Plan, inputs: &[Option<Tensor>], splits: usize) {
    let Some(gpu_dev) = vkml_testkit::test_gpu() else {
        return;
    };
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let outs = infer_known(op, &ins).unwrap();
    let cpu = op.run_cpu(&ins, &outs).unwrap();
    let k = gpu::kernel(plan, Some(splits)).expect("a GPU kernel");
    assert!(k.dispatches.len() >= 2, "the split needs a merge");
    let got = run_kernel_on(gpu_dev, &k, &ins, &outs).unwrap();
    for (g, c) in got.iter().zip(&cpu) {
        assert_close(&f64s(g), &f64s(c), tol(inputs));
    }
}

#[test]
fn onnx_prefill_shapes() {
    use onnx::Cfg;
    let m = |s: &[usize], b| Some((s.to_vec(), b));
    for (i, c) in [
        Cfg::new(2, 3, 3, 4, 6, 8),
        Cfg {
            three_d: true,
            dv: 10,
            ..Cfg::new(2, 3, 3, 4, 6, 8)
        },
        Cfg {
            causal: true,
            ..Cfg::new(1, 4, 2, 37, 37, 16)
        },
        Cfg {
            causal: true,
            past: 5,
            mask: m(&[19, 24], false),
            ..Cfg::new(2, 6, 2, 19, 19, 32)
        },
        Cfg {
            mask: m(&[2, 1, 9, 70], true),
            softcap: 2.0,
            scale: Some(0.1),
            ..Cfg::new(2, 2, 1, 9, 70, 64)
        },
        Cfg {
            mask: m(&[2, 2, 5, 4], false),
            nonpad: Some(vec![3, 6]),
            dv: 12,
            ..Cfg::new(2, 2, 2, 5, 6, 8)
        },
        Cfg {
            nonpad: Some(vec![1, 9]),
            causal: true,
            ..Cfg::new(2, 2, 2, 3, 9, 8)
        },
        Cfg {
            causal: true,
            ..Cfg::new(1, 2, 2, 20, 20, 128)
        },
        Cfg {
            past: 3,
            ..Cfg::new(1, 1, 1, 2, 2, 256)
        },
    ]
    .iter()
    .enumerate()
    {
        let (op, inputs, _) = onnx::case(c, 100 + i as u64);
        matches(&*op, &inputs);
    }
}

#[test]
fn onnx_decode_and_half() {
    use onnx::Cfg;
    for (i, c) in [
        Cfg {
            causal: true,
            past: 300,
            ..Cfg::new(2, 8, 2, 1, 1, 64)
        },
        Cfg {
            dtype: DType::F16,
            causal: true,
            past: 40,
            ..Cfg::new(1, 4, 2, 3, 3, 32)
        },
        Cfg {
            dtype: DType::F16,
            mask: Some((vec![3, 7], false)),
            ..Cfg::new(1, 2, 2, 3, 7, 8)
        },
        Cfg {
            dtype: DType::F16,
            mask: Some((vec![3, 7], true)),
            three_d: true,
            ..Cfg::new(1, 2, 1, 3, 7, 8)
        },
    ]
    .iter()
    .enumerate()
    {
        let (op, inputs, _) = onnx::case(c, 200 + i as u64);
        matches(&*op, &inputs);
    }
}

#[test]
fn gqa_prompt_and_decode() {
    use gqa::Cfg;
    for (i, c) in [
        Cfg {
            rotary: Some((8, false)),
            ..Cfg::new(2, 17, 8, 2, 16, 17, &[16, 9])
        },
        Cfg {
            rotary: Some((4, true)),
            packed: true,
            window: Some(5),
            ..Cfg::new(1, 12, 4, 1, 8, 12, &[11])
        },
        Cfg {
            past: Some(6),
            rotary: Some((4, false)),
            ..Cfg::new(2, 1, 4, 2, 8, 7, &[6, 3])
        },
        Cfg {
            past: Some(64),
            rotary: Some((8, true)),
            softcap: 3.0,
            ..Cfg::new(3, 1, 8, 2, 32, 50, &[49, 20, 0])
        },
        Cfg {
            past: Some(10),
            ..Cfg::new(1, 3, 4, 2, 8, 7, &[6])
        },
        Cfg {
            dtype: DType::F16,
            past: Some(12),
            rotary: Some((4, false)),
            ..Cfg::new(2, 1, 4, 2, 8, 9, &[8, 5])
        },
        Cfg {
            dtype: DType::F16,
            rotary: Some((8, true)),
            packed: true,
            ..Cfg::new(1, 9, 4, 2, 16, 9, &[8])
        },
    ]
    .iter()
    .enumerate()
    {
        let (op, inputs, _) = gqa::case(c, 300 + i as u64);
        matches(&*op, &inputs);
    }
}

#[test]
fn mha_shapes() {
    use mha::{Cfg, cfg};
    for (i, c) in [
        Cfg {
            bias: true,
            dv: 12,
            ..cfg(2, 5, 7, 2, 8)
        },
        Cfg {
            lens: Some(vec![3, 7]),
            ..cfg(2, 5, 7, 2, 8)
        },
        Cfg {
            keep: Some(3),
            filter: Some(-3.0),
            ..cfg(2, 5, 7, 2, 8)
        },
        Cfg {
            attn_bias: Some([1, 2, 5, 7]),
            lens: Some(vec![6, 2]),
            ..cfg(2, 5, 7, 2, 8)
        },
        Cfg {
            causal: true,
            past: 9,
            bias: true,
            keep: Some(2),
            ..cfg(2, 3, 3, 2, 16)
        },
        Cfg {
            f16: true,
            past: 5,
            ..cfg(1, 1, 1, 4, 8)
        },
    ]
    .iter()
    .enumerate()
    {
        let (op, inputs, _) = mha::case(c, 400 + i as u64);
        matches(&*op, &inputs);
    }
}

/// Flash-decoding: the key range cut into slices, merged by attention_combine.comp.
#[test]
fn split_key_ranges_merge() {
    use crate::AttrValue;
    let c = onnx::Cfg {
        causal: true,
        past: 60,
        mask: Some((vec![2, 1, 2, 63], false)),
        ..onnx::Cfg::new(2, 4, 2, 2, 3, 16)
    };
    let (op, inputs, _) = onnx::case(&c, 500);
    let plan = plan_of(
        "",
        "Attention",
        23,
        vec![("is_causal", AttrValue::Int(1))],
        &inputs,
        3,
    );
    for n in [2, 3, 7] {
        split_matches(&*op, &plan, &inputs, n);
    }
    let c = gqa::Cfg {
        past: Some(40),
        rotary: Some((4, false)),
        window: Some(17),
        ..gqa::Cfg::new(3, 1, 4, 2, 8, 30, &[29, 5, 0])
    };
    let (op, inputs, _) = gqa::case(&c, 501);
    let attrs = vec![
        ("num_heads", AttrValue::Int(4)),
        ("kv_num_heads", AttrValue::Int(2)),
        ("do_rotary", AttrValue::Int(1)),
        ("local_window_size", AttrValue::Int(17)),
    ];
    let plan = plan_of(
        crate::MS_DOMAIN,
        "GroupQueryAttention",
        1,
        attrs,
        &inputs,
        3,
    );
    split_matches(&*op, &plan, &inputs, 4);
}

#[test]
fn the_split_rule_fills_the_gpu_with_slices_of_whole_tiles() {
    // Plenty of workgroups: no split.
    assert_eq!(gpu::splits(512, 4096, 16), 1);
    // One decode row per kv head of a small model over a long cache: split.
    assert_eq!(gpu::splits(8, 4096, 16), 32);
    // A short cache: slices of at least one tile.
    assert_eq!(gpu::splits(8, 128, 16), 8);
    assert_eq!(gpu::splits(8, 40, 16), 2);
    assert_eq!(gpu::splits(8, 15, 16), 1);
}

#[test]
fn the_qk_output_in_every_mode() {
    use onnx::Cfg;
    let mut n = 0;
    for mode in 0..4 {
        for (mask, causal, softcap, past) in [
            (None, false, 0.0, 0),
            (Some((vec![3, 6], false)), false, 2.0, 2),
            (Some((vec![2, 1, 3, 5], true)), true, 0.0, 2),
        ] {
            let c = Cfg {
                qk: Some(mode),
                mask,
                causal,
                softcap,
                past,
                ..Cfg::new(2, 4, 2, 3, 4, 8)
            };
            let (op, inputs, _) = onnx::case(&c, 610 + n);
            matches(&*op, &inputs);
            n += 1;
        }
    }
    let half = Cfg {
        dtype: DType::F16,
        qk: Some(3),
        mask: Some((vec![3, 4], false)),
        ..Cfg::new(1, 2, 2, 3, 4, 8)
    };
    let (op, inputs, _) = onnx::case(&half, 640);
    matches(&*op, &inputs);
}

#[test]
fn what_stays_on_the_cpu() {
    // Heads wider than attention.comp's accumulators.
    let (op, inputs, _) = onnx::case(&onnx::Cfg::new(1, 2, 2, 3, 4, 264), 600);
    let types: Vec<Option<ValueType>> = inputs
        .iter()
        .map(|t| t.as_ref().map(ValueType::of))
        .collect();
    let ins: Vec<Option<InferInput<'_>>> = types
        .iter()
        .map(|t| t.as_ref().map(|ty| InferInput { ty, value: None }))
        .collect();
    let outs = op.infer(&ins).unwrap();
    assert!(op.gpu_planned(&ins, &outs, &Default::default()).is_none());
}
