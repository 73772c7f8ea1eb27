//! MatMulInteger and ConvInteger (opset 10), on the CPU: subtract the zero points, then run
//! MatMul on int64 (exact) and Conv on f64 (exact: |products| < 2^16 and any realistic sum
//! stays far below 2^53), and narrow to int32. Padding after the subtraction is zero, which
//! is what padding the input with its zero point means.

use super::conv::{Conv, ConvShape, q8};
use super::numeric::from_i64;
use super::util::{opt, req};
use super::{
    Attrs, BufRef, GpuKernel, InferInput, KernelTuning, NodeSpec, Op, OpError, Registry, ValueType,
};
use crate::splitk::SplitK;
use crate::tensor::{DType, Tensor};
use crate::util::types_of;

pub fn register(r: &mut Registry) {
    r.add("MatMulInteger", |s| build(s, "MatMul"));
    r.add("ConvInteger", |s| build(s, "Conv"));
}

pub(crate) fn build(spec: &NodeSpec<'_>, inner: &'static str) -> Result<Box<dyn Op>, OpError> {
    let attrs: &Attrs = spec.attrs;
    let inner_spec = NodeSpec {
        name: spec.name,
        op_type: inner,
        attrs,
        opset: 13,
        num_inputs: 2,
        num_outputs: 1,
    };
    let op = super::build(&inner_spec)?;
    let geometry = (inner == "Conv")
        .then(|| super::conv::parse(&inner_spec))
        .transpose()?;
    Ok(Box::new(Integer {
        inner: op,
        conv: inner == "Conv",
        geometry,
    }))
}

#[derive(Debug)]
struct Integer {
    inner: Box<dyn Op>,
    conv: bool,
    /// ConvInteger's window, for the GPU kernel.
    geometry: Option<Conv>,
}

/// A product the GPU kernel takes: A of rank 2 or more (its leading axes are rows) by a
/// matrix B; the geometry as conv_q8.comp's, and N.
pub(crate) fn matmul_geometry(a: &ValueType, b: &ValueType) -> Option<(ConvShape, usize)> {
    let (&k, rows) = a.shape.split_last()?;
    if rows.is_empty() || b.shape.len() != 2 || b.shape[0] != k {
        return None;
    }
    let n = b.shape[1];
    Some((q8::matmul_shape(rows.iter().product(), k, n), n))
}

/// Whether `t` is an 8-bit integer type, and which: `Some(signed)`.
pub(crate) fn int8_signed(t: DType) -> Option<bool> {
    match t {
        DType::U8 => Some(false),
        DType::I8 => Some(true),
        _ => None,
    }
}

/// A zero point or scale input `i` as the GPU kernels take it: absent, or of type `dtype`
/// with one value, or (`per` > 1) one per output channel: `Some(Some((buffer, per
/// channel)))`; `None` when the kernels cannot take it.
pub(crate) fn per_channel_input(
    inputs: &[Option<&ValueType>],
    i: usize,
    dtype: DType,
    per: usize,
) -> Option<Option<(BufRef, bool)>> {
    let Some(t) = opt(inputs, i) else {
        return Some(None);
    };
    let n = t.numel();
    (t.dtype == dtype && (n == 1 || (n == per && t.shape.len() == 1)))
        .then_some(Some((BufRef::Input(i), n != 1)))
}

impl Integer {
    /// The op on the GPU (conv/q8.rs), `dot` picking the dot-product variant.
    fn gpu_int(&self, inputs: &[Option<&ValueType>], dot: bool, mode: SplitK) -> Option<GpuKernel> {
        if self.conv {
            return self.gpu_conv(inputs, dot, mode);
        }
        let (a, b) = (opt(inputs, 0)?, opt(inputs, 1)?);
        let (s, _) = matmul_geometry(a, b)?;
        let io = q8::Io {
            x_signed: int8_signed(a.dtype)?,
            w_signed: int8_signed(b.dtype)?,
            x: BufRef::Input(0),
            w: BufRef::Input(1),
            bias: None,
            x_zero: per_channel_input(inputs, 2, a.dtype, 1)?.map(|z| z.0),
            w_zero: per_channel_input(inputs, 3, b.dtype, s.oc)?,
            requant: None,
        };
        q8::kernel(&s, &io, (dot, q8::Layout::MatMul), mode)
    }

    fn gpu_conv(
        &self,
        inputs: &[Option<&ValueType>],
        dot: bool,
        mode: SplitK,
    ) -> Option<GpuKernel> {
        let (x, w) = (opt(inputs, 0)?, opt(inputs, 1)?);
        let s = self
            .geometry
            .as_ref()?
            .shape(&x.shape, &w.shape, None)
            .ok()?;
        let x_zero = per_channel_input(inputs, 2, x.dtype, 1)?.map(|z| z.0);
        let w_zero = per_channel_input(inputs, 3, w.dtype, s.oc)?;
        let io = q8::Io {
            x_signed: int8_signed(x.dtype)?,
            w_signed: int8_signed(w.dtype)?,
            x: BufRef::Input(0),
            w: BufRef::Input(1),
            bias: None,
            x_zero,
            w_zero,
            requant: None,
        };
        q8::kernel(&s, &io, (dot, q8::Layout::Conv), mode)
    }
}

impl Integer {
    fn name(&self) -> &'static str {
        if self.conv {
            "ConvInteger"
        } else {
            "MatMulInteger"
        }
    }

    /// The wide type the inner op computes in.
    fn wide(&self) -> DType {
        if self.conv { DType::F64 } else { DType::I64 }
    }

    fn check(&self, t: &ValueType, what: &str) -> Result<(), OpError> {
        if matches!(t.dtype, DType::U8 | DType::I8) {
            Ok(())
        } else {
            Err(OpError::invalid(format!(
                "{}: {what} must be uint8 or int8, found {}",
                self.name(),
                t.dtype
            )))
        }
    }

    /// `x - zp`, with `zp` a scalar, or one value per index of `axis` of `x`.
    fn shifted(&self, x: &Tensor, zp: Option<&Tensor>, axis: usize) -> Result<Tensor, OpError> {
        let bad = |e: crate::tensor::TensorError| OpError::invalid(format!("{}: {e}", self.name()));
        let v = x.to_i64_vec().map_err(bad)?;
        let z = match zp {
            Some(z) => z.to_i64_vec().map_err(bad)?,
            None => vec![0],
        };
        let shape = x.shape();
        let inner: usize = shape[axis + 1..].iter().product();
        let len = shape[axis];
        if z.len() != 1 && z.len() != len {
            return Err(OpError::invalid(format!(
                "{}: a zero point has {} values, expected 1 or {len}",
                self.name(),
                z.len()
            )));
        }
        let out: Vec<i64> = v
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                x - if z.len() == 1 {
                    z[0]
                } else {
                    z[(i / inner.max(1)) % len]
                }
            })
            .collect();
        from_i64(self.wide(), shape.to_vec(), out)
    }

    /// The zero-point axis of input 0 and input 1.
    fn axes(&self, a: &[usize], b: &[usize]) -> (usize, usize) {
        if self.conv {
            // x's zero point is a scalar; w's may be per output channel (axis 0).
            (0, 0)
        } else {
            // a's per row (axis -2, when a is a matrix), b's per column (axis -1).
            (a.len().saturating_sub(2), b.len().saturating_sub(1))
        }
    }
}

impl Op for Integer {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty);
        self.check(a, "input 0")?;
        self.check(b, "input 1")?;
        let wa = ValueType::new(self.wide(), a.shape.clone());
        let wb = ValueType::new(self.wide(), b.shape.clone());
        let ins = [
            Some(InferInput {
                ty: &wa,
                value: None,
            }),
            Some(InferInput {
                ty: &wb,
                value: None,
            }),
        ];
        let out = self.inner.infer(&ins)?;
        Ok(out
            .into_iter()
            .map(|o| ValueType::new(DType::I32, o.shape))
            .collect())
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
        let (ax, bx) = self.axes(a.shape(), b.shape());
        if self.conv && opt(inputs, 2).is_some_and(|z| z.numel() != 1) {
            return Err(OpError::invalid(
                "ConvInteger: x_zero_point must be a scalar",
            ));
        }
        let wa = if a.rank() == 0 {
            a.clone()
        } else {
            self.shifted(a, opt(inputs, 2), ax)?
        };
        let wb = if b.rank() == 0 {
            b.clone()
        } else {
            self.shifted(b, opt(inputs, 3), bx)?
        };
        let wide_out: Vec<ValueType> = outputs
            .iter()
            .map(|o| ValueType::new(self.wide(), o.shape.clone()))
            .collect();
        let y = self
            .inner
            .run_cpu(&[Some(&wa), Some(&wb)], &wide_out)?
            .remove(0);
        let v: Vec<i64> = match y.dtype() {
            DType::F64 => y
                .to_f64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))?
                .into_iter()
                .map(|v| v.round() as i64)
                .collect(),
            _ => y
                .to_i64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))?,
        };
        Ok(vec![from_i64(DType::I32, y.shape().to_vec(), v)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        self.gpu_int(inputs, false, SplitK::Auto)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        self.gpu_int(&types_of(inputs), false, tuning.conv_splitk)
    }

    fn gpu_preferred(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Vec<GpuKernel> {
        self.gpu_int(&types_of(inputs), true, tuning.conv_splitk)
            .into_iter()
            .collect()
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        self.inner.flops(inputs, outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::run;

    fn node(op_type: &str, attrs: &[(&str, crate::AttrValue)]) -> Box<dyn Op> {
        let attrs = Attrs(
            attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        );
        crate::build(&NodeSpec {
            name: "t",
            op_type,
            attrs: &attrs,
            opset: 10,
            num_inputs: 4,
            num_outputs: 1,
        })
        .unwrap()
    }

    #[test]
    fn matmul_integer_by_hand() {
        // (A - [1, 2] per row) x (B - 3): [[11-1, 12-1], [13-2, 14-2]] x [[4, 5], [6, 7]] - 3.
        let a = Tensor::from_vec(vec![2, 2], vec![11u8, 12, 13, 14]);
        let b = Tensor::from_vec(vec![2, 2], vec![7u8, 8, 9, 10]);
        let az = Tensor::from_vec(vec![2], vec![1u8, 2]);
        let bz = Tensor::scalar(3u8);
        let y = run(
            &*node("MatMulInteger", &[]),
            &[Some(&a), Some(&b), Some(&az), Some(&bz)],
        )
        .unwrap();
        assert_eq!(y[0].dtype(), DType::I32);
        // [10, 11] . columns [4, 6], [5, 7]: 40 + 66, 50 + 77; [11, 12]: 44 + 72, 55 + 84.
        assert_eq!(y[0].to_i64_vec().unwrap(), vec![106, 127, 116, 139]);
        let i = Tensor::from_vec(vec![1, 2], vec![-128i8, 127]);
        let y = run(
            &*node("MatMulInteger", &[]),
            &[
                Some(&i),
                Some(&Tensor::from_vec(vec![2, 1], vec![-128i8, 127])),
            ],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), vec![128 * 128 + 127 * 127]);
    }

    #[test]
    fn conv_integer_by_hand() {
        // x - 1 = [1, 2, 3], w - 0 = [1, 1], padded by one on the left: [1, 3, 5].
        let x = Tensor::from_vec(vec![1, 1, 3], vec![2u8, 3, 4]);
        let w = Tensor::from_vec(vec![1, 1, 2], vec![1u8, 1]);
        let xz = Tensor::scalar(1u8);
        let op = node(
            "ConvInteger",
            &[("pads", crate::AttrValue::Ints(vec![1, 0]))],
        );
        let y = run(&*op, &[Some(&x), Some(&w), Some(&xz)]).unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), vec![1, 3, 5]);
    }
}
