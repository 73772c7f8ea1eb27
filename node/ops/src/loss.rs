//! NegativeLogLikelihoodLoss (opsets 12, 13, 22) and SoftmaxCrossEntropyLoss (opsets 12, 13).
//!
//! x is [N, C, d1...]; the target [N, d1...] picks a class per element, whose loss is
//! -x[n, target, d...] x weight[target] (weight 1 without weights), 0 where the target is
//! `ignore_index`. Reduction `none` keeps them, `sum` adds them, `mean` (the default) divides
//! the sum by the weights of the targets not ignored. SoftmaxCrossEntropyLoss takes the
//! log-softmax of x over axis 1 first and may return it. The CPU computes in f64; the GPU
//! (f32 with int64 targets) in f32. A target outside [0, C)
//! that is not ignored is an error, on the GPU too.

use super::numeric::from_f64;
use super::util::{groups_1d, opt, req};
use super::{
    BufRef, Dispatch, GpuKernel, IndexFault, InferInput, NodeSpec, Op, OpError, Registry, ValueType,
};
use crate::tensor::{DType, Tensor, TensorError};
use vkml_shaders::op::Softmax as SoftmaxKind;
use vkml_shaders::{nll_loss, nll_reduce, softmax};

pub fn register(r: &mut Registry) {
    r.add("NegativeLogLikelihoodLoss", |s| build(s, false));
    r.add("SoftmaxCrossEntropyLoss", |s| build(s, true));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

#[derive(Debug)]
struct Loss {
    reduction: Reduction,
    ignore: Option<i64>,
    /// SoftmaxCrossEntropyLoss: x is scores, not log-probabilities.
    softmax: bool,
    /// SoftmaxCrossEntropyLoss's outputs: the loss, and the log-probabilities if named.
    log_prob: bool,
}

fn build(spec: &NodeSpec<'_>, softmax: bool) -> Result<Box<dyn Op>, OpError> {
    let reduction = match spec.attrs.string("reduction", "mean")? {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => {
            return Err(OpError::invalid(format!(
                "{}: reduction '{other}' is not one of none, sum, mean",
                spec.op_type
            )));
        }
    };
    Ok(Box::new(Loss {
        reduction,
        ignore: spec.attrs.int_opt("ignore_index")?,
        softmax,
        log_prob: softmax && spec.num_outputs > 1,
    }))
}

fn bad(e: TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

/// (N, C, D): x's batch, classes and the product of the rest.
fn dims(x: &[usize]) -> (usize, usize, usize) {
    (x[0], x[1], x[2..].iter().product())
}

impl Loss {
    fn name(&self) -> &'static str {
        if self.softmax {
            "SoftmaxCrossEntropyLoss"
        } else {
            "NegativeLogLikelihoodLoss"
        }
    }

    fn out_of_range(&self, target: i64, element: u64, classes: u64) -> OpError {
        OpError::invalid(format!(
            "{}: target {target} (element {element} of the targets) is not a class of 0..{classes} \
             nor ignore_index",
            self.name()
        ))
    }

    /// Each element's loss and weight.
    fn losses(
        &self,
        logp: &[f64],
        x: &[usize],
        target: &[i64],
        weight: Option<&[f64]>,
    ) -> Result<(Vec<f64>, Vec<f64>), OpError> {
        let (_, c, d) = dims(x);
        let mut loss = Vec::with_capacity(target.len());
        let mut ws = Vec::with_capacity(target.len());
        for (i, &t) in target.iter().enumerate() {
            if self.ignore == Some(t) {
                loss.push(0.0);
                ws.push(0.0);
                continue;
            }
            if t < 0 || t as usize >= c {
                return Err(self.out_of_range(t, i as u64, c as u64));
            }
            let w = weight.map_or(1.0, |w| w[t as usize]);
            loss.push(-logp[((i / d) * c + t as usize) * d + i % d] * w);
            ws.push(w);
        }
        Ok((loss, ws))
    }
}

/// log-softmax over axis 1 of [N, C, D] values.
fn log_softmax(v: &[f64], (n, c, d): (usize, usize, usize)) -> Vec<f64> {
    let mut out = vec![0.0; v.len()];
    for b in 0..n {
        for k in 0..d {
            let at = |j: usize| (b * c + j) * d + k;
            let max = (0..c).map(|j| v[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..c).map(|j| (v[at(j)] - max).exp()).sum();
            let log = sum.ln();
            for j in 0..c {
                out[at(j)] = v[at(j)] - max - log;
            }
        }
    }
    out
}

impl Op for Loss {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let t = req(inputs, 1)?.ty;
        if !x.dtype.is_float() {
            return Err(OpError::unsupported(format!(
                "{} of {}",
                self.name(),
                x.dtype
            )));
        }
        if !matches!(t.dtype, DType::I32 | DType::I64) {
            return Err(OpError::invalid(format!(
                "{}: the target is {}, not int32 or int64",
                self.name(),
                t.dtype
            )));
        }
        let mut want = x.shape.clone();
        if want.len() < 2 {
            return Err(OpError::invalid(format!(
                "{}: the input has shape {:?}; it needs [N, C, ...]",
                self.name(),
                x.shape
            )));
        }
        let c = want.remove(1);
        if t.shape != want {
            return Err(OpError::invalid(format!(
                "{}: the target has shape {:?}; an input of {:?} needs {want:?}",
                self.name(),
                t.shape,
                x.shape
            )));
        }
        if let Some(w) = opt(inputs, 2).map(|w| w.ty)
            && (w.shape != [c] || w.dtype != x.dtype)
        {
            return Err(OpError::invalid(format!(
                "{}: the weights are {} {:?}; they must be {} [{c}]",
                self.name(),
                w.dtype,
                w.shape,
                x.dtype
            )));
        }
        let loss = match self.reduction {
            Reduction::None => want,
            _ => vec![],
        };
        let mut out = vec![ValueType::new(x.dtype, loss)];
        if self.log_prob {
            out.push(x.clone());
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let v = x.to_f64_vec().map_err(bad)?;
        let logp = if self.softmax {
            log_softmax(&v, dims(x.shape()))
        } else {
            v
        };
        let target = req(inputs, 1)?.to_i64_vec().map_err(bad)?;
        let weight = opt(inputs, 2)
            .map(|w| w.to_f64_vec())
            .transpose()
            .map_err(bad)?;
        let (loss, ws) = self.losses(&logp, x.shape(), &target, weight.as_deref())?;
        let total: f64 = loss.iter().sum();
        let y = match self.reduction {
            Reduction::None => loss,
            Reduction::Sum => vec![total],
            Reduction::Mean => vec![total / ws.iter().sum::<f64>()],
        };
        let mut out = vec![from_f64(x.dtype(), outputs[0].shape.clone(), y)?];
        if self.log_prob {
            out.push(from_f64(x.dtype(), x.shape().to_vec(), logp)?);
        }
        Ok(out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let t = req(inputs, 1).ok()?;
        if x.dtype != DType::F32 || t.dtype != DType::I64 {
            return None;
        }
        let (rows, c, d) = dims(&x.shape);
        let n = t.numel();
        let w32 = |v: usize| u32::try_from(v).ok();
        let reduce = self.reduction != Reduction::None;
        let has_weight = opt(inputs, 2).is_some();
        let ignore = match self.ignore {
            Some(i) => Some(i32::try_from(i).ok()?),
            None => None,
        };
        let mut scratch = Vec::new();
        let mut dispatches = Vec::new();
        let sums = reduce.then(|| {
            scratch.push((2 * n.max(1) * 4) as u64);
            BufRef::Scratch(scratch.len() - 1)
        });
        // SoftmaxCrossEntropyLoss: the log-softmax over axis 1 (softmax.comp), into its
        // second output or a scratch buffer, is what the losses read.
        let logp = match (self.softmax, self.log_prob) {
            (false, _) => BufRef::Input(0),
            (true, true) => BufRef::Output(1),
            (true, false) => {
                scratch.push((x.numel().max(1) * 4) as u64);
                BufRef::Scratch(scratch.len() - 1)
            }
        };
        if self.softmax && rows * c * d > 0 {
            let lines = rows * d;
            let gy = lines.div_ceil(65_535);
            dispatches.push(Dispatch::new(
                softmax::Variant::F32,
                softmax::Buffers {
                    x: BufRef::Input(0),
                    y: logp.clone(),
                },
                softmax::Params {
                    len: w32(c)?,
                    inner: w32(d)?,
                    rows: w32(lines)?,
                    mode: SoftmaxKind::LogSoftmax.code(),
                },
                [w32(lines.div_ceil(gy))?, w32(gy)?, 1],
            ));
        }
        if n > 0 {
            dispatches.push(Dispatch::new(
                nll_loss::Variant::Main,
                nll_loss::Buffers {
                    x: logp.clone(),
                    target: BufRef::Input(1),
                    weight: BufRef::Input(if has_weight { 2 } else { 0 }),
                    y: sums.clone().unwrap_or(BufRef::Output(0)),
                    fault: BufRef::Fault,
                },
                nll_loss::Params {
                    n: w32(n)?,
                    classes: w32(c)?,
                    inner: w32(d.max(1))?,
                    has_weight: u32::from(has_weight),
                    has_ignore: u32::from(ignore.is_some()),
                    ignore: ignore.unwrap_or(0),
                    reduce: u32::from(reduce),
                },
                groups_1d(n, 256),
            ));
        }
        if let Some(sums) = sums {
            dispatches.push(Dispatch::new(
                nll_reduce::Variant::Main,
                nll_reduce::Buffers {
                    sums,
                    y: BufRef::Output(0),
                },
                nll_reduce::Params {
                    n: w32(n)?,
                    mean: u32::from(self.reduction == Reduction::Mean),
                },
                [1, 1, 1],
            ));
        }
        Some(GpuKernel {
            scratch,
            dispatches,
        })
    }

    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &IndexFault) -> OpError {
        self.out_of_range(f.index, f.element, f.dim)
    }
}

#[cfg(test)]
mod tests;
