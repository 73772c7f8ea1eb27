//! Squeeze and Unsqueeze: views that drop or insert axes of size 1. Their axes are an attribute
//! before opset 13 and an input from then on.

use super::int_list;
use super::view::{copy_kernel, reshape_to};
use crate::tensor::Tensor;
use crate::util::{opt, req};
use crate::{GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};

#[derive(Debug, Clone, PartialEq)]
enum Axes {
    /// From the `axes` attribute (before opset 13); `None` when it is absent.
    Attr(Option<Vec<i64>>),
    /// From input 1 (opset 13 on).
    Input,
}

impl Axes {
    fn from_spec(spec: &NodeSpec<'_>) -> Result<Axes, OpError> {
        if spec.opset >= 13 {
            if spec.attrs.has("axes") {
                return Err(OpError::invalid(format!(
                    "{} from opset 13 takes its axes as input 1, not as an attribute",
                    spec.op_type
                )));
            }
            Ok(Axes::Input)
        } else {
            Ok(Axes::Attr(
                spec.attrs.ints_opt("axes")?.map(<[i64]>::to_vec),
            ))
        }
    }

    /// The axes as listed, from the attribute or the (known) input tensor.
    fn list(&self, input: Option<&Tensor>, op: &str) -> Result<Option<Vec<i64>>, OpError> {
        match self {
            Axes::Attr(a) => Ok(a.clone()),
            Axes::Input => input
                .map(|t| int_list(t, &format!("{op}'s axes")))
                .transpose(),
        }
    }
}

/// Normalises `axes` against `rank`; negative values need opset 11.
fn normalise(
    axes: &[i64],
    rank: usize,
    negative_ok: bool,
    op: &str,
) -> Result<Vec<usize>, OpError> {
    let r = rank as i64;
    axes.iter()
        .map(|&a| {
            if a < 0 && !negative_ok {
                return Err(OpError::invalid(format!(
                    "{op} axis {a} is negative, which needs opset 11 or later"
                )));
            }
            if a < -r || a >= r {
                return Err(OpError::invalid(format!(
                    "{op} axis {a} is out of range for rank {rank}"
                )));
            }
            Ok(if a < 0 { a + r } else { a } as usize)
        })
        .collect()
}

#[derive(Debug)]
pub(super) struct Squeeze {
    axes: Axes,
    negative_ok: bool,
}

pub(super) fn build_squeeze(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Squeeze {
        axes: Axes::from_spec(spec)?,
        negative_ok: spec.opset >= 11,
    }))
}

impl Squeeze {
    fn shape_for(&self, input: &[usize], axes: Option<&Tensor>) -> Result<Vec<usize>, OpError> {
        let axes = self.axes.list(axes, "Squeeze")?;
        // An empty axes list squeezes every unit axis, as onnxruntime does (the spec only says
        // what an absent list means; an empty one removing nothing is the other reading).
        let Some(axes) = axes.filter(|a| !a.is_empty()) else {
            return Ok(input.iter().copied().filter(|&d| d != 1).collect());
        };
        // Repeats are harmless (the axis goes once) and onnxruntime accepts them.
        let axes = normalise(&axes, input.len(), self.negative_ok, "Squeeze")?;
        for &a in &axes {
            if input[a] != 1 {
                return Err(OpError::invalid(format!(
                    "Squeeze axis {a} has size {}, not 1 (input shape {input:?})",
                    input[a]
                )));
            }
        }
        Ok(input
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect())
    }
}

impl Op for Squeeze {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?;
        let axes = match (&self.axes, opt(inputs, 1)) {
            (Axes::Input, Some(a)) => Some(a.value.ok_or(OpError::NeedsValue(1))?),
            _ => None,
        };
        Ok(vec![ValueType::new(
            x.ty.dtype,
            self.shape_for(&x.ty.shape, axes)?,
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let shape = self.shape_for(x.shape(), opt(inputs, 1))?;
        reshape_to(inputs, &[ValueType::new(x.dtype(), shape)])
    }

    fn gpu(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        copy_kernel(outputs.first()?)
    }

    fn is_view(&self) -> bool {
        true
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[derive(Debug)]
pub(super) struct Unsqueeze {
    axes: Axes,
    negative_ok: bool,
}

pub(super) fn build_unsqueeze(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let axes = Axes::from_spec(spec)?;
    if axes == Axes::Attr(None) {
        return Err(OpError::invalid(
            "Unsqueeze before opset 13 needs its 'axes' attribute",
        ));
    }
    Ok(Box::new(Unsqueeze {
        axes,
        negative_ok: spec.opset >= 11,
    }))
}

impl Unsqueeze {
    fn shape_for(&self, input: &[usize], axes: Option<&Tensor>) -> Result<Vec<usize>, OpError> {
        let axes = self
            .axes
            .list(axes, "Unsqueeze")?
            .ok_or_else(|| OpError::invalid("input 1 (axes) is required"))?;
        // Axes index the output, whose rank counts the inserted axes too.
        let rank = input.len() + axes.len();
        let mut axes = normalise(&axes, rank, self.negative_ok, "Unsqueeze")?;
        axes.sort_unstable();
        if let Some(w) = axes.windows(2).find(|w| w[0] == w[1]) {
            return Err(OpError::invalid(format!(
                "Unsqueeze axes name output axis {} more than once",
                w[0]
            )));
        }
        let mut dims = input.iter().copied();
        Ok((0..rank)
            .map(|i| {
                if axes.binary_search(&i).is_ok() {
                    1
                } else {
                    // Counts match: `rank - axes.len()` positions take input dims.
                    dims.next().unwrap_or(1)
                }
            })
            .collect())
    }
}

impl Op for Unsqueeze {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?;
        let axes = match self.axes {
            Axes::Input => Some(crate::util::const_input(inputs, 1)?),
            Axes::Attr(_) => None,
        };
        Ok(vec![ValueType::new(
            x.ty.dtype,
            self.shape_for(&x.ty.shape, axes)?,
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let shape = self.shape_for(x.shape(), opt(inputs, 1))?;
        reshape_to(inputs, &[ValueType::new(x.dtype(), shape)])
    }

    fn gpu(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        copy_kernel(outputs.first()?)
    }

    fn is_view(&self) -> bool {
        true
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}
