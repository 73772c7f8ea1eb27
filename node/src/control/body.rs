//! A subgraph as a model of its own, run by a CPU session.

use crate::error::Error;
use crate::graph::SpecializeError;
use crate::model::{ModelDef, NodeDef, ValueDef};
use crate::ops::{OpError, ValueType};
use crate::session::{DeviceSelection, Session, SessionOptions};
use crate::tensor::Tensor;

pub struct Body {
    /// "node 'n' (Loop) body", for errors.
    what: String,
    session: Session,
    /// The body's declared inputs; the captured outer values follow them.
    formal: usize,
    names: Vec<String>,
    outputs: usize,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} inputs, {} outputs)",
            self.what,
            self.names.len(),
            self.outputs
        )
    }
}

/// What a body's rule answers.
pub enum Infer {
    Types(Vec<ValueType>),
    /// It needs the values of these of its inputs (formal, then captured).
    NeedsValues(Vec<usize>),
}

impl Body {
    pub fn new(
        node: &NodeDef,
        attr: &str,
        model: &ModelDef,
        captured: &[String],
    ) -> Result<Body, OpError> {
        let what = format!("{} '{attr}'", node.op_type);
        let g = super::graph_attr(node, attr)?;
        let mut graph = g.clone();
        // Declared shapes of body inputs are often placeholders (exporters write [] or
        // nothing for loop-carried values): the node's rule gives the real ones.
        for v in &mut graph.inputs {
            v.dims = None;
        }
        let formal = graph.inputs.len();
        graph.inputs.extend(captured.iter().map(|name| ValueDef {
            name: name.clone(),
            dtype: None,
            dims: None,
            kind: Default::default(),
        }));
        let names = graph.inputs.iter().map(|v| v.name.clone()).collect();
        let outputs = graph.outputs.len();
        let inner = ModelDef {
            ir_version: model.ir_version,
            opset: model.opset,
            producer: model.producer.clone(),
            graph,
        };
        let options = SessionOptions {
            devices: DeviceSelection::Cpu,
            ..SessionOptions::default()
        };
        let session = Session::from_model_def(&inner, options).map_err(|e| lift(&what, e))?;
        Ok(Body {
            what,
            session,
            formal,
            names,
            outputs,
        })
    }

    pub fn formal(&self) -> usize {
        self.formal
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Output types for inputs of `types` (formal, then captured), with the values in `known`.
    pub fn infer(&self, types: &[ValueType], known: &[Option<&Tensor>]) -> Result<Infer, OpError> {
        match self.session.output_types(types, known) {
            Ok(t) => Ok(Infer::Types(t)),
            Err(SpecializeError::NeedsValues(v)) => Ok(Infer::NeedsValues(v)),
            Err(e) => Err(lift(&self.what, e.into())),
        }
    }

    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, OpError> {
        let feeds: Vec<(&str, Tensor)> = self
            .names
            .iter()
            .map(String::as_str)
            .zip(inputs.iter().cloned())
            .collect();
        let out = self.session.run(&feeds).map_err(|e| lift(&self.what, e))?;
        Ok(out.into_iter().map(|(_, t)| t).collect())
    }
}

/// A body's error as the node's: unsupported stays unsupported.
fn lift(what: &str, e: Error) -> OpError {
    match e {
        Error::UnsupportedNode { .. } | Error::Unsupported(_) => {
            OpError::unsupported(format!("in {what}: {e}"))
        }
        e => OpError::invalid(format!("in {what}: {e}")),
    }
}
