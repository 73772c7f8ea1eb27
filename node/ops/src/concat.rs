//! Concat: inputs joined along one axis. Seen as [outer, axis * inner] matrices, each input
//! contributes one contiguous block per outer row, so both kernels copy blocks of raw bytes.

use super::util::groups_1d;
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel};
use vkml_shaders::concat;

pub fn register(r: &mut Registry) {
    r.add("Concat", build);
}

#[derive(Debug)]
struct Concat {
    axis: i64,
    /// Opset 11 allows a negative axis.
    negative_ok: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let axis = match spec.attrs.int_opt("axis")? {
        Some(a) => a,
        // Concat-1 defaulted to axis 1; from opset 4 the attribute is required.
        None if spec.opset < 4 => 1,
        None => return Err(OpError::invalid("Concat needs its 'axis' attribute")),
    };
    Ok(Box::new(Concat {
        axis,
        negative_ok: spec.opset >= 11,
    }))
}

/// How the inputs fit together.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    dtype: DType,
    shape: Vec<usize>,
    axis: usize,
    /// Each input's extent along the axis, or `None` for an empty input left out (see below).
    parts: Vec<Option<usize>>,
}

impl Layout {
    fn outer(&self) -> usize {
        numel(&self.shape[..self.axis])
    }
    fn inner(&self) -> usize {
        numel(&self.shape[self.axis + 1..])
    }
}

impl Concat {
    fn layout(&self, inputs: &[Option<(DType, &[usize])>]) -> Result<Layout, OpError> {
        let present: Vec<(DType, &[usize])> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| t.ok_or_else(|| OpError::invalid(format!("input {i} is missing"))))
            .collect::<Result<_, _>>()?;
        let Some(&(dtype, _)) = present.first() else {
            return Err(OpError::invalid("Concat needs at least one input"));
        };
        if let Some((i, (d, _))) = present.iter().enumerate().find(|(_, (d, _))| *d != dtype) {
            return Err(OpError::invalid(format!(
                "input {i} is {d} but input 0 is {dtype}: Concat inputs share one type"
            )));
        }
        // The first non-empty input sets the shape; all empty, the first one does.
        let reference = present
            .iter()
            .map(|&(_, s)| s)
            .find(|s| numel(s) > 0)
            .unwrap_or(present[0].1);
        let rank = reference.len() as i64;
        if rank == 0 {
            return Err(OpError::invalid(
                "Concat of scalars: inputs need rank 1 or more",
            ));
        }
        if self.axis < -rank || self.axis >= rank || (self.axis < 0 && !self.negative_ok) {
            let range = if self.negative_ok {
                format!("[{}, {}]", -rank, rank - 1)
            } else {
                format!("[0, {}] before opset 11", rank - 1)
            };
            return Err(OpError::invalid(format!(
                "Concat axis {} is outside {range} for inputs of rank {rank}",
                self.axis
            )));
        }
        let axis = if self.axis < 0 {
            self.axis + rank
        } else {
            self.axis
        } as usize;
        let fits = |s: &[usize]| {
            s.len() == reference.len()
                && s.iter()
                    .zip(reference)
                    .enumerate()
                    .all(|(k, (a, b))| k == axis || a == b)
        };
        let mut total = 0;
        let parts = present
            .iter()
            .enumerate()
            .map(|(i, &(_, s))| {
                if fits(s) {
                    total = usize::saturating_add(total, s[axis]);
                    Ok(Some(s[axis]))
                } else if numel(s) == 0 {
                    // onnxruntime leaves out empty inputs whatever their shape (exporters emit
                    // e.g. a [0] tensor as the start of a growing list); so do we.
                    Ok(None)
                } else {
                    Err(OpError::invalid(format!(
                        "input {i} has shape {s:?}, which does not fit {reference:?} \
                         along axis {axis}"
                    )))
                }
            })
            .collect::<Result<_, _>>()?;
        let mut shape = reference.to_vec();
        shape[axis] = total;
        crate::size::check_shape(&shape, "Concat's output")?;
        Ok(Layout {
            dtype,
            shape,
            axis,
            parts,
        })
    }
}

impl Op for Concat {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types: Vec<_> = inputs
            .iter()
            .map(|i| i.map(|i| (i.ty.dtype, i.ty.shape.as_slice())))
            .collect();
        let l = self.layout(&types)?;
        Ok(vec![ValueType::new(l.dtype, l.shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<_> = inputs
            .iter()
            .map(|t| t.map(|t| (t.dtype(), t.shape())))
            .collect();
        let l = self.layout(&types)?;
        let row = l.inner() * l.dtype.size();
        let mut segments = Vec::new();
        for o in 0..l.outer() {
            for (t, part) in inputs.iter().zip(&l.parts) {
                if let (Some(t), Some(len)) = (t, part) {
                    let block = len * row;
                    segments.push(&t.bytes()[o * block..(o + 1) * block]);
                }
            }
        }
        let out = crate::window::par::concat_bytes(&segments);
        debug_assert_eq!(out.len(), numel(&l.shape) * l.dtype.size());
        let y = Tensor::from_bytes(l.dtype, l.shape, out.into())
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let types: Vec<_> = inputs
            .iter()
            .map(|t| t.map(|t| (t.dtype, t.shape.as_slice())))
            .collect();
        let l = self.layout(&types).ok()?;
        let Some(params) = gpu_params(&l) else {
            return remap_kernel(&l, inputs);
        };
        let dispatches = params
            .into_iter()
            .map(|(input, params)| {
                Dispatch::new(
                    concat::Variant::Main,
                    concat::Buffers {
                        x: BufRef::Input(input),
                        y: BufRef::Output(0),
                    },
                    params,
                    groups_1d(params.n as usize, 256),
                )
            })
            .collect();
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

/// The element-sized fallback for blocks that are not whole words: one remap per non-empty
/// input, walking it as [outer, len, inner] and writing at its offset in each output row.
fn remap_kernel(l: &Layout, inputs: &[Option<&ValueType>]) -> Option<GpuKernel> {
    let (outer, inner) = (l.outer(), l.inner());
    let total = l.shape[l.axis];
    let out_elems = numel(&l.shape);
    let mut offset = 0;
    let mut dispatches = Vec::new();
    for (i, part) in l.parts.iter().enumerate() {
        let Some(len) = *part else { continue };
        if len * outer * inner > 0 {
            let mut m = super::remap::Remap::new(&[outer, len, inner]);
            let in_strides = [len * inner, inner, 1];
            let out_strides = [total * inner, inner, 1];
            for (k, a) in m.axes.iter_mut().enumerate() {
                a.in_dim = a.out_dim;
                a.in_stride = in_strides[k];
                a.out_stride = out_strides[k];
                a.step = 1;
            }
            m.out_base = offset * inner;
            let n = inputs.get(i).copied().flatten()?.numel();
            dispatches.push(m.dispatch(
                l.dtype.size(),
                BufRef::Input(i),
                BufRef::Output(0),
                n,
                out_elems,
            )?);
        }
        offset += len;
    }
    Some(GpuKernel {
        scratch: Vec::new(),
        dispatches,
    })
}

/// One dispatch of `shaders/concat.comp` per non-empty input: (input index, [words to copy,
/// words per block, words per output row, the block's word offset in the row]). The kernel
/// moves 32-bit words, so every block must be whole words; otherwise there is no GPU kernel.
fn gpu_params(l: &Layout) -> Option<Vec<(usize, concat::Params)>> {
    let row = l.inner() * l.dtype.size();
    let out_row = u32::try_from(l.shape[l.axis] * row / 4).ok()?;
    // The shader's destination index spans the whole output.
    u32::try_from(l.outer() * out_row as usize).ok()?;
    let mut offset = 0u32;
    let mut out = Vec::new();
    for (i, part) in l.parts.iter().enumerate() {
        let Some(len) = part else { continue };
        let bytes = len * row;
        if !bytes.is_multiple_of(4) {
            return None;
        }
        let block = u32::try_from(bytes / 4).ok()?;
        let words = u32::try_from(l.outer() * bytes / 4).ok()?;
        if words > 0 {
            out.push((
                i,
                concat::Params {
                    n: words,
                    block,
                    out_row,
                    offset,
                },
            ));
        }
        offset += block;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
