//! ModelProto -> ModelDef: opset, graphs (and subgraphs), nodes, attributes, declared values.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::LoadError;
use super::external::ExternalFiles;
use super::proto::attribute_proto::AttributeType;
use super::proto::tensor_shape_proto::dimension::Value as DimValue;
use super::proto::type_proto::Value as TypeValue;
use super::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, TypeProto, ValueInfoProto, type_proto,
};
use super::tensor::{convert_tensor, onnx_type_name, tensor_type};
use crate::model::{DeferredWeight, Dim, GraphDef, Kind, ModelDef, NodeDef, ValueDef};
use crate::ops::{self, AttrValue, Attrs};
use crate::tensor::DType;

/// The oldest IR version with opset imports (ONNX 1.0); older files cannot say what their
/// operators mean.
const MIN_IR_VERSION: i64 = 3;

pub(crate) fn model(
    m: &ModelProto,
    path: &Path,
    files: &ExternalFiles,
) -> Result<ModelDef, LoadError> {
    let Some(graph) = &m.graph else {
        return Err(LoadError::NoGraph {
            path: path.to_path_buf(),
        });
    };
    if m.ir_version < MIN_IR_VERSION {
        return Err(LoadError::Unsupported(format!(
            "{} has IR version {}; vkml reads IR version {MIN_IR_VERSION} (ONNX 1.0) and later: \
             re-export or upgrade the model",
            path.display(),
            m.ir_version
        )));
    }
    let opset = match default_opset(m, path)? {
        Some(v) => v,
        // A model made of another domain's ops alone (ai.onnx.ml's, as scikit-learn exports
        // them) need not import the default domain: no node reads its version. An empty graph
        // says nothing about its domains, so it still needs the import.
        None if !graph.node.is_empty()
            && graph
                .node
                .iter()
                .all(|n| !normalise_domain(&n.domain).is_empty()) =>
        {
            MAX_OPSET
        }
        None => {
            return Err(LoadError::Unsupported(format!(
                "{} imports no opset of the default ONNX domain; add one to the model's \
                 opset_import",
                path.display()
            )));
        }
    };
    let cx = Converter {
        files,
        functions: m
            .functions
            .iter()
            .map(|f| (normalise_domain(&f.domain).to_string(), f.name.clone()))
            .collect(),
    };
    let producer = format!("{} {}", m.producer_name, m.producer_version)
        .trim()
        .to_string();
    Ok(ModelDef {
        ir_version: m.ir_version,
        opset,
        producer,
        graph: cx.graph(graph, true)?,
    })
}

/// One node on its own (a cluster fragment's), with no model-local functions and no external
/// data files.
pub(crate) fn node_def(
    n: &NodeProto,
    name: String,
    files: &ExternalFiles,
) -> Result<NodeDef, LoadError> {
    let cx = Converter {
        files,
        functions: HashSet::new(),
    };
    cx.node(n, name)
}

/// The newest opset of the default domain vkml knows (ONNX 1.22's). A model importing a later
/// one may use ops whose meaning changed since, which vkml would run by an older definition:
/// refused rather than guessed.
pub const MAX_OPSET: i64 = 27;

/// The default domain's opset version, or `None` when the model does not import it.
fn default_opset(m: &ModelProto, path: &Path) -> Result<Option<i64>, LoadError> {
    let mut found: Option<i64> = None;
    for o in &m.opset_import {
        if o.domain == ops::MS_DOMAIN && o.version != 1 {
            return Err(LoadError::Unsupported(format!(
                "{} imports version {} of the {} domain; its ops have one version, 1",
                path.display(),
                o.version,
                ops::MS_DOMAIN
            )));
        }
        if !normalise_domain(&o.domain).is_empty() {
            continue;
        }
        if o.version < 1 {
            return Err(LoadError::Invalid(format!(
                "{} imports opset version {} of the default domain",
                path.display(),
                o.version
            )));
        }
        if o.version > MAX_OPSET {
            return Err(LoadError::Unsupported(format!(
                "{} imports opset {} of the default domain; the newest vkml knows is \
                 {MAX_OPSET} (ONNX 1.22), and ops may mean something else in a later one: \
                 export the model for opset {MAX_OPSET} or older",
                path.display(),
                o.version
            )));
        }
        match found {
            Some(v) if v != o.version => {
                return Err(LoadError::Invalid(format!(
                    "{} imports the default domain twice, as opset {v} and {}",
                    path.display(),
                    o.version
                )));
            }
            _ => found = Some(o.version),
        }
    }
    Ok(found)
}

/// "ai.onnx" is another spelling of the default domain.
fn normalise_domain(domain: &str) -> &str {
    if domain == "ai.onnx" { "" } else { domain }
}

struct Converter<'a> {
    files: &'a ExternalFiles,
    /// (domain, name) of the model-local functions.
    functions: HashSet<(String, String)>,
}

impl Converter<'_> {
    /// `main`: the model's own graph, whose initializers may be deferred (not a subgraph's).
    fn graph(&self, g: &GraphProto, main: bool) -> Result<GraphDef, LoadError> {
        let gname = if g.name.is_empty() {
            "(unnamed)"
        } else {
            &g.name
        };
        if let Some(s) = g.sparse_initializer.first() {
            let name = s.values.as_ref().map_or("", |v| v.name.as_str());
            return Err(LoadError::Unsupported(format!(
                "graph '{gname}' has sparse initializer '{name}'; sparse tensors are not supported"
            )));
        }
        let mut initializers = Vec::with_capacity(g.initializer.len());
        let mut deferred = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for t in &g.initializer {
            if t.name.is_empty() {
                return Err(LoadError::Invalid(format!(
                    "graph '{gname}' has an initializer with no name"
                )));
            }
            // Which of two would a node read? The model is ambiguous: refuse it.
            if !seen.insert(&t.name) {
                return Err(LoadError::Invalid(format!(
                    "graph '{gname}' has two initializers named '{}'",
                    t.name
                )));
            }
            // The packed 4- and 2-bit types are unpacked as they load, so never deferred.
            let packed = DType::from_onnx_code(t.data_type).is_some_and(|d| d.file_bits() < 8);
            let later = if main && !packed {
                self.files.deferred(t, &t.name)?
            } else {
                None
            };
            match later {
                Some((location, offset)) => {
                    let (dtype, shape, _) = tensor_type(t, &t.name)?;
                    deferred.push(DeferredWeight {
                        name: t.name.clone(),
                        dtype,
                        shape,
                        location,
                        offset,
                    });
                }
                None => {
                    initializers.push((t.name.clone(), convert_tensor(t, &t.name, self.files)?))
                }
            }
        }
        let init_names: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();

        let mut seen: HashSet<&str> = HashSet::new();
        if let Some(v) = g.input.iter().find(|v| !seen.insert(&v.name)) {
            return Err(LoadError::Invalid(format!(
                "graph '{gname}' lists input '{}' twice",
                v.name
            )));
        }
        // Before IR version 4 initializers were also listed as inputs; they are not fed.
        let inputs = g
            .input
            .iter()
            .filter(|v| !init_names.contains(v.name.as_str()))
            .map(|v| declared(v, "input", gname))
            .collect::<Result<_, _>>()?;
        let outputs = g
            .output
            .iter()
            .map(|v| declared(v, "output", gname))
            .collect::<Result<_, _>>()?;
        // Types of intermediates are hints: those vkml cannot represent are dropped, and any
        // op that really produces such a value is refused later, by name.
        let value_info = g
            .value_info
            .iter()
            .filter_map(|v| value_def(v).ok())
            .collect();

        let mut used: HashSet<String> = g
            .node
            .iter()
            .filter(|n| !n.name.is_empty())
            .map(|n| n.name.clone())
            .collect();
        let mut nodes = Vec::with_capacity(g.node.len());
        for (i, n) in g.node.iter().enumerate() {
            let name = if n.name.is_empty() {
                fresh_name(&format!("{}_{i}", n.op_type), &mut used)
            } else {
                n.name.clone()
            };
            nodes.push(self.node(n, name)?);
        }
        Ok(GraphDef {
            name: g.name.clone(),
            nodes,
            initializers,
            deferred,
            inputs,
            outputs,
            value_info,
        })
    }

    fn node(&self, n: &NodeProto, name: String) -> Result<NodeDef, LoadError> {
        let domain = normalise_domain(&n.domain).to_string();
        if self
            .functions
            .contains(&(domain.clone(), n.op_type.clone()))
        {
            return Err(LoadError::Unsupported(format!(
                "node '{name}' calls the model-local function '{}{}{}', and vkml does not \
                 expand model-local functions",
                domain,
                if domain.is_empty() { "" } else { "." },
                n.op_type
            )));
        }
        let mut attrs = BTreeMap::new();
        for a in &n.attribute {
            let value = self.attr(a, &name, &n.op_type)?;
            if attrs.insert(a.name.clone(), value).is_some() {
                return Err(LoadError::Invalid(format!(
                    "node '{name}' ({}) has attribute '{}' twice",
                    n.op_type, a.name
                )));
            }
        }
        Ok(NodeDef {
            name,
            op_type: n.op_type.clone(),
            domain,
            inputs: n.input.clone(),
            outputs: n.output.clone(),
            attrs: Attrs(attrs),
        })
    }

    fn attr(&self, a: &AttributeProto, node: &str, op: &str) -> Result<AttrValue, LoadError> {
        let whose = || format!("attribute '{}' of node '{node}' ({op})", a.name);
        if !a.ref_attr_name.is_empty() {
            return Err(LoadError::Unsupported(format!(
                "{} refers to a function attribute, which only functions may do",
                whose()
            )));
        }
        let label = format!("{node}.{}", a.name);
        let text = |b: &[u8]| {
            String::from_utf8(b.to_vec())
                .map_err(|_| LoadError::Invalid(format!("{} is a string but not UTF-8", whose())))
        };
        let kind = match AttributeType::try_from(a.r#type) {
            Ok(AttributeType::Undefined) => infer_type(a),
            Ok(k) => k,
            Err(_) => {
                return Err(LoadError::Invalid(format!(
                    "{} has unknown attribute type {}",
                    whose(),
                    a.r#type
                )));
            }
        };
        Ok(match kind {
            AttributeType::Float => AttrValue::Float(a.f),
            AttributeType::Int => AttrValue::Int(a.i),
            AttributeType::String => AttrValue::String(text(&a.s)?),
            AttributeType::Tensor => {
                let Some(t) = &a.t else {
                    return Err(LoadError::Invalid(format!("{} has no tensor", whose())));
                };
                let label = if t.name.is_empty() { &label } else { &t.name };
                AttrValue::Tensor(convert_tensor(t, label, self.files)?)
            }
            AttributeType::Graph => {
                let Some(g) = &a.g else {
                    return Err(LoadError::Invalid(format!("{} has no graph", whose())));
                };
                AttrValue::Graph(Box::new(self.graph(g, false)?))
            }
            AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
            AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
            AttributeType::Strings => AttrValue::Strings(
                a.strings
                    .iter()
                    .map(|s| text(s))
                    .collect::<Result<_, _>>()?,
            ),
            AttributeType::Tensors => AttrValue::Tensors(
                a.tensors
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let label = if t.name.is_empty() {
                            format!("{label}[{i}]")
                        } else {
                            t.name.clone()
                        };
                        convert_tensor(t, &label, self.files)
                    })
                    .collect::<Result<_, _>>()?,
            ),
            AttributeType::Undefined => {
                return Err(LoadError::Invalid(format!(
                    "{} has neither a type nor a value",
                    whose()
                )));
            }
            // A type (Optional's, SequenceEmpty's element type is an int instead): kept as
            // ONNX's text for it; lowering (lower/) takes the kind from the values it meets.
            AttributeType::TypeProto => {
                AttrValue::String(super::DeclaredType::of_proto(a.tp.as_ref()).to_string())
            }
            other @ (AttributeType::Graphs
            | AttributeType::SparseTensor
            | AttributeType::SparseTensors
            | AttributeType::TypeProtos) => {
                return Err(LoadError::Unsupported(format!(
                    "{} is of type {}, which vkml does not support",
                    whose(),
                    other.as_str_name()
                )));
            }
        })
    }
}

/// Files older than IR version 2 left AttributeProto.type unset: the value field that is
/// present says it.
fn infer_type(a: &AttributeProto) -> AttributeType {
    if a.t.is_some() {
        AttributeType::Tensor
    } else if a.g.is_some() {
        AttributeType::Graph
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.ints.is_empty() {
        AttributeType::Ints
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else if !a.tensors.is_empty() {
        AttributeType::Tensors
    } else if !a.graphs.is_empty() {
        AttributeType::Graphs
    } else if !a.s.is_empty() {
        AttributeType::String
    } else if a.i != 0 {
        AttributeType::Int
    } else if a.f != 0.0 {
        AttributeType::Float
    } else {
        AttributeType::Undefined
    }
}

/// `base`, or `base_1`, `base_2`... whichever no other node of the graph is named yet.
fn fresh_name(base: &str, used: &mut HashSet<String>) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while used.contains(&name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    used.insert(name.clone());
    name
}

/// A graph input or output: one vkml cannot represent is an error naming it.
fn declared(v: &ValueInfoProto, role: &str, graph: &str) -> Result<ValueDef, LoadError> {
    value_def(v).map_err(|why| {
        LoadError::Unsupported(format!("{role} '{}' of graph '{graph}' {why}", v.name))
    })
}

/// The declared type of a value, or why vkml cannot represent it. A sequence or optional
/// of tensors is described by its kind and its innermost tensor's element type and shape.
fn value_def(v: &ValueInfoProto) -> Result<ValueDef, String> {
    let mut def = ValueDef {
        name: v.name.clone(),
        dtype: None,
        dims: None,
        kind: Kind::Tensor,
    };
    let Some(value) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(def);
    };
    let (kind, t) = tensor_within(value)?;
    def.kind = kind;
    let Some(t) = t else {
        return Ok(def);
    };
    if t.elem_type != 0 {
        def.dtype =
            Some(DType::from_onnx_code(t.elem_type).ok_or_else(|| {
                match onnx_type_name(t.elem_type) {
                    Some(name) => format!("has element type {name}, which vkml does not support"),
                    None => format!(
                        "has element type code {}, which ONNX does not define",
                        t.elem_type
                    ),
                }
            })?);
    }
    def.dims = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                // Some exporters write -1 for "unknown": treat it as unnamed.
                Some(DimValue::DimValue(n)) => match usize::try_from(*n) {
                    Ok(n) => Dim::Fixed(n),
                    Err(_) => Dim::Sym("?".into()),
                },
                Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Sym(p.clone()),
                _ => Dim::Sym("?".into()),
            })
            .collect()
    });
    Ok(def)
}

/// The kind of a declared value and its innermost tensor type (`None` when a sequence or
/// optional leaves its element type out).
fn tensor_within(value: &TypeValue) -> Result<(Kind, Option<&type_proto::Tensor>), String> {
    fn inner(elem: &Option<Box<TypeProto>>) -> Result<(Kind, Option<&type_proto::Tensor>), String> {
        match elem.as_ref().and_then(|t| t.value.as_ref()) {
            Some(v) => tensor_within(v),
            None => Ok((Kind::Tensor, None)),
        }
    }
    match value {
        TypeValue::TensorType(t) => Ok((Kind::Tensor, Some(t))),
        TypeValue::SequenceType(s) => {
            let (k, t) = inner(&s.elem_type)?;
            Ok((Kind::Sequence(Box::new(k)), t))
        }
        TypeValue::OptionalType(o) => {
            let (k, t) = inner(&o.elem_type)?;
            Ok((Kind::Optional(Box::new(k)), t))
        }
        TypeValue::MapType(_) => Err("is a map; vkml runs tensors, sequences and optionals".into()),
        TypeValue::SparseTensorType(_) => {
            Err("is a sparse tensor; only dense tensors are supported".into())
        }
        TypeValue::OpaqueType(_) => Err("is opaque; only tensors are supported".into()),
    }
}
