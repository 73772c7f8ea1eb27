//! com.microsoft's GELUs, each with its bias add fused: FastGelu (X, optional bias; the tanh
//! approximation), BiasGelu (A, B: the exact erf GELU of A + B) and QuickGelu (`x *
//! sigmoid(alpha x)`, alpha 1.702 by default). A bias is 1-D and runs along the last axis, as
//! onnxruntime requires. One shader, `shaders/gelu.comp`, takes the formula as a mode.

#[cfg(test)]
mod tests;

use crate::numeric::from_f64;
use crate::numeric::num::erf;
use crate::tensor::{DType, Tensor};
use crate::util::{expect_dtype, groups_1d, opt, req};
use crate::{
    BufRef, Dispatch, GpuKernel, InferInput, MS_DOMAIN, NodeSpec, Op, OpError, Registry, ValueType,
};
use vkml_shaders::gelu;
use vkml_shaders::op::Gelu as Mode;

pub fn register(r: &mut Registry) {
    r.add_in(MS_DOMAIN, "FastGelu", |s| Gelu::build(s, Mode::Tanh));
    r.add_in(MS_DOMAIN, "BiasGelu", |s| Gelu::build(s, Mode::Erf));
    r.add_in(MS_DOMAIN, "QuickGelu", |s| Gelu::build(s, Mode::Quick));
}

const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::F64, DType::BF16];

#[derive(Debug)]
struct Gelu {
    mode: Mode,
    alpha: f32,
}

/// The GELU of `x` in the mode's formula, in f64.
fn formula(mode: Mode, alpha: f64, x: f64) -> f64 {
    let logistic = |u: f64| 1.0 / (1.0 + (-u).exp());
    match mode {
        Mode::Erf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Mode::Tanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Mode::Quick => x * logistic(alpha * x),
    }
}

impl Gelu {
    fn build(spec: &NodeSpec<'_>, mode: Mode) -> Result<Box<dyn Op>, OpError> {
        let op = Gelu {
            mode,
            alpha: spec.attrs.float("alpha", 1.702)?,
        };
        if mode == Mode::Erf && spec.num_inputs < 2 {
            return Err(OpError::invalid(
                "BiasGelu: the bias B (input 1) is required",
            ));
        }
        Ok(Box::new(op))
    }

    fn name(&self) -> &'static str {
        match self.mode {
            Mode::Erf => "BiasGelu",
            Mode::Tanh => "FastGelu",
            Mode::Quick => "QuickGelu",
        }
    }

    /// The bias input's type, checked against the input's.
    fn bias<'a>(
        &self,
        x: &ValueType,
        bias: Option<&'a ValueType>,
    ) -> Result<Option<&'a ValueType>, OpError> {
        let name = self.name();
        if self.mode == Mode::Quick && bias.is_some() {
            return Err(OpError::invalid(format!("{name} takes one input")));
        }
        if self.mode == Mode::Erf && bias.is_none() {
            return Err(OpError::invalid(format!(
                "{name}: the bias B (input 1) is required"
            )));
        }
        let Some(b) = bias else {
            return Ok(None);
        };
        let last = x.shape.last().copied();
        if b.dtype != x.dtype || b.shape.len() != 1 || Some(b.shape[0]) != last {
            return Err(OpError::invalid(format!(
                "{name}: the bias must be 1-D, of the input's last axis and type ({x}), found {b}"
            )));
        }
        Ok(Some(b))
    }
}

impl Op for Gelu {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        expect_dtype(x, FLOATS, &format!("{}: input", self.name()))?;
        self.bias(x, opt(inputs, 1).map(|b| b.ty))?;
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let bias = opt(inputs, 1);
        let bias_ty = bias.map(ValueType::of);
        self.bias(&ValueType::of(x), bias_ty.as_ref())?;
        let f64s = |t: &Tensor| t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()));
        let b = bias.map(f64s).transpose()?;
        let alpha = self.alpha as f64;
        let y = f64s(x)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let v = v + b.as_ref().map_or(0.0, |b| b[i % b.len()]);
                formula(self.mode, alpha, v)
            })
            .collect();
        Ok(vec![from_f64(x.dtype(), x.shape().to_vec(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let variant = by_dtype!(x.dtype, gelu::Variant, [F32, F16])?;
        let bias = self.bias(x, opt(inputs, 1)).ok()?;
        let n = u32::try_from(x.numel()).ok()?;
        let dispatch = Dispatch::new(
            variant,
            gelu::Buffers {
                x: BufRef::Input(0),
                // Stood in for by x when absent: bias_n = 0 keeps the shader off it.
                bias: BufRef::Input(if bias.is_some() { 1 } else { 0 }),
                y: BufRef::Output(0),
            },
            gelu::Params {
                n,
                bias_n: bias.map_or(0, |b| b.numel() as u32),
                mode: self.mode.code(),
                alpha: self.alpha,
            },
            groups_1d(n as usize, 256),
        );
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 { vec![] } else { vec![dispatch] },
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs.iter().map(|o| 12 * o.numel() as u64).sum()
    }
}
