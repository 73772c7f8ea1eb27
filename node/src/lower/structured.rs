//! A session's side for a model with sequences or optionals: a lowered graph, with a tensor
//! session of its own, per input structure.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::engine::{LowerError, Lowerer, Scope};
use super::{Layout, Shape, flatten};
use crate::error::{Error, Result};
use crate::exec::{KernelTime, NodeTime, PlanSummary};
use crate::graph::SpecializeError;
use crate::io::Value;
use crate::model::{ModelDef, ValueDef};
use crate::ops::ValueType;
use crate::session::{Session, SessionOptions};
use crate::tensor::Tensor;

/// Lowered graphs kept at once: each holds a session and its plans.
const MAX_LOWERED: usize = 16;

pub struct Structured {
    model: ModelDef,
    options: SessionOptions,
    /// Model inputs whose values decide structure (a position fed in, a loop's trip count).
    wanted: Mutex<BTreeSet<usize>>,
    /// Most recently used last.
    lowered: Mutex<Vec<(Key, Arc<Lowered>)>>,
}

/// What a lowered graph was made for.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    shapes: Vec<Shape>,
    values: Vec<(usize, Vec<Tensor>)>,
}

struct Lowered {
    session: Session,
    /// The lowered graph's inputs, in the order the model's values flatten to.
    inputs: Vec<String>,
    outputs: Vec<(String, Layout)>,
}

impl Lowered {
    /// The lowered graph's feeds for the model's values (in the model's input order).
    fn feeds<'a>(&'a self, values: &[&Value]) -> Vec<(&'a str, Tensor)> {
        let mut tensors = Vec::new();
        values.iter().for_each(|v| flatten(v, &mut tensors));
        self.inputs
            .iter()
            .map(String::as_str)
            .zip(tensors)
            .collect()
    }
}

impl std::fmt::Debug for Structured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Structured({})", self.model.graph.name)
    }
}

impl Structured {
    pub fn new(model: &ModelDef, options: SessionOptions) -> Structured {
        Structured {
            model: model.clone(),
            options,
            wanted: Mutex::new(BTreeSet::new()),
            lowered: Mutex::new(Vec::new()),
        }
    }

    pub fn inputs(&self) -> &[ValueDef] {
        &self.model.graph.inputs
    }

    pub fn outputs(&self) -> &[ValueDef] {
        &self.model.graph.outputs
    }

    /// Puts named values in the model's input order, with clear errors for missing and
    /// extra ones.
    fn order<'a>(&self, feeds: &'a [(&str, Value)]) -> Result<Vec<&'a Value>> {
        let declared: Vec<&str> = self.inputs().iter().map(|d| d.name.as_str()).collect();
        for (k, (name, _)) in feeds.iter().enumerate() {
            if !declared.contains(name) {
                return Err(Error::Input(format!(
                    "the model has no input named '{name}' (its inputs: {})",
                    declared.join(", ")
                )));
            }
            if feeds[..k].iter().any(|(n, _)| n == name) {
                return Err(Error::Input(format!("'{name}' is given twice")));
            }
        }
        declared
            .iter()
            .map(|d| {
                feeds
                    .iter()
                    .find(|(n, _)| n == d)
                    .map(|(_, v)| v)
                    .ok_or_else(|| Error::Input(format!("missing input '{d}'")))
            })
            .collect()
    }

    pub fn run(&self, feeds: &[(&str, Value)]) -> Result<Vec<(String, Value)>> {
        let values = self.order(feeds)?;
        let lowered = self.lowered_for(&values)?;
        let outs = lowered.session.run(&lowered.feeds(&values))?;
        let outs: Vec<Tensor> = outs.into_iter().map(|(_, t)| t).collect();
        Ok(lowered
            .outputs
            .iter()
            .map(|(name, layout)| (name.clone(), layout.assemble(&outs)))
            .collect())
    }

    pub fn plan_summary(&self, feeds: &[(&str, Value)]) -> Result<PlanSummary> {
        let values = self.order(feeds)?;
        let lowered = self.lowered_for(&values)?;
        lowered.session.plan_summary(&lowered.feeds(&values))
    }

    /// A body's output types (control/body.rs) for tensor inputs of `types`, some known.
    pub fn output_types(
        &self,
        types: &[ValueType],
        known: &[Option<&Tensor>],
    ) -> std::result::Result<Vec<ValueType>, SpecializeError> {
        let shapes: Vec<Shape> = types.iter().cloned().map(Shape::Tensor).collect();
        let known: Vec<Option<Vec<Tensor>>> =
            known.iter().map(|k| k.map(|t| vec![t.clone()])).collect();
        let lowered = match self.lower(&shapes, &known) {
            Ok(l) => l,
            Err(LowerError::Needs(v)) => return Err(SpecializeError::NeedsValues(v)),
            Err(LowerError::Failed(e)) => return Err(SpecializeError::Failed(e)),
        };
        if lowered
            .outputs
            .iter()
            .any(|(_, l)| !matches!(l, Layout::Tensor(_)))
        {
            return Err(SpecializeError::Failed(Error::Unsupported(
                "a body giving a sequence or an optional runs only where it is inlined".into(),
            )));
        }
        let known: Vec<Option<&Tensor>> = known.iter().map(|k| k.as_ref().map(|v| &v[0])).collect();
        lowered.session.output_types(types, &known)
    }

    pub fn profile(&self) -> Vec<NodeTime> {
        let lowered = self.lowered.lock().expect("lowered");
        lowered
            .iter()
            .flat_map(|(_, l)| l.session.profile())
            .collect()
    }

    pub fn kernel_profile(&self) -> Vec<Vec<KernelTime>> {
        let lowered = self.lowered.lock().expect("lowered");
        lowered
            .iter()
            .flat_map(|(_, l)| l.session.kernel_profile())
            .collect()
    }

    /// The lowered graph for these inputs: cached, or made now.
    fn lowered_for(&self, values: &[&Value]) -> Result<Arc<Lowered>> {
        let shapes: Vec<Shape> = self
            .inputs()
            .iter()
            .zip(values)
            .map(|(d, v)| Shape::of(&d.name, v))
            .collect::<Result<_>>()?;
        // Each round either lowers or learns new inputs whose values it needs.
        loop {
            let wanted = self.wanted.lock().expect("wanted").clone();
            let key = Key {
                shapes: shapes.clone(),
                values: wanted
                    .iter()
                    .map(|&i| {
                        let mut t = Vec::new();
                        flatten(values[i], &mut t);
                        (i, t.iter().map(Tensor::unshared).collect())
                    })
                    .collect(),
            };
            {
                let mut cache = self.lowered.lock().expect("lowered");
                if let Some(k) = cache.iter().position(|(k, _)| *k == key) {
                    let hit = cache.remove(k);
                    let l = hit.1.clone();
                    cache.push(hit);
                    return Ok(l);
                }
            }
            let known: Vec<Option<Vec<Tensor>>> = (0..values.len())
                .map(|i| {
                    key.values
                        .iter()
                        .find(|(k, _)| *k == i)
                        .map(|(_, t)| t.clone())
                })
                .collect();
            match self.lower(&shapes, &known) {
                Ok(l) => {
                    let l = Arc::new(l);
                    let mut cache = self.lowered.lock().expect("lowered");
                    if cache.len() >= MAX_LOWERED {
                        cache.remove(0);
                    }
                    cache.push((key, l.clone()));
                    return Ok(l);
                }
                Err(LowerError::Needs(more)) => {
                    let mut set = self.wanted.lock().expect("wanted");
                    let before = set.len();
                    set.extend(more);
                    if set.len() == before {
                        return Err(Error::Unsupported(
                            "lowering asked again for input values it already had".into(),
                        ));
                    }
                }
                Err(LowerError::Failed(e)) => return Err(e),
            }
        }
    }

    fn lower(
        &self,
        shapes: &[Shape],
        known: &[Option<Vec<Tensor>>],
    ) -> std::result::Result<Lowered, LowerError> {
        let mut top = Scope::new(None);
        let mut lw = Lowerer::new(&self.model, shapes, known, &mut top)?;
        lw.nodes(&mut top, &self.model.graph.nodes, "")?;
        let mut outputs = Vec::new();
        for d in &self.model.graph.outputs {
            let sym = top.get(&d.name).cloned().ok_or_else(|| {
                Error::Unsupported(format!("graph output '{}' is produced by nothing", d.name))
            })?;
            outputs.push((d.name.clone(), lw.output(&sym, &d.name)?));
        }
        let model = lw.into_model();
        // What the rules leave is tensors only; a node they do not lower (a Scan whose body
        // takes a sequence) would otherwise make the lowered graph structured again.
        if let Some(n) = super::structured_node(&model.graph) {
            return Err(Error::UnsupportedNode {
                node: n.name.clone(),
                op_type: n.op_type.clone(),
                message: "it takes or gives sequences or optionals where vkml lowers them only \
                          for the sequence and optional ops, If, Loop and SequenceMap"
                    .into(),
            }
            .into());
        }
        let inputs = model.graph.inputs.iter().map(|d| d.name.clone()).collect();
        let session = Session::from_model_def(&model, self.options.clone())?;
        Ok(Lowered {
            session,
            inputs,
            outputs,
        })
    }
}
