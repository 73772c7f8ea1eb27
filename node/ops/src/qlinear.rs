//! QLinearMatMul and QLinearConv (opset 10): the integer product of MatMulInteger or
//! ConvInteger (zero points subtracted, exact), plus QLinearConv's int32 bias, requantized:
//! times a_scale x b_scale / y_scale (computed in the scales' type, as numpy does; b's scale
//! may be per output column or channel), in f64, plus y's zero point, rounded half to even
//! and clipped to y's type (y's zero point's, else a's).

use super::conv::{Conv, q8};
use super::integer::{int8_signed, matmul_geometry, per_channel_input};
use super::util::{opt, req, types_of};
use super::{GpuKernel, InferInput, KernelTuning, NodeSpec, Op, OpError, Registry, ValueType};
use crate::splitk::SplitK;
use crate::tensor::{DType, Tensor, TensorError};

pub fn register(r: &mut Registry) {
    r.add("QLinearMatMul", |s| build(s, false));
    r.add("QLinearConv", |s| build(s, true));
}

fn build(spec: &NodeSpec<'_>, conv: bool) -> Result<Box<dyn Op>, OpError> {
    let inner = super::integer::build(spec, if conv { "Conv" } else { "MatMul" })?;
    let geometry = conv
        .then(|| {
            super::conv::parse(&NodeSpec {
                num_inputs: 2,
                num_outputs: 1,
                op_type: "Conv",
                ..*spec
            })
        })
        .transpose()?;
    Ok(Box::new(QLinear {
        inner,
        conv,
        geometry,
    }))
}

#[derive(Debug)]
struct QLinear {
    /// MatMulInteger or ConvInteger.
    inner: Box<dyn Op>,
    conv: bool,
    /// QLinearConv's window, for the GPU kernel.
    geometry: Option<Conv>,
}

fn bad(e: TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

impl QLinear {
    fn name(&self) -> &'static str {
        if self.conv {
            "QLinearConv"
        } else {
            "QLinearMatMul"
        }
    }

    /// The inner op's inputs (a, b, a's zero point, b's) from ours.
    fn integer_inputs<T: Copy>(inputs: &[Option<T>]) -> Vec<Option<T>> {
        vec![
            inputs.first().copied().flatten(),
            inputs.get(3).copied().flatten(),
            inputs.get(2).copied().flatten(),
            inputs.get(5).copied().flatten(),
        ]
    }

    /// The multiplier of each output column (QLinearMatMul) or channel (QLinearConv):
    /// a_scale x b_scale / y_scale, rounded in the scales' type.
    fn multipliers(&self, a: &Tensor, b: &Tensor, y: &Tensor) -> Result<Vec<f64>, OpError> {
        let one = |t: &Tensor, what: &str| -> Result<f64, OpError> {
            match t.to_f64_vec().map_err(bad)?[..] {
                [v] => Ok(v),
                _ => Err(OpError::invalid(format!(
                    "{}: {what} must hold one value",
                    self.name()
                ))),
            }
        };
        let (sa, sy) = (one(a, "the scale of input 0")?, one(y, "y_scale")?);
        let half = a.dtype() == DType::F16 && b.dtype() == DType::F16 && y.dtype() == DType::F16;
        let round = |v: f64| {
            if half {
                half::f16::from_f64(v).to_f64()
            } else {
                v as f32 as f64
            }
        };
        Ok(b.to_f64_vec()
            .map_err(bad)?
            .into_iter()
            .map(|sb| round(round(sa * sb) / sy))
            .collect())
    }
}

impl QLinear {
    /// The op on the GPU (conv/q8.rs), for f32 scales; `dot` picks the dot-product variant.
    fn gpu_conv(
        &self,
        inputs: &[Option<&ValueType>],
        outputs: &[ValueType],
        dot: bool,
        mode: SplitK,
    ) -> Option<GpuKernel> {
        let (x, w) = (opt(inputs, 0)?, opt(inputs, 3)?);
        let b = opt(inputs, 8);
        if b.is_some_and(|b| b.dtype != DType::I32) {
            return None;
        }
        let s = match &self.geometry {
            Some(conv) => conv
                .shape(&x.shape, &w.shape, b.map(|b| b.shape.as_slice()))
                .ok()?,
            None => matmul_geometry(x, w)?.0,
        };
        let f = DType::F32;
        let y = outputs.first()?.dtype;
        let requant = q8::Requant {
            x_scale: per_channel_input(inputs, 1, f, 1)??.0,
            w_scale: per_channel_input(inputs, 4, f, s.oc)??,
            y_scale: per_channel_input(inputs, 6, f, 1)??.0,
            y_zero: per_channel_input(inputs, 7, y, 1)?.map(|z| z.0),
            y_signed: int8_signed(y)?,
        };
        let io = q8::Io {
            x_signed: int8_signed(x.dtype)?,
            w_signed: int8_signed(w.dtype)?,
            x: crate::BufRef::Input(0),
            w: crate::BufRef::Input(3),
            bias: b.map(|_| crate::BufRef::Input(8)),
            x_zero: per_channel_input(inputs, 2, x.dtype, 1)?.map(|z| z.0),
            w_zero: per_channel_input(inputs, 5, w.dtype, s.oc)?,
            requant: Some(requant),
        };
        let layout = match self.geometry {
            Some(_) => q8::Layout::Conv,
            None => q8::Layout::MatMul,
        };
        q8::kernel(&s, &io, (dot, layout), mode)
    }
}

impl Op for QLinear {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        for i in [1, 4, 6] {
            let s = req(inputs, i)?.ty;
            if !matches!(s.dtype, DType::F32 | DType::F16) {
                return Err(OpError::invalid(format!(
                    "{}: input {i} (a scale) is {}, not float or float16",
                    self.name(),
                    s.dtype
                )));
            }
        }
        let out = self.inner.infer(&Self::integer_inputs(inputs))?;
        let y = opt(inputs, 7).map_or(req(inputs, 0)?.ty.dtype, |z| z.ty.dtype);
        Ok(out
            .into_iter()
            .map(|o| ValueType::new(y, o.shape))
            .collect())
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let ints: Vec<ValueType> = outputs
            .iter()
            .map(|o| ValueType::new(DType::I32, o.shape.clone()))
            .collect();
        let c = self
            .inner
            .run_cpu(&Self::integer_inputs(inputs), &ints)?
            .remove(0);
        let c = c.to_i64_vec().map_err(bad)?;
        let shape = &outputs[0].shape;
        let m = self.multipliers(req(inputs, 1)?, req(inputs, 4)?, req(inputs, 6)?)?;
        // Output column (matmul: last axis) or channel (conv: axis 1) of element i.
        let (inner, count) = if self.conv {
            (shape[2..].iter().product::<usize>(), shape[1])
        } else {
            (1, *shape.last().unwrap_or(&1))
        };
        if m.len() != 1 && m.len() != count {
            return Err(OpError::invalid(format!(
                "{}: b's scale has {} values, expected 1 or {count}",
                self.name(),
                m.len()
            )));
        }
        let bias = match opt(inputs, 8) {
            Some(b) => b.to_i64_vec().map_err(bad)?,
            None => vec![0; count],
        };
        if bias.len() != count {
            return Err(OpError::invalid(format!(
                "QLinearConv: the bias has {} values for {count} channels",
                bias.len()
            )));
        }
        let zy = opt(inputs, 7).map_or(Ok(0), |z| match z.to_i64_vec().map_err(bad)?[..] {
            [v] => Ok(v),
            _ => Err(OpError::invalid(format!(
                "{}: y_zero_point must hold one value",
                self.name()
            ))),
        })?;
        let out = outputs[0].dtype;
        let (lo, hi) = match out {
            DType::U8 => (0.0, 255.0),
            DType::I8 => (-128.0, 127.0),
            d => {
                return Err(OpError::unsupported(format!("{}: output {d}", self.name())));
            }
        };
        let y: Vec<u8> = c
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let k = (i / inner) % count;
                let mk = if m.len() == 1 { m[0] } else { m[k] };
                let d = (v + bias[k]) as f64 * mk + zy as f64;
                d.round_ties_even().clamp(lo, hi) as i64 as u8
            })
            .collect();
        let t = Tensor::from_bytes(out, shape.clone(), y.into()).map_err(bad)?;
        Ok(vec![t])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        self.gpu_conv(inputs, outputs, false, SplitK::Auto)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        self.gpu_conv(&types_of(inputs), outputs, false, tuning.conv_splitk)
    }

    fn gpu_preferred(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Vec<GpuKernel> {
        self.gpu_conv(&types_of(inputs), outputs, true, tuning.conv_splitk)
            .into_iter()
            .collect()
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        self.inner.flops(&Self::integer_inputs(inputs), outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{build, run};

    #[test]
    fn matmul_requantizes_by_hand() {
        // a = [[2, 4]] - 1, b = [[1], [3]] - 0: c = 1*1 + 3*3 = 10; x 0.5 x 0.25 / 0.125 = 10,
        // plus y's zero point 100.
        let op = build("QLinearMatMul", 10, &[]).unwrap();
        let a = Tensor::from_vec(vec![1, 2], vec![2u8, 4]);
        let b = Tensor::from_vec(vec![2, 1], vec![1u8, 3]);
        let f = Tensor::scalar;
        let y = run(
            &*op,
            &[
                Some(&a),
                Some(&f(0.5f32)),
                Some(&Tensor::scalar(1u8)),
                Some(&b),
                Some(&f(0.25f32)),
                Some(&Tensor::scalar(0u8)),
                Some(&f(0.125f32)),
                Some(&Tensor::scalar(100u8)),
            ],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), [110]);
        assert_eq!(y[0].shape(), [1, 1]);
    }
}
