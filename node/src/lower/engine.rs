//! The lowering walk: every node in order, in scopes that map the model's value names to what
//! they are in the lowered graph ([`Sym`]); tensor nodes are copied, the rest go to
//! rules.rs. Types and values come from specialising the lowered graph built so far, so the
//! walk uses the ops' own rules and folds, not a second copy of them.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::{Layout, Shape, rules};
use crate::error::Error;
use crate::graph::{Graph, SpecializeError, Specialized};
use crate::model::{Dim, GraphDef, Kind, ModelDef, NodeDef, ValueDef};
use crate::ops::{AttrValue, Attrs, ValueType};
use crate::tensor::{DType, Tensor};

/// The most nodes one lowering may make: unrolling a loop of a huge trip count fails with a
/// message instead of exhausting memory.
const MAX_NODES: usize = 100_000;

/// Why a lowering stopped.
#[derive(Debug)]
pub(super) enum LowerError {
    /// It needs the values of these graph inputs (indices into the model's inputs): lower
    /// again with them known.
    Needs(Vec<usize>),
    Failed(Error),
}

impl From<Error> for LowerError {
    fn from(e: Error) -> Self {
        LowerError::Failed(e)
    }
}

/// What a model's value is in the lowered graph: tensors by their names there.
#[derive(Debug, Clone)]
pub(super) enum Sym {
    Tensor(String),
    Seq(Option<DType>, Vec<String>),
    Opt(Option<Box<Sym>>),
}

impl Sym {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Sym::Tensor(_) => "tensor",
            Sym::Seq(..) => "sequence",
            Sym::Opt(_) => "optional",
        }
    }
}

/// The names of one graph (the model's, or a body being inlined), inside those of the graphs
/// around it.
pub(super) struct Scope<'p> {
    names: BTreeMap<String, Sym>,
    parent: Option<&'p Scope<'p>>,
}

impl<'p> Scope<'p> {
    pub(super) fn new(parent: Option<&'p Scope<'p>>) -> Scope<'p> {
        Scope {
            names: BTreeMap::new(),
            parent,
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<&Sym> {
        self.names
            .get(name)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }

    pub(super) fn bind(&mut self, name: &str, s: Sym) {
        self.names.insert(name.to_string(), s);
    }
}

/// The lowered graph being built, and what the walk knows of its values.
pub(super) struct Lowerer<'m> {
    model: &'m ModelDef,
    pub(super) out: GraphDef,
    /// Types and known values of `out.inputs`, and the model input each comes from.
    types: Vec<ValueType>,
    known: Vec<Option<Tensor>>,
    origin: Vec<usize>,
    used: HashSet<String>,
    /// Tensors made by the nodes copied or emitted, which may be outputs as they are.
    produced: HashSet<String>,
    facts: Option<(usize, Graph, Specialized)>,
}

impl<'m> Lowerer<'m> {
    /// A lowering of `model` for inputs of `shapes`, the values of some known.
    pub(super) fn new(
        model: &'m ModelDef,
        shapes: &[Shape],
        known: &[Option<Vec<Tensor>>],
        top: &mut Scope<'_>,
    ) -> Result<Lowerer<'m>, Error> {
        let g = &model.graph;
        let mut lw = Lowerer {
            model,
            out: GraphDef {
                name: g.name.clone(),
                initializers: g.initializers.clone(),
                deferred: g.deferred.clone(),
                ..GraphDef::default()
            },
            types: Vec::new(),
            known: Vec::new(),
            origin: Vec::new(),
            used: HashSet::new(),
            produced: HashSet::new(),
            facts: None,
        };
        for (name, _) in &g.initializers {
            lw.used.insert(name.clone());
            top.bind(name, Sym::Tensor(name.clone()));
        }
        for d in &g.deferred {
            lw.used.insert(d.name.clone());
            top.bind(&d.name, Sym::Tensor(d.name.clone()));
        }
        for (i, (def, shape)) in g.inputs.iter().zip(shapes).enumerate() {
            if !shape.fits(&def.kind) {
                return Err(Error::Input(format!(
                    "'{}' is declared a {}; it was given {}",
                    def.name,
                    def.kind,
                    describe(shape)
                )));
            }
            let mut values = known.get(i).cloned().flatten().map(Vec::into_iter);
            let sym = lw.input(i, &def.name, def.dtype, shape, &mut values);
            top.bind(&def.name, sym);
        }
        Ok(lw)
    }

    /// Flattens model input `i` into inputs of the lowered graph.
    fn input(
        &mut self,
        i: usize,
        name: &str,
        declared: Option<DType>,
        shape: &Shape,
        values: &mut Option<std::vec::IntoIter<Tensor>>,
    ) -> Sym {
        let mut add = |lw: &mut Lowerer, base: String, ty: &ValueType| {
            let n = lw.fresh(&base);
            lw.out.inputs.push(ValueDef {
                name: n.clone(),
                dtype: Some(ty.dtype),
                dims: Some(ty.shape.iter().map(|&d| Dim::Fixed(d)).collect()),
                kind: Kind::Tensor,
            });
            lw.types.push(ty.clone());
            lw.known.push(values.as_mut().and_then(Iterator::next));
            lw.origin.push(i);
            n
        };
        match shape {
            Shape::Tensor(ty) => Sym::Tensor(add(self, name.to_string(), ty)),
            Shape::Sequence(items) => {
                let names = items
                    .iter()
                    .enumerate()
                    .map(|(k, ty)| add(self, format!("{name}[{k}]"), ty))
                    .collect();
                Sym::Seq(declared.or(items.first().map(|t| t.dtype)), names)
            }
            Shape::Optional(None) => Sym::Opt(None),
            Shape::Optional(Some(s)) => {
                Sym::Opt(Some(Box::new(self.input(i, name, declared, s, values))))
            }
        }
    }

    /// `base`, or `base_1`, `base_2`... whichever the lowered graph does not use yet.
    pub(super) fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while self.used.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        self.used.insert(name.clone());
        name
    }

    /// Adds `t` as an initializer of the lowered graph; its name.
    pub(super) fn constant(&mut self, base: &str, t: Tensor) -> String {
        let name = self.fresh(base);
        self.out.initializers.push((name.clone(), t));
        name
    }

    /// Adds a node of the default domain making one fresh tensor; its name.
    pub(super) fn emit(
        &mut self,
        name: &str,
        op_type: &str,
        inputs: Vec<String>,
        attrs: Vec<(&str, AttrValue)>,
    ) -> Result<String, Error> {
        let out = self.fresh(name);
        let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        self.push(NodeDef {
            name: out.clone(),
            op_type: op_type.into(),
            domain: String::new(),
            inputs,
            outputs: vec![out.clone()],
            attrs,
        })?;
        Ok(out)
    }

    fn push(&mut self, node: NodeDef) -> Result<(), Error> {
        if self.out.nodes.len() >= MAX_NODES {
            return Err(Error::Unsupported(format!(
                "lowering the model's sequences made more than {MAX_NODES} nodes (a loop \
                 unrolled too many times?)"
            )));
        }
        self.produced.extend(node.outputs.iter().cloned());
        self.out.nodes.push(node);
        Ok(())
    }

    /// Lowers the nodes of one graph in `scope`, naming what they make after `prefix`.
    pub(super) fn nodes(
        &mut self,
        scope: &mut Scope<'_>,
        nodes: &[NodeDef],
        prefix: &str,
    ) -> Result<(), LowerError> {
        for n in nodes {
            let syms = match rules::lower(self, scope, n, prefix)? {
                Some(syms) => syms,
                None => self.copy(scope, n, prefix)?,
            };
            if syms.len() != n.outputs.len() {
                return Err(node_error(
                    n,
                    format!(
                        "gives {} outputs, the node names {}",
                        syms.len(),
                        n.outputs.len()
                    ),
                )
                .into());
            }
            for (o, s) in n.outputs.iter().zip(syms) {
                if !o.is_empty() {
                    scope.bind(o, s);
                }
            }
        }
        Ok(())
    }

    /// A tensor node, copied with its inputs renamed (its bodies' reads of outer values too).
    fn copy(&mut self, scope: &Scope<'_>, n: &NodeDef, prefix: &str) -> Result<Vec<Sym>, Error> {
        let mut node = n.clone();
        node.name = format!("{prefix}{}", n.name);
        for (k, input) in node.inputs.iter_mut().enumerate() {
            if !input.is_empty() {
                *input = tensor_input(scope, n, k)?;
            }
        }
        for a in node.attrs.0.values_mut() {
            if let AttrValue::Graph(g) = a {
                **g = rename_free(g, scope, n)?;
            }
        }
        let mut syms = Vec::new();
        for o in node.outputs.iter_mut() {
            if !o.is_empty() {
                *o = self.fresh(&format!("{prefix}{o}"));
            }
            syms.push(Sym::Tensor(o.clone()));
        }
        self.push(node)?;
        Ok(syms)
    }

    /// Inlines a body: its inputs bound to `args`, its initializers and values renamed under
    /// `prefix`; the symbols of its outputs.
    pub(super) fn inline(
        &mut self,
        outer: &Scope<'_>,
        body: &GraphDef,
        args: Vec<Sym>,
        prefix: &str,
    ) -> Result<Vec<Sym>, LowerError> {
        let mut scope = Scope::new(Some(outer));
        for (def, a) in body.inputs.iter().zip(args) {
            scope.bind(&def.name, a);
        }
        for (name, t) in &body.initializers {
            let n = self.constant(&format!("{prefix}{name}"), t.clone());
            scope.bind(name, Sym::Tensor(n));
        }
        self.nodes(&mut scope, &body.nodes, prefix)?;
        body.outputs
            .iter()
            .map(|o| {
                scope.get(&o.name).cloned().ok_or_else(|| {
                    LowerError::Failed(Error::Unsupported(format!(
                        "body output '{}' is made by nothing",
                        o.name
                    )))
                })
            })
            .collect()
    }

    /// The type of a tensor of the lowered graph, and its value when planning knows it.
    pub(super) fn facts(&mut self, name: &str) -> Result<(ValueType, Option<Tensor>), LowerError> {
        let (graph, spec) = self.specialized()?;
        let id = graph.value_names.iter().position(|n| n == name);
        match id.and_then(|v| spec.types[v].clone().map(|t| (t, spec.consts[v].clone()))) {
            Some(f) => Ok(f),
            None => Err(Error::Unsupported(format!("lowering found no type for '{name}'")).into()),
        }
    }

    /// The value of a tensor that decides structure (`what` says which, for errors).
    pub(super) fn value(&mut self, name: &str, what: &str) -> Result<Tensor, LowerError> {
        if let (_, Some(v)) = self.facts(name)? {
            return Ok(v);
        }
        let (graph, _) = self.specialized()?;
        let id = graph.value_names.iter().position(|n| n == name);
        let sources = id
            .map(|v| graph.graph_inputs_feeding(v))
            .unwrap_or_default();
        let missing: BTreeSet<usize> = sources
            .iter()
            .filter(|&&i| self.known[i].is_none())
            .map(|&i| self.origin[i])
            .collect();
        if missing.is_empty() {
            return Err(Error::Unsupported(format!(
                "{what} must be known when the model is planned, and it is computed while \
                 running; vkml lowers sequences and optionals to tensors when it plans"
            ))
            .into());
        }
        Err(LowerError::Needs(missing.into_iter().collect()))
    }

    /// The lowered graph so far, specialised at the input types (cached until it grows).
    fn specialized(&mut self) -> Result<(&Graph, &Specialized), LowerError> {
        let len = self.out.nodes.len() + self.out.initializers.len();
        if self.facts.as_ref().is_none_or(|(n, _, _)| *n != len) {
            let model = ModelDef {
                ir_version: self.model.ir_version,
                opset: self.model.opset,
                producer: self.model.producer.clone(),
                graph: self.out.clone(),
            };
            let graph = Graph::from_model(&model)?;
            let known: Vec<Option<&Tensor>> = self.known.iter().map(Option::as_ref).collect();
            let spec = match graph.specialize_unfused(&self.types, &known) {
                Ok(s) => s,
                Err(SpecializeError::NeedsValues(v)) => {
                    let mut want: Vec<usize> = v.iter().map(|&i| self.origin[i]).collect();
                    want.dedup();
                    return Err(LowerError::Needs(want));
                }
                Err(e) => return Err(LowerError::Failed(e.into())),
            };
            self.facts = Some((len, graph, spec));
        }
        let (_, g, s) = self.facts.as_ref().expect("just made");
        Ok((g, s))
    }

    /// Makes `sym` outputs of the lowered graph; where they are among them.
    pub(super) fn output(&mut self, sym: &Sym, name: &str) -> Result<Layout, Error> {
        Ok(match sym {
            Sym::Tensor(t) => Layout::Tensor(self.output_tensor(t, name)?),
            Sym::Seq(_, items) => Layout::Sequence(
                items
                    .iter()
                    .enumerate()
                    .map(|(k, t)| self.output_tensor(t, &format!("{name}[{k}]")))
                    .collect::<Result<_, _>>()?,
            ),
            Sym::Opt(None) => Layout::Optional(None),
            Sym::Opt(Some(s)) => Layout::Optional(Some(Box::new(self.output(s, name)?))),
        })
    }

    /// A tensor as an output of its own: a node's result as it is, anything else (an input, a
    /// weight, a tensor already given as another output) through an Identity.
    fn output_tensor(&mut self, t: &str, name: &str) -> Result<usize, Error> {
        let taken = self.out.outputs.iter().any(|o| o.name == t);
        let name = if self.produced.contains(t) && !taken {
            t.to_string()
        } else {
            self.emit(name, "Identity", vec![t.to_string()], Vec::new())?
        };
        self.out.outputs.push(ValueDef {
            name,
            dtype: None,
            dims: None,
            kind: Kind::Tensor,
        });
        Ok(self.out.outputs.len() - 1)
    }

    pub(super) fn into_model(self) -> ModelDef {
        ModelDef {
            ir_version: self.model.ir_version,
            opset: self.model.opset,
            producer: self.model.producer.clone(),
            graph: self.out,
        }
    }
}

/// How a [`Shape`] reads in a message.
fn describe(s: &Shape) -> String {
    match s {
        Shape::Tensor(t) => format!("a tensor {t}"),
        Shape::Sequence(items) => format!("a sequence of {} tensors", items.len()),
        Shape::Optional(None) => "an empty optional".into(),
        Shape::Optional(Some(s)) => format!("an optional holding {}", describe(s)),
    }
}

pub(super) fn node_error(n: &NodeDef, message: impl Into<String>) -> Error {
    Error::Node {
        node: n.name.clone(),
        op_type: n.op_type.clone(),
        message: message.into(),
    }
}

/// Input `k` of a node that takes tensors only, by its name in the lowered graph.
fn tensor_input(scope: &Scope<'_>, n: &NodeDef, k: usize) -> Result<String, Error> {
    match scope.get(&n.inputs[k]) {
        Some(Sym::Tensor(t)) => Ok(t.clone()),
        Some(other) => Err(Error::UnsupportedNode {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            message: format!(
                "input {k} ('{}') is a {}, which only the sequence and optional ops take",
                n.inputs[k],
                other.kind()
            ),
        }),
        None => Err(node_error(
            n,
            format!(
                "input '{}' is produced by no node, initializer or graph input",
                n.inputs[k]
            ),
        )),
    }
}

/// A body with its reads of outer values renamed to their names in the lowered graph (names
/// it defines itself shadow the outer ones).
fn rename_free(g: &GraphDef, scope: &Scope<'_>, n: &NodeDef) -> Result<GraphDef, Error> {
    let mut map = BTreeMap::new();
    for name in crate::control::captured(g) {
        match scope.get(&name) {
            Some(Sym::Tensor(t)) if *t != name => {
                map.insert(name, t.clone());
            }
            Some(Sym::Tensor(_)) => {}
            Some(other) => {
                return Err(Error::UnsupportedNode {
                    node: n.name.clone(),
                    op_type: n.op_type.clone(),
                    message: format!(
                        "its body reads '{name}', a {}, which only the sequence and optional \
                         ops take",
                        other.kind()
                    ),
                });
            }
            None => {}
        }
    }
    Ok(rename_in(g, &map))
}

fn rename_in(g: &GraphDef, map: &BTreeMap<String, String>) -> GraphDef {
    if map.is_empty() {
        return g.clone();
    }
    let mut defined: BTreeSet<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
    defined.extend(g.initializers.iter().map(|(n, _)| n.as_str()));
    for n in &g.nodes {
        defined.extend(n.outputs.iter().map(String::as_str));
    }
    let inner: BTreeMap<String, String> = map
        .iter()
        .filter(|(k, _)| !defined.contains(k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut out = g.clone();
    let rename = |s: &mut String| {
        if let Some(t) = inner.get(s.as_str()) {
            *s = t.clone();
        }
    };
    for node in &mut out.nodes {
        node.inputs.iter_mut().for_each(rename);
        for a in node.attrs.0.values_mut() {
            if let AttrValue::Graph(sub) = a {
                **sub = rename_in(sub, &inner);
            }
        }
    }
    out.outputs.iter_mut().for_each(|o| rename(&mut o.name));
    out
}
