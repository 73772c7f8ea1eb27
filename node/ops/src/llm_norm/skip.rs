//! com.microsoft's SkipLayerNormalization and SkipSimplifiedLayerNormalization: the residual
//! add of a transformer block fused with its norm. `v = input + skip + bias` (the skip may
//! lack the batch axis), normalised over the last axis: layer norm with gamma and beta, or RMS
//! with gamma. Outputs: output, mean (0 for the RMS form, as onnxruntime), inv_std_var (both
//! float, the input's shape with a last axis of 1), and `v` itself (input_skip_bias_sum).
//! Inputs: input, skip, gamma, then beta and bias (layer) or bias (RMS), all of one type.

use super::FLOATS;
use super::cpu::{f64s, normalize};
use super::gpu::{RowNorm, kernel};
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor, numel};
use crate::util::{expect_dtype, opt, req};
use crate::{GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};

#[derive(Debug)]
pub struct Skip {
    simplified: bool,
    epsilon: f32,
    num_outputs: usize,
}

impl Skip {
    pub fn build(spec: &NodeSpec<'_>, simplified: bool) -> Result<Box<dyn Op>, OpError> {
        let op = Skip {
            simplified,
            // onnxruntime's default for both.
            epsilon: spec.attrs.float("epsilon", 1e-12)?,
            num_outputs: spec.num_outputs.max(1),
        };
        if spec.num_outputs > 4 {
            return Err(OpError::invalid(format!(
                "{}: {} outputs, at most 4 exist",
                op.name(),
                spec.num_outputs
            )));
        }
        if op.epsilon < 0.0 {
            return Err(OpError::invalid(format!(
                "{}: epsilon must not be negative, got {}",
                op.name(),
                op.epsilon
            )));
        }
        Ok(Box::new(op))
    }

    fn name(&self) -> &'static str {
        if self.simplified {
            "SkipSimplifiedLayerNormalization"
        } else {
            "SkipLayerNormalization"
        }
    }

    /// Input indices of beta and bias.
    fn beta_bias(&self) -> (Option<usize>, usize) {
        if self.simplified {
            (None, 3)
        } else {
            (Some(3), 4)
        }
    }

    /// Checks the shapes as onnxruntime does; returns (rows, hidden size).
    fn check(
        &self,
        x: &[usize],
        skip: &[usize],
        vectors: &[(&str, Option<&[usize]>)],
    ) -> Result<(usize, usize), OpError> {
        let bad = |what: String| OpError::invalid(format!("{}: {what}", self.name()));
        if !(2..=3).contains(&x.len()) || !(2..=3).contains(&skip.len()) {
            return Err(bad(format!(
                "input {x:?} and skip {skip:?} must have 2 or 3 axes"
            )));
        }
        let tail = |s: &[usize]| s[s.len() - 2..].to_vec();
        // The skip is the input's shape, or lacks its batch axis (or has a batch of 1).
        let fits = skip == x
            || (x.len() == 3 && tail(skip) == tail(x) && (skip.len() == 2 || skip[0] == 1));
        if !fits {
            return Err(bad(format!(
                "skip {skip:?} must have the input's shape {x:?}, or its last two axes with a batch of 1 or none"
            )));
        }
        let hidden = x[x.len() - 1];
        for (name, shape) in vectors {
            if let Some(s) = shape
                && *s != [hidden]
            {
                return Err(bad(format!(
                    "{name} must have shape [{hidden}], found {s:?}"
                )));
            }
        }
        Ok((numel(&x[..x.len() - 1]), hidden))
    }

    fn check_inputs(&self, types: &[Option<&ValueType>]) -> Result<(usize, usize), OpError> {
        let x = req(types, 0)?;
        let skip = req(types, 1)?;
        let gamma = req(types, 2)?;
        let (beta_at, bias_at) = self.beta_bias();
        let beta = beta_at.and_then(|i| opt(types, i));
        let bias = opt(types, bias_at);
        expect_dtype(x, FLOATS, &format!("{}: input", self.name()))?;
        for (name, t) in [
            ("skip", Some(skip)),
            ("gamma", Some(gamma)),
            ("beta", beta),
            ("bias", bias),
        ] {
            if let Some(t) = t
                && t.dtype != x.dtype
            {
                return Err(OpError::invalid(format!(
                    "{}: {name} must be {} like the input, found {}",
                    self.name(),
                    x.dtype,
                    t.dtype
                )));
            }
        }
        let vectors = [
            ("gamma", Some(&gamma.shape[..])),
            ("beta", beta.map(|b| &b.shape[..])),
            ("bias", bias.map(|b| &b.shape[..])),
        ];
        self.check(&x.shape, &skip.shape, &vectors)
    }
}

impl Op for Skip {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types = crate::util::types_of(inputs);
        self.check_inputs(&types)?;
        let x = req(&types, 0)?;
        let mut stat = x.shape.clone();
        *stat.last_mut().expect("rank 2 or 3") = 1;
        let stat = ValueType::new(DType::F32, stat);
        let all = [x.clone(), stat.clone(), stat, x.clone()];
        Ok(all[..self.num_outputs].to_vec())
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let (rows, len) = self.check_inputs(&refs)?;
        let x = req(inputs, 0)?;
        let skip = f64s(req(inputs, 1)?)?;
        let gamma = f64s(req(inputs, 2)?)?;
        let (beta_at, bias_at) = self.beta_bias();
        let beta = beta_at.and_then(|i| opt(inputs, i)).map(f64s).transpose()?;
        let bias = opt(inputs, bias_at).map(f64s).transpose()?;
        let mut v = f64s(x)?;
        for (i, e) in v.iter_mut().enumerate() {
            *e += skip[i % skip.len()] + bias.as_ref().map_or(0.0, |b| b[i % len]);
        }
        let n = normalize(
            &v,
            rows,
            len,
            !self.simplified,
            self.epsilon as f64,
            &gamma,
            beta.as_deref(),
        );
        let mut out = Vec::with_capacity(outputs.len());
        for (o, values) in outputs.iter().zip([n.y, n.mean, n.inv, v]) {
            out.push(from_f64(o.dtype, o.shape.clone(), values)?);
        }
        Ok(out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let (rows, len) = self.check_inputs(inputs).ok()?;
        let (beta_at, bias_at) = self.beta_bias();
        let present = |i: usize| opt(inputs, i).map(|_| i);
        let k = RowNorm {
            rows,
            len,
            layer: !self.simplified,
            eps: self.epsilon,
            gd: 1,
            gs: len,
            x: 0,
            skip: Some((1, req(inputs, 1).ok()?.numel())),
            gamma: 2,
            beta: beta_at.and_then(present),
            bias: present(bias_at),
            mean: (outputs.len() > 1).then_some(1),
            inv: (outputs.len() > 2).then_some(2),
            sum: (outputs.len() > 3).then_some(3),
        };
        kernel(req(inputs, 0).ok()?.dtype, &k)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |x| 8 * x.numel() as u64)
    }
}
