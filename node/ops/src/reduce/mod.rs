//! The Reduce* family (Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare) and
//! ArgMax / ArgMin.
//!
//! Axes: an attribute until opset 13 for ReduceSum and opset 18 for the others, an optional
//! input afterwards; no axes means every axis, unless `noop_with_empty_axes` is set, when the
//! input passes through. Empty reductions give the identity of the operation: 0 for sums, 1 for
//! the product, -inf (or the dtype's minimum) for Max, +inf for Min, -inf for the logs.

mod arg;
mod cpu;
mod gpu;
#[cfg(test)]
mod tests;

use super::numeric::resolve_axes;
use super::util::{opt, req};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("ReduceSum", |s| Reduce::build(s, Kind::Sum));
    r.add("ReduceMean", |s| Reduce::build(s, Kind::Mean));
    r.add("ReduceMax", |s| Reduce::build(s, Kind::Max));
    r.add("ReduceMin", |s| Reduce::build(s, Kind::Min));
    r.add("ReduceProd", |s| Reduce::build(s, Kind::Prod));
    r.add("ReduceL1", |s| Reduce::build(s, Kind::L1));
    r.add("ReduceL2", |s| Reduce::build(s, Kind::L2));
    r.add("ReduceLogSum", |s| Reduce::build(s, Kind::LogSum));
    r.add("ReduceLogSumExp", |s| Reduce::build(s, Kind::LogSumExp));
    r.add("ReduceSumSquare", |s| Reduce::build(s, Kind::SumSquare));
    arg::register(r);
}

/// Which reduction: the kinds are the shaders' `op` codes, from shaders/opcodes.toml.
pub use vkml_shaders::op::Reduce as Kind;

#[derive(Debug)]
pub struct Reduce {
    kind: Kind,
    /// `Some` while axes are an attribute (None there means all axes).
    attr_axes: Option<Option<Vec<i64>>>,
    keepdims: bool,
    noop_with_empty_axes: bool,
}

/// A reduction resolved against a concrete input shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub shape: Vec<usize>,
    /// Reduced axes, ascending; empty with `noop` means the identity.
    pub axes: Vec<usize>,
    pub out_shape: Vec<usize>,
}

impl Plan {
    pub fn kept(&self) -> Vec<usize> {
        (0..self.shape.len())
            .filter(|a| !self.axes.contains(a))
            .collect()
    }
}

const DTYPES: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::F64,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::I16,
    DType::I8,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

impl Reduce {
    fn build(spec: &NodeSpec<'_>, kind: Kind) -> Result<Box<dyn Op>, OpError> {
        let input_from = if kind == Kind::Sum { 13 } else { 18 };
        let attr_axes = if spec.opset < input_from {
            Some(spec.attrs.ints_opt("axes")?.map(<[i64]>::to_vec))
        } else {
            None
        };
        Ok(Box::new(Reduce {
            kind,
            attr_axes,
            keepdims: spec.attrs.int("keepdims", 1)? != 0,
            noop_with_empty_axes: spec.attrs.int("noop_with_empty_axes", 0)? != 0,
        }))
    }

    fn name(&self) -> String {
        format!("Reduce{:?}", self.kind)
    }

    /// `axes`: the axes input's value, when the op takes them as an input and it is present.
    fn plan(&self, shape: &[usize], axes_in: Option<&Tensor>) -> Result<Plan, OpError> {
        let rank = shape.len();
        let listed: Option<Vec<i64>> = match &self.attr_axes {
            Some(a) => a.clone(),
            None => match axes_in {
                Some(t) => Some(
                    t.to_i64_vec()
                        .map_err(|e| OpError::invalid(e.to_string()))?,
                ),
                None => None,
            },
        };
        let mut axes = match listed {
            Some(a) if !a.is_empty() => resolve_axes(&a, rank, &self.name())?,
            _ if self.noop_with_empty_axes && self.attr_axes.is_none() => {
                return Ok(Plan {
                    shape: shape.to_vec(),
                    axes: vec![],
                    out_shape: shape.to_vec(),
                });
            }
            _ => (0..rank).collect(),
        };
        axes.sort_unstable();
        let out_shape = (0..rank)
            .filter_map(|a| {
                if !axes.contains(&a) {
                    Some(shape[a])
                } else if self.keepdims {
                    Some(1)
                } else {
                    None
                }
            })
            .collect();
        Ok(Plan {
            shape: shape.to_vec(),
            axes,
            out_shape,
        })
    }

    fn axes_input<'a>(
        &self,
        inputs: &[Option<InferInput<'a>>],
    ) -> Result<Option<&'a Tensor>, OpError> {
        if self.attr_axes.is_some() {
            return Ok(None);
        }
        match opt(inputs, 1) {
            None => Ok(None),
            Some(i) => i.value.map(Some).ok_or(OpError::NeedsValue(1)),
        }
    }
}

impl Op for Reduce {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        super::util::expect_dtype(x, DTYPES, &format!("{}: input", self.name())).or_else(|e| {
            // Max and Min also take bools (opset 20).
            if x.dtype == DType::Bool && matches!(self.kind, Kind::Max | Kind::Min) {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        let plan = self.plan(&x.shape, self.axes_input(inputs)?)?;
        let out = ValueType::new(x.dtype, plan.out_shape.clone());
        Ok(vec![out])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let axes = if self.attr_axes.is_some() {
            None
        } else {
            opt(inputs, 1)
        };
        let plan = self.plan(x.shape(), axes)?;
        Ok(vec![cpu::reduce(self.kind, x, &plan)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let plan = if self.attr_axes.is_some() {
            self.plan(&x.shape, None).ok()?
        } else if self.keepdims {
            // Reduced axes are the ones that became 1 (reducing a 1 changes nothing).
            gpu::plan_from_keepdims(&x.shape, &outputs.first()?.shape)?
        } else {
            // Which axes went is ambiguous from the shapes alone: see `gpu_planned`.
            return None;
        };
        gpu::kernel(self.kind, x.dtype, &plan)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?.ty;
        let plan = self.plan(&x.shape, self.axes_input(inputs).ok()?).ok()?;
        if plan.out_shape != outputs.first()?.shape {
            return None;
        }
        gpu::kernel(self.kind, x.dtype, &plan)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |x| x.numel() as u64)
    }
}
