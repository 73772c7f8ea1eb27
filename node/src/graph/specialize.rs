//! Specialisation: the graph at concrete input types (and, where a shape rule needs them, the
//! values of some graph inputs), with every value typed and everything computable folded.
//!
//! A rule that needs a value only known at run time (Reshape's shape fed as a graph input)
//! answers `OpError::NeedsValue`. The needed value is then traced back to the graph inputs it
//! is computed from, and the caller specializes again with those inputs' values known, as
//! TensorRT does with shape tensors: the plan is then keyed on their values too.

use std::collections::{BTreeMap, BTreeSet};

use super::{Fusion, Graph, Node, Specialized, ValueId, node_err, op_err};
use crate::error::{Error, Result};
use crate::model::{Dim, ValueDef};
use crate::ops::{InferInput, OpError, ValueType};
use crate::tensor::{DType, Tensor};

/// Why a graph could not be specialized.
#[derive(Debug)]
pub enum SpecializeError {
    /// A rule needs values computed from these graph inputs (indices into `Graph::inputs`, in
    /// increasing order): specialize again with their values known.
    NeedsValues(Vec<usize>),
    /// An op's rule refused its inputs; kept apart so a caller can tell an unsupported type
    /// ([`OpError::Unsupported`]) from the rest.
    Op {
        node: String,
        op_type: String,
        error: OpError,
    },
    Failed(Error),
}

/// Refuses a value of a type only some ops take, given to or made by another op: a
/// low-precision value outside the ops that convert them ([`crate::ops::Op::low_precision`]),
/// or a string tensor outside the string ops ([`crate::ops::Op::strings`]: its bytes are
/// offsets and text, which an op moving elements of a fixed size would scramble).
fn restricted_types_only_where_taken<'a>(
    node: &Node,
    types: impl Iterator<Item = &'a ValueType>,
) -> Result<(), SpecializeError> {
    for t in types {
        let why = if t.dtype.is_low_precision() && !node.op.low_precision() {
            "vkml converts the low-precision types only with Cast, CastLike, QuantizeLinear and \
             DequantizeLinear"
        } else if t.dtype == DType::String && !node.op.strings() {
            "vkml runs strings through the string ops (StringConcat, StringSplit, \
             StringNormalizer, RegexFullMatch, LabelEncoder, Equal) only"
        } else {
            continue;
        };
        return Err(SpecializeError::Op {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            error: OpError::unsupported(format!("{} of {}: {why}", node.op_type, t.dtype)),
        });
    }
    Ok(())
}

impl From<Error> for SpecializeError {
    fn from(e: Error) -> Self {
        SpecializeError::Failed(e)
    }
}

impl From<SpecializeError> for Error {
    fn from(e: SpecializeError) -> Error {
        match e {
            SpecializeError::Failed(e) => e,
            SpecializeError::Op {
                node,
                op_type,
                error,
            } => op_err(&node, &op_type, error),
            SpecializeError::NeedsValues(inputs) => Error::Unsupported(format!(
                "planning needs the values of graph inputs {inputs:?}"
            )),
        }
    }
}

impl Graph {
    /// Checks the caller's input types against the declared ones (symbolic sizes take the
    /// given size, consistently) and infers every value. `known[i]`, when given, is the value
    /// of graph input `i`: it is folded like a constant (its type must be `inputs[i]`).
    /// Chains of elementwise ops are then fused (graph/fuse.rs).
    pub fn specialize(
        &self,
        inputs: &[ValueType],
        known: &[Option<&Tensor>],
    ) -> Result<Specialized, SpecializeError> {
        self.specialize_for(inputs, known, Fusion::All)
    }

    /// [`Graph::specialize`], fusing as `fusion` says: a fused chain saves dispatches and
    /// memory traffic on a GPU, while the CPU backend runs its steps one by one anyway (and
    /// measured slower fused, BENCHMARKS.md), so plans for the CPU alone stay unfused; and
    /// `Tuning::fusion` may turn either pass off.
    ///
    /// Every value may be as large as the host's available memory, where folding computes it:
    /// [`Graph::specialize_with`] takes another limit.
    pub fn specialize_for(
        &self,
        inputs: &[ValueType],
        known: &[Option<&Tensor>],
        fusion: Fusion,
    ) -> Result<Specialized, SpecializeError> {
        self.specialize_with(inputs, known, fusion, crate::exec::cpu_memory())
    }

    /// [`Graph::specialize_for`] with a limit on every value's bytes: a value whose type
    /// (from its op's rule) is larger fails specialisation, naming its node, before it is
    /// folded or planned, so that no model can make vkml allocate more than that for one value.
    pub fn specialize_with(
        &self,
        inputs: &[ValueType],
        known: &[Option<&Tensor>],
        fusion: Fusion,
        max_value_bytes: u64,
    ) -> Result<Specialized, SpecializeError> {
        let mut spec = self.specialize_limited(inputs, known, max_value_bytes)?;
        if fusion == Fusion::All {
            self.fuse_qdq(&mut spec);
        }
        if fusion == Fusion::Cpu {
            self.fuse_convs(&mut spec);
            return Ok(spec);
        }
        if fusion != Fusion::Off {
            self.fuse_chains(&mut spec);
        }
        if fusion == Fusion::All {
            self.fuse_norms(&mut spec);
        }
        Ok(spec)
    }

    /// [`Graph::specialize_with`] at the types of `inputs` (in graph order), knowing the
    /// values of only those inputs a shape rule asks for, as a session learns them: knowing
    /// every value would fold the whole graph away, leaving nothing to plan.
    pub fn specialize_given(
        &self,
        inputs: &[&Tensor],
        fusion: Fusion,
        max_value_bytes: u64,
    ) -> Result<Specialized, SpecializeError> {
        let types: Vec<ValueType> = inputs.iter().map(|t| ValueType::of(t)).collect();
        let mut wanted: BTreeSet<usize> = BTreeSet::new();
        loop {
            let known: Vec<Option<&Tensor>> = (0..inputs.len())
                .map(|i| wanted.contains(&i).then_some(inputs[i]))
                .collect();
            match self.specialize_with(&types, &known, fusion, max_value_bytes) {
                Err(SpecializeError::NeedsValues(more)) => {
                    let before = wanted.len();
                    wanted.extend(more);
                    if wanted.len() == before {
                        // Cannot happen: the graph asks only for inputs it was not given.
                        return Err(SpecializeError::Failed(Error::Unsupported(
                            "planning asked again for input values it already had".into(),
                        )));
                    }
                }
                other => return other,
            }
        }
    }

    /// [`Graph::specialize`] without fusion.
    pub fn specialize_unfused(
        &self,
        inputs: &[ValueType],
        known: &[Option<&Tensor>],
    ) -> Result<Specialized, SpecializeError> {
        self.specialize_limited(inputs, known, crate::exec::cpu_memory())
    }

    fn specialize_limited(
        &self,
        inputs: &[ValueType],
        known: &[Option<&Tensor>],
        limit: u64,
    ) -> Result<Specialized, SpecializeError> {
        let n = self.value_names.len();
        let mut types: Vec<Option<ValueType>> = vec![None; n];
        let mut consts: Vec<Option<Tensor>> = self.initializers.clone();
        for (v, t) in consts.iter().enumerate() {
            if let Some(t) = t {
                types[v] = Some(ValueType::of(t));
            }
        }
        for (&v, ty) in &self.deferred {
            types[v] = Some(ty.clone());
        }
        let mut syms: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, ((v, def), ty)) in self.inputs.iter().zip(inputs).enumerate() {
            check_input(def, ty, &mut syms)?;
            check_input_size(def, ty, limit)?;
            types[*v] = Some(ty.clone());
            if let Some(t) = known.get(i).copied().flatten() {
                debug_assert_eq!(&ValueType::of(t), ty, "a known input's type is its own");
                consts[*v] = Some(t.clone());
            }
        }
        let mut live = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let in_types: Vec<Option<InferInput<'_>>> = node
                .inputs
                .iter()
                .map(|v| {
                    v.map(|v| InferInput {
                        ty: types[v]
                            .as_ref()
                            .expect("topological order: inputs are typed"),
                        value: consts[v].as_ref(),
                    })
                })
                .collect();
            restricted_types_only_where_taken(node, in_types.iter().flatten().map(|i| i.ty))?;
            let out_types = match node.op.infer(&in_types) {
                Ok(t) => t,
                Err(OpError::NeedsValue(k)) => return Err(self.needs_value(i, k, known)),
                Err(error) => {
                    return Err(SpecializeError::Op {
                        node: node.name.clone(),
                        op_type: node.op_type.clone(),
                        error,
                    });
                }
            };
            restricted_types_only_where_taken(node, out_types.iter())?;
            for (&o, ty) in node.outputs.iter().zip(&out_types) {
                self.check_size(node, o, ty, limit)?;
            }
            if out_types.len() != node.outputs.len() {
                return Err(node_err(
                    &node.name,
                    &node.op_type,
                    format!(
                        "gives {} outputs, the node names {}",
                        out_types.len(),
                        node.outputs.len()
                    ),
                )
                .into());
            }
            let in_tys: Vec<Option<&ValueType>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|v| types[v].as_ref()))
                .collect();
            let foldable =
                !node.op.random() && node.inputs.iter().flatten().all(|&v| consts[v].is_some());
            if let Some(outs) = node.op.known_outputs(&in_tys).filter(|_| !foldable) {
                for (&o, t) in node.outputs.iter().zip(outs) {
                    consts[o] = Some(t);
                }
            } else if foldable {
                let args: Vec<Option<&Tensor>> = node
                    .inputs
                    .iter()
                    .map(|v| v.and_then(|v| consts[v].as_ref()))
                    .collect();
                let outs = node
                    .op
                    .run_cpu(&args, &out_types)
                    .map_err(|e| op_err(&node.name, &node.op_type, e))?;
                check_made(node, &outs, &out_types)?;
                for (&o, t) in node.outputs.iter().zip(outs) {
                    consts[o] = Some(t);
                }
            } else {
                live.push(i);
            }
            for (&o, t) in node.outputs.iter().zip(out_types) {
                types[o] = Some(t);
            }
        }
        Ok(Specialized {
            types,
            consts,
            live,
            extra: Vec::new(),
        })
    }

    /// Node `node`'s rule needs the value of its input `k`: the graph inputs it is computed
    /// from, or an error naming the node when knowing graph inputs cannot help.
    pub(super) fn needs_value(
        &self,
        node: usize,
        k: usize,
        known: &[Option<&Tensor>],
    ) -> SpecializeError {
        let nd = &self.nodes[node];
        let Some(v) = nd.inputs.get(k).copied().flatten() else {
            return SpecializeError::Failed(node_err(
                &nd.name,
                &nd.op_type,
                format!("needs the value of input {k}, which is missing"),
            ));
        };
        let sources = self.graph_inputs_feeding(v);
        let missing: Vec<usize> = sources
            .iter()
            .copied()
            .filter(|&i| known.get(i).copied().flatten().is_none())
            .collect();
        if !missing.is_empty() {
            return SpecializeError::NeedsValues(missing);
        }
        // Every graph input it comes from is known and it still is not: something on the way
        // is computed only while running.
        let by = self
            .producer(v)
            .map(|p| {
                format!(
                    " (it is computed by node '{}' ({}))",
                    self.nodes[p].name, self.nodes[p].op_type
                )
            })
            .unwrap_or_default();
        SpecializeError::Failed(node_err(
            &nd.name,
            &nd.op_type,
            format!(
                "needs the value of input {k} ('{}') when the model is planned, and that value \
                 is only known while running{by}; vkml cannot plan shapes that depend on \
                 computed data",
                self.value_names[v]
            ),
        ))
    }

    /// Node `node`'s output `v`, of type `ty`, fits `limit` bytes: a shape rule's word is all
    /// there is before the value is folded (allocated on the host) or planned.
    pub(crate) fn check_size(
        &self,
        node: &Node,
        v: ValueId,
        ty: &ValueType,
        limit: u64,
    ) -> Result<()> {
        let size = match ty.checked_bytes() {
            Ok(b) if b <= limit => return Ok(()),
            Ok(b) => format!("{b} bytes"),
            Err(e) => e.to_string(),
        };
        Err(Error::TooLarge(Box::new(crate::error::TooLarge {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            value: self.value_names[v].clone(),
            ty: ty.to_string(),
            size,
            limit,
        })))
    }

    fn producer(&self, v: ValueId) -> Option<usize> {
        self.nodes.iter().position(|n| n.outputs.contains(&v))
    }

    /// Indices into `self.inputs` of the graph inputs `v` is computed from (directly or through
    /// any chain of nodes), in increasing order.
    pub fn graph_inputs_feeding(&self, v: ValueId) -> Vec<usize> {
        let producer: BTreeMap<ValueId, usize> = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(n, node)| node.outputs.iter().map(move |&o| (o, n)))
            .collect();
        let mut seen: BTreeSet<ValueId> = BTreeSet::new();
        let mut stack = vec![v];
        let mut found = BTreeSet::new();
        while let Some(v) = stack.pop() {
            if !seen.insert(v) {
                continue;
            }
            if let Some(i) = self.inputs.iter().position(|(id, _)| *id == v) {
                found.insert(i);
            } else if let Some(&p) = producer.get(&v) {
                stack.extend(self.nodes[p].inputs.iter().flatten().copied());
            }
        }
        found.into_iter().collect()
    }
}

/// What a kernel folded is what its rule said it would be: anything else is a bug in the op
/// that must not reach the plan, whose buffers are sized by the rule.
fn check_made(node: &Node, outs: &[Tensor], types: &[ValueType]) -> Result<()> {
    for (t, ty) in outs.iter().zip(types) {
        if t.dtype() != ty.dtype || t.shape() != ty.shape.as_slice() {
            return Err(node_err(
                &node.name,
                &node.op_type,
                format!("its kernel made {:?} where its rule said {ty}", t),
            ));
        }
    }
    Ok(())
}

/// A graph input the caller gives is no larger than any other value may be.
fn check_input_size(def: &ValueDef, ty: &ValueType, limit: u64) -> Result<()> {
    match ty.checked_bytes() {
        Ok(b) if b <= limit => Ok(()),
        Ok(b) => Err(Error::Input(format!(
            "'{}' is {ty}, {b} bytes, more than the limit of {limit} bytes per value",
            def.name
        ))),
        Err(e) => Err(Error::Input(format!("'{}': {e}", def.name))),
    }
}

fn check_input<'a>(
    def: &'a ValueDef,
    ty: &ValueType,
    syms: &mut BTreeMap<&'a str, usize>,
) -> Result<()> {
    if let Some(d) = def.dtype
        && d != ty.dtype
    {
        return Err(Error::Input(format!(
            "'{}' must be a tensor of {d}, got {}",
            def.name, ty.dtype
        )));
    }
    if let Some(dims) = &def.dims {
        let shape_str = dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if dims.len() != ty.shape.len() {
            return Err(Error::Input(format!(
                "'{}' must have shape [{shape_str}] (rank {}), got {:?}",
                def.name,
                dims.len(),
                ty.shape
            )));
        }
        for (d, &got) in dims.iter().zip(&ty.shape) {
            let ok = match d {
                Dim::Fixed(n) => *n == got,
                Dim::Sym(s) if s == "?" => true,
                Dim::Sym(s) => *syms.entry(s.as_str()).or_insert(got) == got,
            };
            if !ok {
                return Err(Error::Input(format!(
                    "'{}' must have shape [{shape_str}], got {:?}",
                    def.name, ty.shape
                )));
            }
        }
    }
    Ok(())
}
