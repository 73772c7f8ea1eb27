//! Scan: runs its body once per slice of the scanned inputs, carrying state values and
//! stacking the scan outputs. Opset 9 and later scan along any axis, either way; opset 8 has a
//! batch axis first on every value (and scans axis 1 of the scanned inputs).

use super::body::{Body, Infer};
use super::slices::{slice, stack};
use crate::model::{ModelDef, NodeDef};
use crate::ops::util::{axis, opt};
use crate::ops::{InferInput, Op, OpError, ValueType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct Scan {
    body: Body,
    states: usize,
    inputs: usize,
    outputs: usize,
    /// Opset 8: a batch axis first, and sequence_lens as input 0.
    batched: bool,
    input_axes: Vec<i64>,
    input_reversed: Vec<bool>,
    output_axes: Vec<i64>,
    output_reversed: Vec<bool>,
}

fn list(node: &NodeDef, name: &str, n: usize) -> Result<Vec<i64>, OpError> {
    match node.attrs.ints_opt(name)? {
        None => Ok(vec![0; n]),
        Some(v) if v.len() == n => Ok(v.to_vec()),
        Some(v) => Err(OpError::invalid(format!(
            "Scan: {name} has {} entries for {n} values",
            v.len()
        ))),
    }
}

pub fn build(
    node: &NodeDef,
    model: &ModelDef,
    captured: &[String],
) -> Result<Box<dyn Op>, OpError> {
    let body = Body::new(node, "body", model, captured)?;
    let batched = model.opset < 9;
    let m = node
        .attrs
        .int_opt("num_scan_inputs")?
        .ok_or_else(|| OpError::invalid("Scan has no num_scan_inputs"))?;
    let given = node.inputs.len() - usize::from(batched);
    let m = usize::try_from(m)
        .ok()
        .filter(|&m| m >= 1 && m <= given)
        .ok_or_else(|| OpError::invalid(format!("Scan: num_scan_inputs {m} for {given} inputs")))?;
    let states = given - m;
    if body.formal() != given || body.outputs() != node.outputs.len() || body.outputs() < states {
        return Err(OpError::invalid(format!(
            "Scan: a body of {} inputs and {} outputs for a node of {given} inputs and {} outputs",
            body.formal(),
            body.outputs(),
            node.outputs.len()
        )));
    }
    let outputs = node.outputs.len() - states;
    let (input_axes, dirs_name) = if batched {
        (vec![1; m], "directions")
    } else {
        (list(node, "scan_input_axes", m)?, "scan_input_directions")
    };
    Ok(Box::new(Scan {
        body,
        states,
        inputs: m,
        outputs,
        batched,
        input_axes,
        input_reversed: list(node, dirs_name, m)?.iter().map(|&d| d != 0).collect(),
        output_axes: if batched {
            vec![1; outputs]
        } else {
            list(node, "scan_output_axes", outputs)?
        },
        output_reversed: list(node, "scan_output_directions", outputs)?
            .iter()
            .map(|&d| d != 0)
            .collect(),
    }))
}

impl Scan {
    /// Index of the first state among the node's inputs.
    fn first(&self) -> usize {
        usize::from(self.batched)
    }

    /// Scanned axis of input `j` of rank `rank`, and the iterations, for one batch row.
    fn input_axis(&self, j: usize, rank: usize) -> Result<usize, OpError> {
        // Opset 8's axis 1 is axis 0 of a batch row.
        if self.batched {
            Ok(0)
        } else {
            axis(self.input_axes[j], rank)
        }
    }

    /// One batch row (the whole input from opset 9): states and scanned inputs in, states and
    /// stacked scan outputs out.
    fn scan(
        &self,
        states: Vec<Tensor>,
        scanned: &[Tensor],
        captured: &[Tensor],
    ) -> Result<Vec<Tensor>, OpError> {
        let axes: Vec<usize> = scanned
            .iter()
            .enumerate()
            .map(|(j, t)| self.input_axis(j, t.shape().len()))
            .collect::<Result<_, _>>()?;
        let steps = scanned[0].shape()[axes[0]];
        if let Some(j) = (0..scanned.len()).find(|&j| scanned[j].shape()[axes[j]] != steps) {
            return Err(OpError::invalid(format!(
                "Scan: scanned input {j} has {} steps, input 0 {steps}",
                scanned[j].shape()[axes[j]]
            )));
        }
        let mut states = states;
        let mut parts: Vec<Vec<Tensor>> = vec![Vec::with_capacity(steps); self.outputs];
        for t in 0..steps {
            let mut feed = states.clone();
            for (j, x) in scanned.iter().enumerate() {
                let at = if self.input_reversed[j] {
                    steps - 1 - t
                } else {
                    t
                };
                feed.push(slice(x, axes[j], at)?);
            }
            feed.extend(captured.iter().cloned());
            let mut out = self.body.run(&feed)?;
            let scans = out.split_off(self.states);
            states = out;
            for (p, s) in parts.iter_mut().zip(scans) {
                p.push(s);
            }
        }
        let mut result = states;
        for (k, mut p) in parts.into_iter().enumerate() {
            if self.output_reversed[k] {
                p.reverse();
            }
            let rank = p.first().map_or(0, |x| x.shape().len()) + 1;
            let ax = if self.batched {
                0
            } else {
                axis(self.output_axes[k], rank)?
            };
            let dtype = p.first().map_or(crate::tensor::DType::F32, Tensor::dtype);
            result.push(stack(&p, ax, (dtype, &[]))?);
        }
        Ok(result)
    }
}

impl Op for Scan {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let first = self.first();
        let batch = |t: &ValueType| {
            if self.batched {
                t.shape.first().copied()
            } else {
                None
            }
        };
        let mut types = Vec::new();
        let mut known = Vec::new();
        let mut steps = None;
        let mut rows = None;
        for (k, i) in inputs.iter().enumerate().skip(first) {
            let i = i.ok_or_else(|| OpError::invalid("Scan: an input is missing"))?;
            let mut ty = i.ty.clone();
            if k < first + self.states + self.inputs && self.batched {
                rows = rows.or(batch(&ty));
                if ty.shape.is_empty() {
                    return Err(OpError::invalid(
                        "Scan (opset 8): every value has a batch axis",
                    ));
                }
                ty.shape.remove(0);
            }
            let value = if k < first + self.states + self.inputs && self.batched {
                None
            } else {
                i.value
            };
            if (first + self.states..first + self.states + self.inputs).contains(&k) {
                let j = k - first - self.states;
                let ax = self.input_axis(j, ty.shape.len())?;
                steps = steps.or(Some(ty.shape[ax]));
                ty.shape.remove(ax);
                types.push(ty);
                known.push(None);
            } else {
                types.push(ty);
                known.push(value);
            }
        }
        let steps = steps.unwrap_or(0);
        let out = match self.body.infer(&types, &known)? {
            Infer::Types(t) => t,
            Infer::NeedsValues(v) => {
                let k = v[0];
                return if k < self.states || k >= self.states + self.inputs {
                    Err(OpError::NeedsValue(first + k))
                } else {
                    Err(OpError::unsupported(
                        "Scan whose body's shapes depend on the scanned values",
                    ))
                };
            }
        };
        if out[..self.states] != types[..self.states] {
            return Err(OpError::invalid(format!(
                "Scan: the body turns states {:?} into {:?}; they must keep their types",
                &types[..self.states],
                &out[..self.states]
            )));
        }
        let mut result = Vec::with_capacity(out.len());
        for (k, t) in out.into_iter().enumerate() {
            let mut shape = t.shape.clone();
            if k >= self.states {
                let ax = if self.batched {
                    0
                } else {
                    axis(self.output_axes[k - self.states], shape.len() + 1)?
                };
                shape.insert(ax, steps);
            }
            if let Some(b) = rows {
                shape.insert(0, b);
            }
            result.push(ValueType::new(t.dtype, shape));
        }
        Ok(result)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let first = self.first();
        let take = |k: usize| {
            opt(inputs, k)
                .cloned()
                .ok_or_else(|| OpError::invalid("Scan: an input is missing"))
        };
        let values: Vec<Tensor> = (first..inputs.len()).map(take).collect::<Result<_, _>>()?;
        let (states, rest) = values.split_at(self.states);
        let (scanned, captured) = rest.split_at(self.inputs);
        if !self.batched {
            return self.scan(states.to_vec(), scanned, captured);
        }
        if let Some(lens) = opt(inputs, 0) {
            let steps = scanned[0].shape().get(1).copied().unwrap_or(0) as i64;
            let lens = lens
                .to_i64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))?;
            if lens.iter().any(|&l| l != steps) {
                return Err(OpError::unsupported(
                    "Scan (opset 8) with sequence_lens shorter than the sequences",
                ));
            }
        }
        let rows = scanned[0].shape()[0];
        if rows == 0 {
            return Err(OpError::unsupported(
                "Scan (opset 8) over a batch of 0 rows",
            ));
        }
        let mut per_row: Vec<Vec<Tensor>> = Vec::with_capacity(rows);
        for b in 0..rows {
            let s: Vec<Tensor> = states
                .iter()
                .map(|t| slice(t, 0, b))
                .collect::<Result<_, _>>()?;
            let x: Vec<Tensor> = scanned
                .iter()
                .map(|t| slice(t, 0, b))
                .collect::<Result<_, _>>()?;
            per_row.push(self.scan(s, &x, captured)?);
        }
        (0..self.states + self.outputs)
            .map(|k| {
                let parts: Vec<Tensor> = per_row.iter().map(|r| r[k].clone()).collect();
                stack(&parts, 0, (parts[0].dtype(), &[]))
            })
            .collect()
    }
}
