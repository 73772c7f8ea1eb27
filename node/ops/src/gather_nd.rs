//! GatherElements and GatherND: gathers whose indices name single elements (GatherElements:
//! one axis coordinate per output element) or slices (GatherND: leading coordinates of the
//! data, per tuple of the indices' last axis). Both move elements by size.

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel, strides};
use vkml_shaders::{gather_elements, gather_nd};

pub fn register(r: &mut Registry) {
    r.add("GatherElements", build_elements);
    r.add("GatherND", build_nd);
}

/// Words per index in the shaders' index.glsl: 1 for int32, 2 for int64.
pub(crate) fn index_words(d: DType) -> Option<u32> {
    match d {
        DType::I32 => Some(1),
        DType::I64 => Some(2),
        _ => None,
    }
}

fn check_index_type(t: &ValueType, op: &str) -> Result<(), OpError> {
    if index_words(t.dtype).is_none() {
        return Err(OpError::invalid(format!(
            "{op} indices must be int32 or int64, found {}",
            t.dtype
        )));
    }
    Ok(())
}

/// An index into an axis of `dim` elements, negative counting from the back, checked.
pub(crate) fn checked_index(v: i64, dim: usize, op: &str) -> Result<usize, OpError> {
    let d = dim as i64;
    let i = if v < 0 { v + d } else { v };
    if (0..d).contains(&i) {
        Ok(i as usize)
    } else {
        Err(out_of_range(v, dim as u64, op))
    }
}

/// [`checked_index`]'s error, also the GPU kernel's for an index it met during the run.
pub(crate) fn out_of_range(v: i64, dim: u64, op: &str) -> OpError {
    OpError::invalid(format!(
        "{op} index {v} is out of range for an axis of size {dim}"
    ))
}

fn ints(t: &Tensor, op: &str) -> Result<Vec<i64>, OpError> {
    t.to_i64_vec()
        .map_err(|e| OpError::invalid(format!("{op} indices: {e}")))
}

fn out_tensor(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Tensor, OpError> {
    Tensor::from_bytes(dtype, shape, data.into()).map_err(|e| OpError::invalid(e.to_string()))
}

#[derive(Debug)]
struct GatherElements {
    axis: i64,
}

fn build_elements(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(GatherElements {
        axis: spec.attrs.int("axis", 0)?,
    }))
}

impl GatherElements {
    fn check(&self, data: &[usize], indices: &ValueType) -> Result<usize, OpError> {
        check_index_type(indices, "GatherElements")?;
        if data.len() != indices.shape.len() || data.is_empty() {
            return Err(OpError::invalid(format!(
                "GatherElements data {data:?} and indices {:?} need the same rank (1 or more)",
                indices.shape
            )));
        }
        super::util::axis(self.axis, data.len())
    }
}

impl Op for GatherElements {
    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        out_of_range(f.index, f.dim, "GatherElements")
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let (data, idx) = (req(inputs, 0)?.ty, req(inputs, 1)?);
        if let Some(t) = idx.value {
            let axis = self.check(&data.shape, idx.ty)?;
            for v in ints(t, "GatherElements")? {
                checked_index(v, data.shape[axis], "GatherElements")?;
            }
        }
        Ok(())
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let data = req(inputs, 0)?.ty;
        let idx = req(inputs, 1)?.ty;
        self.check(&data.shape, idx)?;
        Ok(vec![ValueType::new(data.dtype, idx.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let data = req(inputs, 0)?;
        let idx = req(inputs, 1)?;
        let axis = self.check(data.shape(), &ValueType::of(idx))?;
        let es = data.dtype().size();
        let ds = strides(data.shape());
        let ishape = idx.shape();
        let vals = ints(idx, "GatherElements")?;
        let mut out = vec![0u8; vals.len() * es];
        let mut pos = vec![0usize; ishape.len()];
        for (e, &v) in vals.iter().enumerate() {
            let mut src = 0;
            for (k, &p) in pos.iter().enumerate() {
                let c = if k == axis {
                    checked_index(v, data.shape()[axis], "GatherElements")?
                } else {
                    if p >= data.shape()[k] {
                        return Err(OpError::invalid(format!(
                            "GatherElements indices {ishape:?} are larger than the data {:?} \
                             on axis {k}",
                            data.shape()
                        )));
                    }
                    p
                };
                src += c * ds[k];
            }
            out[e * es..(e + 1) * es].copy_from_slice(&data.bytes()[src * es..(src + 1) * es]);
            for k in (0..pos.len()).rev() {
                pos[k] += 1;
                if pos[k] < ishape[k] {
                    break;
                }
                pos[k] = 0;
            }
        }
        Ok(vec![out_tensor(data.dtype(), ishape.to_vec(), out)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let data = inputs.first().copied().flatten()?;
        let idx = inputs.get(1).copied().flatten()?;
        let axis = self.check(&data.shape, idx).ok()?;
        let n = idx.numel();
        if n == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        if data.shape.iter().zip(&idx.shape).any(|(d, i)| i > d) || data.shape[axis] == 0 {
            return None;
        }
        for v in [n, data.numel()] {
            i32::try_from(v).ok()?;
        }
        let ds = strides(&data.shape);
        let table: Vec<u32> = idx
            .shape
            .iter()
            .zip(&ds)
            .flat_map(|(&d, &s)| [d as u32, s as u32])
            .collect();
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                by_width!(data.dtype.size(), gather_elements::Variant)?,
                gather_elements::Buffers {
                    x: BufRef::Input(0),
                    indices: BufRef::Input(1),
                    t: BufRef::Table(table),
                    y: BufRef::Output(0),
                    fault: BufRef::Fault,
                },
                gather_elements::Params {
                    n: n as u32,
                    rank: idx.shape.len() as u32,
                    axis: axis as u32,
                    axis_dim: data.shape[axis] as u32,
                    idx_words: index_words(idx.dtype)?,
                },
                groups_1d(n, 256),
            )],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[derive(Debug)]
struct GatherNd {
    batch_dims: usize,
}

fn build_nd(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    super::shape_ops::attr_since(spec, "batch_dims", 12)?;
    let b = spec.attrs.int("batch_dims", 0)?;
    Ok(Box::new(GatherNd {
        batch_dims: usize::try_from(b)
            .map_err(|_| OpError::invalid(format!("GatherND batch_dims {b} is negative")))?,
    }))
}

/// Sizes of one GatherND.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NdLayout {
    pub shape: Vec<usize>,
    /// Entries per index tuple.
    pub k: usize,
    /// Index tuples per batch.
    pub rows: usize,
    pub batches: usize,
    /// Elements per gathered slice.
    pub slice: usize,
    pub batch_stride: usize,
}

impl GatherNd {
    fn layout(&self, data: &[usize], idx: &ValueType) -> Result<NdLayout, OpError> {
        check_index_type(idx, "GatherND")?;
        let b = self.batch_dims;
        let is = &idx.shape;
        let fail = |why: &str| {
            OpError::invalid(format!(
                "GatherND data {data:?}, indices {is:?}, batch_dims {b}: {why}"
            ))
        };
        let Some(&k) = is.last() else {
            return Err(fail("indices must have rank 1 or more"));
        };
        if b >= is.len() || b >= data.len() {
            return Err(fail("batch_dims must be less than both ranks"));
        }
        if data[..b] != is[..b] {
            return Err(fail("the batch dimensions differ"));
        }
        if k + b > data.len() {
            return Err(fail("index tuples are longer than the data's rank"));
        }
        let shape = [&is[..is.len() - 1], &data[b + k..]].concat();
        Ok(NdLayout {
            shape,
            k,
            rows: numel(&is[b..is.len() - 1]),
            batches: numel(&data[..b]),
            slice: numel(&data[b + k..]),
            batch_stride: numel(&data[b..]),
        })
    }
}

impl Op for GatherNd {
    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        out_of_range(f.index, f.dim, "GatherND")
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let (data, idx) = (req(inputs, 0)?.ty, req(inputs, 1)?);
        if let Some(t) = idx.value {
            let k = self.layout(&data.shape, idx.ty)?.k;
            let dims = &data.shape[self.batch_dims..self.batch_dims + k];
            for (e, v) in ints(t, "GatherND")?.into_iter().enumerate() {
                checked_index(v, dims[e % k.max(1)], "GatherND")?;
            }
        }
        Ok(())
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let data = req(inputs, 0)?.ty;
        let l = self.layout(&data.shape, req(inputs, 1)?.ty)?;
        Ok(vec![ValueType::new(data.dtype, l.shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let data = req(inputs, 0)?;
        let idx = req(inputs, 1)?;
        let l = self.layout(data.shape(), &ValueType::of(idx))?;
        let es = data.dtype().size();
        let b = self.batch_dims;
        let dims = &data.shape()[b..b + l.k];
        let st = strides(&data.shape()[b..]);
        let vals = ints(idx, "GatherND")?;
        let block = l.slice * es;
        let mut out = Vec::with_capacity(numel(&l.shape) * es);
        for t in 0..l.batches * l.rows {
            let mut src = (t / l.rows.max(1)) * l.batch_stride;
            for j in 0..l.k {
                src += checked_index(vals[t * l.k + j], dims[j], "GatherND")? * st[j];
            }
            out.extend_from_slice(&data.bytes()[src * es..src * es + block]);
        }
        Ok(vec![out_tensor(data.dtype(), l.shape, out)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let data = inputs.first().copied().flatten()?;
        let idx = inputs.get(1).copied().flatten()?;
        let l = self.layout(&data.shape, idx).ok()?;
        let n = numel(&l.shape);
        if n == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        for v in [n, data.numel(), idx.numel()] {
            i32::try_from(v).ok()?;
        }
        let b = self.batch_dims;
        let st = strides(&data.shape[b..]);
        let mut table: Vec<u32> = (0..l.k)
            .flat_map(|j| [data.shape[b + j] as u32, st[j] as u32])
            .collect();
        if table.is_empty() {
            table.push(0);
        }
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                by_width!(data.dtype.size(), gather_nd::Variant)?,
                gather_nd::Buffers {
                    x: BufRef::Input(0),
                    indices: BufRef::Input(1),
                    t: BufRef::Table(table),
                    y: BufRef::Output(0),
                    fault: BufRef::Fault,
                },
                gather_nd::Params {
                    n: n as u32,
                    k: l.k as u32,
                    slice: l.slice as u32,
                    rows: l.rows as u32,
                    batch_stride: l.batch_stride as u32,
                    idx_words: index_words(idx.dtype)?,
                },
                groups_1d(n, 256),
            )],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
