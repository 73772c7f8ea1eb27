//! Gather: rows of one axis picked by an index tensor. Viewing data as [outer, axis, inner],
//! output (o, j) is the inner block at row indices[j] of outer slice o; both kernels move those
//! blocks as raw bytes, so one kernel serves every dtype.

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel};
use vkml_shaders::{gather, gather_e};

pub fn register(r: &mut Registry) {
    r.add("Gather", build);
}

#[derive(Debug)]
pub(crate) struct Gather {
    /// Negative counts from the back, at every opset (Gather-1 already allowed it).
    axis: i64,
}

impl Gather {
    /// Gather along `axis`, for ops that are a gather under another name (ai.onnx.ml's
    /// ArrayFeatureExtractor).
    pub(crate) fn along(axis: i64) -> Gather {
        Gather { axis }
    }
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Gather {
        axis: spec.attrs.int("axis", 0)?,
    }))
}

/// Sizes of one gather.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    shape: Vec<usize>,
    axis: usize,
    outer: usize,
    /// Size of the gathered axis.
    rows: usize,
    /// Number of indices.
    picks: usize,
    inner: usize,
}

impl Gather {
    fn layout(&self, data: &[usize], indices: &ValueType) -> Result<Layout, OpError> {
        if !matches!(indices.dtype, DType::I32 | DType::I64) {
            return Err(OpError::invalid(format!(
                "Gather indices must be int32 or int64, found {}",
                indices.dtype
            )));
        }
        let r = data.len() as i64;
        if r == 0 {
            return Err(OpError::invalid(
                "Gather data must have rank 1 or more, found a scalar",
            ));
        }
        if self.axis < -r || self.axis >= r {
            return Err(OpError::invalid(format!(
                "Gather axis {} is outside [{}, {}] for data of shape {data:?}",
                self.axis,
                -r,
                r - 1
            )));
        }
        let axis = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        } as usize;
        let shape = [&data[..axis], &indices.shape[..], &data[axis + 1..]].concat();
        Ok(Layout {
            shape,
            axis,
            outer: numel(&data[..axis]),
            rows: data[axis],
            picks: numel(&indices.shape),
            inner: numel(&data[axis + 1..]),
        })
    }
}

/// The indices as rows of the gathered axis: negative ones count from the end; any outside
/// [-rows, rows - 1] is an error naming it.
fn rows(indices: &Tensor, l: &Layout) -> Result<Vec<usize>, OpError> {
    let values = indices
        .to_i64_vec()
        .map_err(|e| OpError::invalid(format!("Gather indices: {e}")))?;
    let s = l.rows as i64;
    values
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let row = if v < 0 { v + s } else { v };
            if (0..s).contains(&row) {
                Ok(row as usize)
            } else {
                Err(out_of_range(v, k as u64, l.axis, l.rows as u64))
            }
        })
        .collect()
}

/// Index `v`, element `k` of the indices, outside axis `axis` of `rows` rows: the CPU kernel's
/// error, and the GPU kernel's when it meets one computed during the run.
fn out_of_range(v: i64, k: u64, axis: usize, rows: u64) -> OpError {
    let s = rows as i64;
    OpError::invalid(format!(
        "Gather index {v} (element {k} of the indices) is out of range for axis {axis} of size \
         {rows}: indices must lie in [{}, {}]",
        -s,
        s - 1
    ))
}

impl Op for Gather {
    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let (data, indices) = (req(inputs, 0)?, req(inputs, 1)?);
        if let Some(t) = indices.value {
            rows(t, &self.layout(&data.ty.shape, indices.ty)?)?;
        }
        Ok(())
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let data = req(inputs, 0)?;
        let indices = req(inputs, 1)?;
        let l = self.layout(&data.ty.shape, indices.ty)?;
        // Indices known while planning are checked now, so a bad model fails at load.
        if let Some(t) = indices.value {
            rows(t, &l)?;
        }
        Ok(vec![ValueType::new(data.ty.dtype, l.shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let data = req(inputs, 0)?;
        let indices = req(inputs, 1)?;
        let l = self.layout(data.shape(), &ValueType::of(indices))?;
        let rows = rows(indices, &l)?;
        let block = l.inner * data.dtype().size();
        let src = data.bytes();
        let mut out = Vec::with_capacity(l.outer * l.picks * block);
        for o in 0..l.outer {
            for &row in &rows {
                let at = (o * l.rows + row) * block;
                out.extend_from_slice(&src[at..at + block]);
            }
        }
        let y = Tensor::from_bytes(data.dtype(), l.shape, out.into())
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let data = inputs.first().copied().flatten()?;
        let indices = inputs.get(1).copied().flatten()?;
        let l = self.layout(&data.shape, indices).ok()?;
        let Some(params) = gpu_params(&l, data, indices.dtype) else {
            return element_kernel(&l, data, indices.dtype);
        };
        let dispatches = if params.n == 0 {
            Vec::new()
        } else {
            vec![Dispatch::new(
                gather::Variant::Main,
                gather::Buffers {
                    x: BufRef::Input(0),
                    indices: BufRef::Input(1),
                    y: BufRef::Output(0),
                    fault: BufRef::Fault,
                },
                params,
                groups_1d(params.n as usize, 256),
            )]
        };
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }

    fn index_fault(&self, inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        let rank = inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |d| d.shape.len() as i64);
        let axis = if self.axis < 0 {
            self.axis + rank
        } else {
            self.axis
        };
        out_of_range(f.index, f.element, axis.max(0) as usize, f.dim)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

/// `shaders/gather_e.comp`, one element per invocation: for tensors that are not whole words.
fn element_kernel(l: &Layout, data: &ValueType, index: DType) -> Option<GpuKernel> {
    let n = l.outer * l.picks * l.inner;
    let dispatches = if n == 0 {
        Vec::new()
    } else {
        if l.rows == 0 {
            return None;
        }
        for v in [n, data.numel(), l.rows] {
            i32::try_from(v).ok()?;
        }
        vec![Dispatch::new(
            by_width!(data.dtype.size(), gather_e::Variant)?,
            gather_e::Buffers {
                x: BufRef::Input(0),
                indices: BufRef::Input(1),
                y: BufRef::Output(0),
                fault: BufRef::Fault,
            },
            gather_e::Params {
                n: n as u32,
                inner: l.inner as u32,
                picks: l.picks as u32,
                rows: l.rows as u32,
                idx_words: super::gather_nd::index_words(index)?,
            },
            groups_1d(n, 256),
        )]
    };
    Some(GpuKernel {
        scratch: Vec::new(),
        dispatches,
    })
}

/// The parameters of `shaders/gather.comp`: output words, element bytes, inner (elements),
/// picks, rows, index words (1 for int32, 2 for int64). When the inner block is a
/// whole number of words it is the element (inner = 1); otherwise 1- and 2-byte elements are
/// packed into words, which needs both data and output to be whole words.
fn gpu_params(l: &Layout, data: &ValueType, index: DType) -> Option<gather::Params> {
    let es = data.dtype.size();
    let block = l.inner * es;
    let out_bytes = l.outer * l.picks * block;
    let (eb, inner) = if block.is_multiple_of(4) && block > 0 {
        (block, 1)
    } else if es < 4 && data.bytes().is_multiple_of(4) && out_bytes.is_multiple_of(4) {
        (es, l.inner)
    } else if out_bytes == 0 {
        (4, 1)
    } else {
        return None;
    };
    // The shader's arithmetic is 32-bit, and rows are compared as signed.
    u32::try_from(data.bytes() / eb).ok()?;
    u32::try_from(out_bytes / eb).ok()?;
    i32::try_from(l.rows).ok()?;
    let idx_words = if index == DType::I64 { 2 } else { 1 };
    let words = u32::try_from(out_bytes / 4).ok()?;
    Some(gather::Params {
        n: words,
        eb: eb as u32,
        inner: u32::try_from(inner).ok()?,
        picks: u32::try_from(l.picks).ok()?,
        rows: l.rows as u32,
        idx_words,
    })
}

#[cfg(test)]
mod tests;
