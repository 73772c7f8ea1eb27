//! The external data a model file refers to, listed without reading it: what a `submit`
//! client hashes and offers, and what a node that received only the `.onnx` bytes resolves
//! against the weights it was sent (see [`super::load_resolved`]).

use bytes::Bytes;
use prost::Message;

use super::LoadError;
use super::external::parse_entries;
use super::proto::tensor_proto::DataLocation;
use super::proto::{GraphProto, ModelProto, NodeProto, TensorProto};

/// One tensor stored outside the model file, as its external_data entries say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalTensor {
    /// The tensor's name (or where it sits, when it has none), for messages.
    pub label: String,
    /// The file, relative to the model's folder, as the model spells it.
    pub location: String,
    pub offset: u64,
    /// `None`: from `offset` to the end of the file.
    pub length: Option<u64>,
    /// An initializer of the main graph that is not itself a graph output: a node can plan
    /// the model without its bytes (`load_resolved` with `defer`).
    pub deferrable: bool,
}

/// Every tensor of the model (initializers, attribute tensors, subgraphs and functions) whose
/// bytes live in an external-data file, in file order.
pub fn external_tensors(data: &Bytes) -> Result<Vec<ExternalTensor>, LoadError> {
    let m = ModelProto::decode(data.clone()).map_err(|source| LoadError::Decode {
        path: "<model>".into(),
        source,
    })?;
    let mut out = Vec::new();
    if let Some(g) = &m.graph {
        for t in &g.initializer {
            let deferrable = !g.output.iter().any(|o| o.name == t.name);
            tensor(t, &t.name, deferrable, &mut out)?;
        }
        nodes(&g.node, &mut out)?;
    }
    for f in &m.functions {
        nodes(&f.node, &mut out)?;
    }
    Ok(out)
}

fn graph(g: &GraphProto, out: &mut Vec<ExternalTensor>) -> Result<(), LoadError> {
    for t in &g.initializer {
        tensor(t, &t.name, false, out)?;
    }
    nodes(&g.node, out)
}

fn nodes(ns: &[NodeProto], out: &mut Vec<ExternalTensor>) -> Result<(), LoadError> {
    for n in ns {
        for a in &n.attribute {
            let label = format!("attribute '{}' of node '{}'", a.name, n.name);
            if let Some(t) = &a.t {
                tensor(t, &label, false, out)?;
            }
            for t in &a.tensors {
                tensor(t, &label, false, out)?;
            }
            if let Some(g) = &a.g {
                graph(g, out)?;
            }
            for g in &a.graphs {
                graph(g, out)?;
            }
        }
    }
    Ok(())
}

fn tensor(
    t: &TensorProto,
    label: &str,
    deferrable: bool,
    out: &mut Vec<ExternalTensor>,
) -> Result<(), LoadError> {
    if t.data_location != DataLocation::External as i32 {
        return Ok(());
    }
    let label = if t.name.is_empty() { label } else { &t.name };
    let loc = parse_entries(t, label)?;
    out.push(ExternalTensor {
        label: label.to_string(),
        location: loc.file.to_string_lossy().into_owned(),
        offset: loc.offset,
        length: loc.length,
        deferrable,
    });
    Ok(())
}
