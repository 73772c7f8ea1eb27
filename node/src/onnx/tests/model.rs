//! Whole models: conversion into ModelDef, malformed files, and zero-copy weights.

use prost::Message;

use super::super::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, OperatorSetIdProto, TypeProto,
    ValueInfoProto, attribute_proto::AttributeType, type_proto,
};
use super::super::tensor::ALIGN_COPY_MAX;
use super::super::{LoadError, load, load_from_bytes, map_file};
use super::{D, TempDir, f32_bytes, model_with, node, raw_tensor, tensor_value, write_model};
use crate::model::Dim;
use crate::ops::AttrValue;
use crate::tensor::DType;

fn attr(name: &str, kind: AttributeType) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: kind as i32,
        ..Default::default()
    }
}

fn sample_graph() -> GraphProto {
    let mut conv = node("Conv", "", &["x", "w"], &["y"]);
    conv.attribute = vec![
        AttributeProto {
            ints: vec![1, -1],
            ..attr("pads", AttributeType::Ints)
        },
        AttributeProto {
            i: 3,
            ..attr("group", AttributeType::Int)
        },
        AttributeProto {
            f: 0.5,
            ..attr("alpha", AttributeType::Float)
        },
        AttributeProto {
            s: bytes::Bytes::from_static(b"SAME_UPPER"),
            ..attr("auto_pad", AttributeType::String)
        },
        AttributeProto {
            floats: vec![1.0, 2.5],
            ..attr("scales", AttributeType::Floats)
        },
        AttributeProto {
            strings: vec![
                bytes::Bytes::from_static(b"a"),
                bytes::Bytes::from_static(b"b"),
            ],
            ..attr("names", AttributeType::Strings)
        },
    ];
    let mut constant = node("Constant", "", &[], &["c"]);
    constant.attribute = vec![AttributeProto {
        t: Some(raw_tensor(
            "",
            7,
            &[2],
            &[
                7, 0, 0, 0, 0, 0, 0, 0, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            ],
        )),
        ..attr("value", AttributeType::Tensor)
    }];
    let body = GraphProto {
        name: "body".into(),
        node: vec![node("Relu", "", &["y"], &["r"])],
        output: vec![tensor_value("r", 1, None)],
        ..Default::default()
    };
    let mut iff = node("If", "branch", &["cond"], &["z"]);
    iff.domain = "ai.onnx".into();
    iff.attribute = vec![
        AttributeProto {
            g: Some(body.clone()),
            ..attr("then_branch", AttributeType::Graph)
        },
        AttributeProto {
            g: Some(body),
            ..attr("else_branch", AttributeType::Graph)
        },
    ];
    let mut custom = node("MyOp", "Conv_0", &["z", ""], &["q"]);
    custom.domain = "com.example".into();
    GraphProto {
        name: "main".into(),
        node: vec![conv, constant, iff, custom],
        initializer: vec![raw_tensor("w", 1, &[1, 2], &f32_bytes(&[1.5, -2.0]))],
        // IR < 4 style: the initializer is listed as an input too.
        input: vec![
            tensor_value("x", 1, Some(&[D::P("batch"), D::V(3), D::Unset])),
            tensor_value("w", 1, Some(&[D::V(1), D::V(2)])),
            tensor_value("cond", 9, Some(&[])),
        ],
        output: vec![tensor_value("q", 10, None)],
        value_info: vec![
            tensor_value("y", 0, Some(&[D::V(-1), D::P("")])),
            // Not representable: dropped from value_info rather than failing the load.
            tensor_value("complex", 14, None),
        ],
        ..Default::default()
    }
}

#[test]
fn converts_a_model() {
    let dir = TempDir::new("model");
    let mut m = model_with(sample_graph());
    m.opset_import = vec![
        OperatorSetIdProto {
            domain: "com.example".into(),
            version: 1,
        },
        OperatorSetIdProto {
            domain: "ai.onnx".into(),
            version: 13,
        },
    ];
    m.producer_version = "1.2".into();
    let def = load(&write_model(&dir, "m.onnx", &m)).unwrap();
    assert_eq!((def.ir_version, def.opset), (8, 13));
    assert_eq!(def.producer, "vkml-test 1.2");
    let g = &def.graph;
    assert_eq!(g.name, "main");

    let inputs: Vec<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(inputs, ["x", "cond"]);
    assert_eq!(g.inputs[0].dtype, Some(DType::F32));
    assert_eq!(
        g.inputs[0].dims,
        Some(vec![
            Dim::Sym("batch".into()),
            Dim::Fixed(3),
            Dim::Sym("?".into())
        ])
    );
    assert_eq!(
        (g.inputs[1].dtype, g.inputs[1].dims.clone()),
        (Some(DType::Bool), Some(vec![]))
    );
    assert_eq!(
        (g.outputs[0].dtype, g.outputs[0].dims.clone()),
        (Some(DType::F16), None)
    );
    assert_eq!(g.value_info.len(), 1);
    assert_eq!(g.value_info[0].dtype, None);
    assert_eq!(
        g.value_info[0].dims,
        Some(vec![Dim::Sym("?".into()), Dim::Sym("?".into())])
    );

    assert_eq!(g.initializers.len(), 1);
    assert_eq!(g.initializers[0].0, "w");
    assert_eq!(g.initializers[0].1.view::<f32>().unwrap()[..], [1.5, -2.0]);

    // Unnamed nodes become <op_type>_<index>, avoiding names already taken.
    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["Conv_0_1", "Constant_1", "branch", "Conv_0"]);
    let domains: Vec<&str> = g.nodes.iter().map(|n| n.domain.as_str()).collect();
    assert_eq!(domains, ["", "", "", "com.example"]);
    assert_eq!(g.nodes[3].inputs, ["z", ""]);

    let a = &g.nodes[0].attrs;
    assert_eq!(a.ints_opt("pads").unwrap().unwrap(), [1, -1]);
    assert_eq!(a.int("group", 1).unwrap(), 3);
    assert_eq!(a.float("alpha", 0.0).unwrap(), 0.5);
    assert_eq!(a.string("auto_pad", "").unwrap(), "SAME_UPPER");
    assert_eq!(a.floats_opt("scales").unwrap().unwrap(), [1.0, 2.5]);
    assert!(matches!(a.get("names"), Some(AttrValue::Strings(s)) if s == &["a", "b"]));

    let c = g.nodes[1].attrs.tensor_opt("value").unwrap().unwrap();
    assert_eq!(
        (c.dtype(), c.to_i64_vec().unwrap()),
        (DType::I64, vec![7, -8])
    );

    let Some(AttrValue::Graph(body)) = g.nodes[2].attrs.get("then_branch") else {
        panic!("then_branch is not a graph");
    };
    assert_eq!(body.name, "body");
    assert_eq!(body.nodes[0].name, "Relu_0");
    assert_eq!(body.outputs[0].name, "r");
}

#[test]
fn weights_are_slices_of_the_mapping() {
    let dir = TempDir::new("zerocopy");
    let path = write_model(&dir, "m.onnx", &model_with(sample_graph()));
    let mapped = map_file(&path).unwrap();
    let def = load_from_bytes(mapped.clone(), Some(dir.path())).unwrap();
    let range = mapped.as_ptr_range();
    let w = def.graph.initializers[0].1.bytes();
    assert!(range.contains(&w.as_ptr()) && w.as_ptr_range().end <= range.end);
    let Some(AttrValue::Tensor(c)) = def.graph.nodes[1].attrs.get("value") else {
        panic!()
    };
    // This i64 constant lies misaligned in the file: small tensors there are copied once to
    // aligned memory, so kernels do not copy them on every view.
    let p = c.bytes().as_ptr();
    assert!(range.contains(&p) || (p.align_offset(8) == 0 && c.bytes().len() <= ALIGN_COPY_MAX));
}

/// `load_files` maps a file it is told not to copy: the weights' address lies in a mapping of
/// that file, as the kernel's list of this process's mappings says.
#[cfg(target_os = "linux")]
#[test]
fn load_maps_the_file() {
    let dir = TempDir::new("zerocopy-load");
    let path = write_model(&dir, "mapped.onnx", &model_with(sample_graph()));
    let (def, files) = super::super::load_files(&path, 0).unwrap();
    assert!(!files.is_empty(), "the mapped file is watched");
    let addr = def.graph.initializers[0].1.bytes().as_ptr() as usize;
    let real = path.canonicalize().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let hit = maps.lines().any(|l| {
        let mut parts = l.split_whitespace();
        let range = parts.next().unwrap_or("");
        let file = parts.nth(4).unwrap_or("");
        let (lo, hi) = range.split_once('-').unwrap();
        let lo = usize::from_str_radix(lo, 16).unwrap();
        let hi = usize::from_str_radix(hi, 16).unwrap();
        (lo..hi).contains(&addr) && std::path::Path::new(file) == real
    });
    assert!(
        hit,
        "initializer at {addr:#x} is not inside a mapping of {}",
        real.display()
    );
}

#[test]
fn truncated_files_are_errors_not_panics() {
    let dir = TempDir::new("trunc");
    let full = model_with(sample_graph()).encode_to_vec();
    let mut decode_errors = 0;
    for len in 0..full.len() {
        let path = dir.join("t.onnx");
        std::fs::write(&path, &full[..len]).unwrap();
        let e = load(&path).expect_err("a truncated model loaded");
        if matches!(e, LoadError::Decode { .. }) {
            decode_errors += 1;
            assert!(
                e.to_string().contains("t.onnx is not a valid ONNX model: "),
                "{e}"
            );
        }
    }
    // Most cut points fall inside a field; the rest lose the graph or the opset import.
    assert!(
        decode_errors > full.len() / 2,
        "{decode_errors} of {}",
        full.len()
    );

    // A file cut in the middle of the graph.
    let path = dir.join("half.onnx");
    std::fs::write(&path, &full[..full.len() / 2]).unwrap();
    assert!(matches!(load(&path), Err(LoadError::Decode { .. })));
}

#[test]
fn files_that_are_not_models() {
    let dir = TempDir::new("notmodel");
    let e = load(&dir.join("nope.onnx")).unwrap_err();
    assert!(matches!(e, LoadError::Io { .. }));
    assert!(e.to_string().contains("nope.onnx"), "{e}");

    let e = load(dir.path()).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");

    let p = dir.join("text.onnx");
    std::fs::write(&p, "this is not a protobuf, just some words\n").unwrap();
    let e = load(&p).unwrap_err().to_string();
    assert!(e.contains("text.onnx is not a valid ONNX model"), "{e}");

    let p = dir.join("empty.onnx");
    std::fs::write(&p, b"").unwrap();
    let e = load(&p).unwrap_err();
    assert!(matches!(e, LoadError::NoGraph { .. }), "{e:?}");
    assert!(e.to_string().contains("contains no graph"));
}

#[test]
fn opset_and_ir_checks() {
    let mut m = model_with(GraphProto::default());
    m.opset_import[0].domain = "com.example".into();
    let e = load_from_bytes(m.encode_to_vec().into(), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("no opset of the default ONNX domain"),
        "{e}"
    );
    // A graph of ai.onnx.ml ops alone needs no default-domain import; one default-domain
    // node among them does.
    let mut ml = node("Binarizer", "b", &["x"], &["y"]);
    ml.domain = "ai.onnx.ml".into();
    let mut m = model_with(GraphProto {
        node: vec![ml.clone()],
        ..Default::default()
    });
    m.opset_import[0].domain = "ai.onnx.ml".into();
    m.opset_import[0].version = 1;
    let def = load_from_bytes(m.encode_to_vec().into(), None).unwrap();
    assert_eq!(def.opset, crate::onnx::convert::MAX_OPSET);
    m.graph
        .as_mut()
        .unwrap()
        .node
        .push(node("Relu", "r", &["y"], &["z"]));
    let e = load_from_bytes(m.encode_to_vec().into(), None).unwrap_err();
    assert!(e.to_string().contains("no opset of the default"), "{e}");

    let mut m = model_with(GraphProto::default());
    m.opset_import.push(OperatorSetIdProto {
        domain: "ai.onnx".into(),
        version: 11,
    });
    let e = load_from_bytes(m.encode_to_vec().into(), None).unwrap_err();
    assert!(e.to_string().contains("opset 17 and 11"), "{e}");

    let mut m = model_with(GraphProto::default());
    m.ir_version = 2;
    let e = load_from_bytes(m.encode_to_vec().into(), None).unwrap_err();
    assert!(matches!(e, LoadError::Unsupported(_)) && e.to_string().contains("IR version 2"));
}

fn load_graph_err(g: GraphProto) -> String {
    let m: ModelProto = model_with(g);
    load_from_bytes(m.encode_to_vec().into(), None)
        .unwrap_err()
        .to_string()
}

#[test]
fn unsupported_graph_features_are_named() {
    let seq = ValueInfoProto {
        name: "s".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::SequenceType(Box::new(
                type_proto::Sequence { elem_type: None },
            ))),
            denotation: String::new(),
        }),
        ..Default::default()
    };
    // A sequence loads, declared as one (lower/ runs it); a map does not.
    let m: ModelProto = model_with(GraphProto {
        name: "g".into(),
        input: vec![seq.clone()],
        output: vec![ValueInfoProto {
            name: "s".into(),
            ..seq
        }],
        ..Default::default()
    });
    let loaded = load_from_bytes(m.encode_to_vec().into(), None).unwrap();
    let want = crate::model::Kind::Sequence(Box::new(crate::model::Kind::Tensor));
    assert_eq!(loaded.graph.inputs[0].kind, want);
    let map = ValueInfoProto {
        name: "m".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::MapType(Box::new(type_proto::Map {
                key_type: 7,
                value_type: None,
            }))),
            denotation: String::new(),
        }),
        ..Default::default()
    };
    let e = load_graph_err(GraphProto {
        name: "g".into(),
        input: vec![map],
        ..Default::default()
    });
    assert!(e.contains("input 'm' of graph 'g' is a map"), "{e}");

    let e = load_graph_err(GraphProto {
        output: vec![tensor_value("o", 14, None)],
        ..Default::default()
    });
    assert!(e.contains("output 'o'") && e.contains("complex64"), "{e}");

    let mut n = node("Loop", "lp", &[], &[]);
    n.attribute = vec![attr("bodies", AttributeType::Graphs)];
    let e = load_graph_err(GraphProto {
        node: vec![n],
        ..Default::default()
    });
    assert!(
        e.contains("attribute 'bodies' of node 'lp' (Loop)") && e.contains("GRAPHS"),
        "{e}"
    );

    let mut n = node("Relu", "r", &[], &[]);
    n.attribute = vec![attr("a", AttributeType::Int), attr("a", AttributeType::Int)];
    let e = load_graph_err(GraphProto {
        node: vec![n],
        ..Default::default()
    });
    assert!(e.contains("attribute 'a' twice"), "{e}");

    let mut m = model_with(GraphProto {
        node: vec![node("Gelu2", "f", &[], &[])],
        ..Default::default()
    });
    m.functions = vec![FunctionProto {
        name: "Gelu2".into(),
        domain: "".into(),
        ..Default::default()
    }];
    let e = load_from_bytes(m.encode_to_vec().into(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("model-local function 'Gelu2'"), "{e}");

    // An attribute tensor with a bad size is named after its node and attribute.
    let mut n = node("Constant", "k", &[], &["c"]);
    n.attribute = vec![AttributeProto {
        t: Some(raw_tensor("", 1, &[2], &[0; 3])),
        ..attr("value", AttributeType::Tensor)
    }];
    let e = load_graph_err(GraphProto {
        node: vec![n],
        ..Default::default()
    });
    assert!(e.contains("tensor 'k.value'"), "{e}");
}

#[test]
fn untyped_attributes_are_inferred() {
    // Files from before IR version 2 leave AttributeProto.type unset.
    let mut n = node("Transpose", "t", &[], &[]);
    n.attribute = vec![
        AttributeProto {
            name: "perm".into(),
            ints: vec![1, 0],
            ..Default::default()
        },
        AttributeProto {
            name: "eps".into(),
            f: 0.25,
            ..Default::default()
        },
    ];
    let m = model_with(GraphProto {
        node: vec![n],
        ..Default::default()
    });
    let def = load_from_bytes(m.encode_to_vec().into(), None).unwrap();
    let a = &def.graph.nodes[0].attrs;
    assert_eq!(a.ints_opt("perm").unwrap().unwrap(), [1, 0]);
    assert!(matches!(a.get("eps"), Some(AttrValue::Float(f)) if *f == 0.25));
}
