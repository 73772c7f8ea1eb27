//! Min, Max, Sum, Mean: any number of inputs, broadcast together (numpy rules from opset 8;
//! before that the shapes must agree, which the same rule accepts).
//!
//! On the GPU: a chain of binary.comp dispatches into the output. The first broadcasts inputs 0
//! and 1 straight to the final shape, so every later dispatch reads the output at the index it
//! writes (in place, no race), combining it with the next input; Mean ends with a scale by 1/n.

use super::binary::{binary_dispatch, binary_params, variant_for, view};
use super::broadcast;
use crate::numeric::num::{FLOATS, NUMERIC, Num, dispatch_num};
use crate::tensor::{DType, Tensor};
use crate::util::{broadcast_shapes, expect_dtype};
use crate::{BufRef, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use vkml_shaders::op::Binary;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarKind {
    Min,
    Max,
    Sum,
    Mean,
}

impl VarKind {
    fn name(self) -> &'static str {
        match self {
            VarKind::Min => "Min",
            VarKind::Max => "Max",
            VarKind::Sum => "Sum",
            VarKind::Mean => "Mean",
        }
    }

    fn dtypes(self) -> &'static [DType] {
        match self {
            VarKind::Min | VarKind::Max => &NUMERIC,
            VarKind::Sum | VarKind::Mean => &FLOATS,
        }
    }

    fn code(self) -> u32 {
        match self {
            VarKind::Min => Binary::Min.code(),
            VarKind::Max => Binary::Max.code(),
            VarKind::Sum | VarKind::Mean => Binary::Add.code(),
        }
    }
}

#[derive(Debug)]
pub struct Variadic {
    kind: VarKind,
}

impl Variadic {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let kind = match spec.op_type {
            "Min" => VarKind::Min,
            "Max" => VarKind::Max,
            "Sum" => VarKind::Sum,
            "Mean" => VarKind::Mean,
            other => return Err(OpError::unsupported(format!("op {other}"))),
        };
        Ok(Box::new(Variadic { kind }))
    }
}

fn fold<T: Num>(k: VarKind, xs: &[&Tensor], out: &[usize]) -> Result<Tensor, OpError> {
    let f: fn(T, T) -> T = match k {
        VarKind::Min => T::min_nan,
        VarKind::Max => T::max_nan,
        VarKind::Sum | VarKind::Mean => T::add,
    };
    let mut acc: Vec<T> = view::<T>(xs[0])?.into_owned();
    let mut shape = xs[0].shape().to_vec();
    for x in &xs[1..] {
        let next = broadcast_shapes(&shape, x.shape())?;
        acc = broadcast::binary(&acc, &shape, &view::<T>(x)?, x.shape(), &next, f);
        shape = next;
    }
    if k == VarKind::Mean {
        let n = T::from_f64(xs.len() as f64);
        acc.iter_mut().for_each(|v| *v = v.div(n));
    }
    debug_assert_eq!(shape, out);
    Ok(Tensor::from_vec(out.to_vec(), acc))
}

impl Op for Variadic {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let name = self.kind.name();
        let tys: Vec<&ValueType> = inputs.iter().flatten().map(|i| i.ty).collect();
        let Some(first) = tys.first() else {
            return Err(OpError::invalid(format!(
                "{name}: needs at least one input"
            )));
        };
        expect_dtype(first, self.kind.dtypes(), &format!("{name}: input"))?;
        let mut out = first.shape.clone();
        for t in &tys[1..] {
            if t.dtype != first.dtype {
                return Err(OpError::invalid(format!(
                    "{name}: input types differ: {} and {}",
                    first.dtype, t.dtype
                )));
            }
            out = broadcast_shapes(&out, &t.shape)
                .map_err(|e| OpError::invalid(format!("{name}: {e}")))?;
        }
        Ok(vec![ValueType::new(first.dtype, out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let xs: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
        let out = &outputs
            .first()
            .ok_or_else(|| OpError::invalid("no output type given"))?
            .shape;
        let d = xs
            .first()
            .ok_or_else(|| OpError::invalid("needs at least one input"))?
            .dtype();
        let k = self.kind;
        let y = dispatch_num!(
            d,
            fold(k, &xs, out),
            Err(OpError::unsupported(format!(
                "{}: input of type {d}",
                k.name()
            )))
        )?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        // Omitted inputs are not expected here; refuse rather than renumber buffers.
        let tys: Vec<&ValueType> = inputs.iter().copied().collect::<Option<_>>()?;
        let out = &outputs.first()?.shape;
        let first = tys.first()?;
        let variant = variant_for(first.dtype, false)?;
        if !self.kind.dtypes().contains(&first.dtype) {
            return None;
        }
        let op = self.kind.code();
        let mut dispatches = Vec::new();
        if tys.len() == 1 {
            dispatches.extend(binary_dispatch(
                variant,
                [BufRef::Input(0), BufRef::Input(0)],
                Binary::Copy.code(),
                0.0,
                &first.shape,
                &first.shape,
                out,
            )?);
        } else {
            dispatches.extend(binary_dispatch(
                variant,
                [BufRef::Input(0), BufRef::Input(1)],
                op,
                0.0,
                &first.shape,
                &tys[1].shape,
                out,
            )?);
            for (i, t) in tys.iter().enumerate().skip(2) {
                dispatches.extend(binary_dispatch(
                    variant,
                    [BufRef::Output(0), BufRef::Input(i)],
                    op,
                    0.0,
                    out,
                    &t.shape,
                    out,
                )?);
            }
        }
        if self.kind == VarKind::Mean {
            dispatches.extend(binary_dispatch(
                variant,
                [BufRef::Output(0), BufRef::Output(0)],
                Binary::Scale.code(),
                1.0 / tys.len() as f32,
                out,
                out,
                out,
            )?);
        }
        // Guard the size limits binary_params checks, even for shapes no dispatch used.
        binary_params(out, out, out)?;
        Some(GpuKernel {
            scratch: vec![],
            dispatches,
        })
    }
}
