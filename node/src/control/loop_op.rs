//! Loop: runs its body while the trip count and the condition allow, carrying values from one
//! iteration to the next and stacking the scan outputs of every iteration.

use super::body::{Body, Infer};
use super::slices::stack;
use crate::model::{GraphDef, ModelDef, NodeDef};
use crate::ops::util::opt;
use crate::ops::{InferInput, Op, OpError, ValueType};
use crate::tensor::{DType, Tensor};

#[derive(Debug)]
struct Loop {
    body: Body,
    carried: usize,
    scans: usize,
    /// The body hands its condition input straight back: the loop then runs exactly as many
    /// times as the trip count (and the initial condition) say, known before it runs.
    cond_passes_through: bool,
}

pub fn build(
    node: &NodeDef,
    model: &ModelDef,
    captured: &[String],
) -> Result<Box<dyn Op>, OpError> {
    let body = Body::new(node, "body", model, captured)?;
    let g = super::graph_attr(node, "body")?;
    let carried = node.inputs.len().saturating_sub(2);
    if node.inputs.len() < 2 || body.formal() != 2 + carried || body.outputs() < 1 + carried {
        return Err(OpError::invalid(format!(
            "Loop: {} inputs and a body of {} inputs and {} outputs; the body takes the iteration \
             number, the condition and the {carried} carried values, and gives the condition, \
             them and any scan outputs",
            node.inputs.len(),
            body.formal(),
            body.outputs()
        )));
    }
    let scans = body.outputs() - 1 - carried;
    if node.outputs.len() != carried + scans {
        return Err(OpError::invalid(format!(
            "Loop has {} outputs; its body makes {carried} carried values and {scans} scan outputs",
            node.outputs.len()
        )));
    }
    if node.inputs[0].is_empty() && node.inputs[1].is_empty() {
        return Err(OpError::unsupported(
            "Loop without a trip count or a condition never ends",
        ));
    }
    let cond_passes_through = passes_through(g, &g.outputs[0].name, &g.inputs[1].name);
    Ok(Box::new(Loop {
        body,
        carried,
        scans,
        cond_passes_through,
    }))
}

/// Whether `output` of body `g` is its input `input`, directly or through Identity nodes (the
/// exporters' `cond_out = Identity(cond_in)`).
fn passes_through(g: &GraphDef, output: &str, input: &str) -> bool {
    let mut name = output;
    // Each step moves to an earlier node; a graph of n nodes has no longer chain.
    for _ in 0..=g.nodes.len() {
        if name == input {
            return true;
        }
        match g.nodes.iter().find(|n| n.outputs.iter().any(|o| o == name)) {
            Some(n) if n.op_type == "Identity" && n.domain.is_empty() && n.inputs.len() == 1 => {
                name = &n.inputs[0];
            }
            _ => return false,
        }
    }
    false
}

fn scalar_of(t: &Tensor, what: &str) -> Result<i64, OpError> {
    let v = match t.dtype() {
        DType::Bool => t
            .view_bool()
            .map(|b| b.iter().map(|&b| i64::from(b)).collect()),
        _ => t.to_i64_vec(),
    }
    .map_err(|e| OpError::invalid(e.to_string()))?;
    match v[..] {
        [x] => Ok(x),
        _ => Err(OpError::invalid(format!(
            "Loop: the {what} is {} {:?}; it must be one value",
            t.dtype(),
            t.shape()
        ))),
    }
}

/// The most iterations a Loop may run: a loop whose condition never turns false (or a trip
/// count of billions, as a corrupt file may hold) fails with an error rather than hanging its
/// caller (the fuzzer found one). A tiny body takes 10-80 µs an iteration on the CPU here, so
/// the cap costs seconds at most.
const MAX_ITERATIONS: i64 = 1 << 16;

/// The outputs of a run: final carried values, then each scan output's parts.
type Ran = (Vec<Tensor>, Vec<Vec<Tensor>>);

impl Loop {
    fn run_loop(&self, inputs: &[Option<&Tensor>]) -> Result<Ran, OpError> {
        let trip = opt(inputs, 0)
            .map(|t| scalar_of(t, "trip count"))
            .transpose()?;
        let mut cond = opt(inputs, 1)
            .map(|t| scalar_of(t, "condition"))
            .transpose()?
            .is_none_or(|c| c != 0);
        let mut carried: Vec<Tensor> = (0..self.carried)
            .map(|k| {
                opt(inputs, 2 + k)
                    .cloned()
                    .ok_or_else(|| OpError::invalid("Loop: a carried value is missing"))
            })
            .collect::<Result<_, _>>()?;
        let captured: Vec<Tensor> = inputs[(2 + self.carried).min(inputs.len())..]
            .iter()
            .map(|t| {
                t.cloned()
                    .ok_or_else(|| OpError::invalid("Loop: a captured value is missing"))
            })
            .collect::<Result<_, _>>()?;
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); self.scans];
        let mut i = 0i64;
        if let Some(m) = trip.filter(|&m| m > MAX_ITERATIONS) {
            return Err(OpError::unsupported(format!(
                "Loop: a trip count of {m}; vkml runs at most {MAX_ITERATIONS} iterations"
            )));
        }
        while cond && trip.is_none_or(|m| i < m) {
            if i == MAX_ITERATIONS {
                return Err(OpError::unsupported(format!(
                    "Loop: its condition was still true after {MAX_ITERATIONS} iterations, the \
                     most vkml runs"
                )));
            }
            let mut feed = vec![Tensor::scalar(i), Tensor::from_bools(vec![], vec![true])];
            feed.extend(carried.iter().cloned());
            feed.extend(captured.iter().cloned());
            let out = self.body.run(&feed)?;
            cond = scalar_of(&out[0], "body's condition")? != 0;
            carried = out[1..1 + self.carried].to_vec();
            for (s, t) in scans.iter_mut().zip(&out[1 + self.carried..]) {
                s.push(t.clone());
            }
            i += 1;
        }
        Ok((carried, scans))
    }

    /// Types from the body's rule alone, when the number of iterations is known without
    /// running the loop; `None` when it is not.
    fn static_types(
        &self,
        inputs: &[Option<InferInput<'_>>],
    ) -> Result<Option<Vec<ValueType>>, OpError> {
        let mut types = vec![
            ValueType::new(DType::I64, vec![]),
            ValueType::new(DType::Bool, vec![]),
        ];
        let mut known: Vec<Option<&Tensor>> = vec![None, None];
        for i in inputs.iter().skip(2) {
            let i =
                i.ok_or_else(|| OpError::invalid("Loop: a carried or captured value is missing"))?;
            types.push(i.ty.clone());
            known.push(i.value);
        }
        let out = match self.body.infer(&types, &known)? {
            Infer::Types(t) => t,
            Infer::NeedsValues(v) => {
                return match v.iter().find(|&&k| k >= 2) {
                    // A carried or captured value: the plan is made for its value.
                    Some(&k) if v.iter().all(|&k| k >= 2) => Err(OpError::NeedsValue(k)),
                    // The iteration number or the condition decides shapes: run it.
                    _ => Ok(None),
                };
            }
        };
        let carried_in = &types[2..2 + self.carried];
        if out[1..1 + self.carried] != *carried_in {
            // A carried value changes type across iterations.
            return Ok(None);
        }
        if self.scans == 0 {
            return Ok(Some(carried_in.to_vec()));
        }
        let value = |i: usize| opt(inputs, i).and_then(|x| x.value);
        let trip = match (opt(inputs, 0), value(0)) {
            (None, _) => return Ok(None),
            (Some(_), Some(v)) => scalar_of(v, "trip count")?.max(0) as usize,
            (Some(_), None) => return Err(OpError::NeedsValue(0)),
        };
        let starts = match (opt(inputs, 1), value(1)) {
            (None, _) => true,
            (Some(_), Some(v)) => scalar_of(v, "condition")? != 0,
            (Some(_), None) => return Err(OpError::NeedsValue(1)),
        };
        if !self.cond_passes_through {
            return Ok(None);
        }
        let n = if starts { trip } else { 0 };
        let mut all = carried_in.to_vec();
        all.extend(out[1 + self.carried..].iter().map(|t| {
            let mut shape = vec![n];
            shape.extend(&t.shape);
            ValueType::new(t.dtype, shape)
        }));
        Ok(Some(all))
    }
}

impl Op for Loop {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        if let Some(t) = self.static_types(inputs)? {
            return Ok(t);
        }
        // The iterations decide shapes: run the loop on the values, as NonZero is folded.
        let mut values = Vec::with_capacity(inputs.len());
        for (i, x) in inputs.iter().enumerate() {
            match x {
                Some(x) => values.push(Some(x.value.ok_or(OpError::NeedsValue(i))?)),
                None => values.push(None),
            }
        }
        let (carried, scans) = self.run_loop(&values)?;
        let mut types: Vec<ValueType> = carried.iter().map(ValueType::of).collect();
        for parts in &scans {
            types.push(match parts.first() {
                Some(p) => {
                    let mut shape = vec![parts.len()];
                    shape.extend(p.shape());
                    ValueType::new(p.dtype(), shape)
                }
                None => ValueType::new(DType::F32, vec![0]),
            });
        }
        Ok(types)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (mut out, scans) = self.run_loop(inputs)?;
        for (parts, ty) in scans.iter().zip(&outputs[self.carried..]) {
            let part_shape = ty.shape.get(1..).unwrap_or(&[]);
            out.push(stack(parts, 0, (ty.dtype, part_shape))?);
        }
        Ok(out)
    }
}
