//! ScatterND, ScatterElements and the deprecated Scatter: the output is the data with updates
//! written (or, with a reduction, folded) at positions the indices name. Duplicate positions
//! are applied in the order of the updates, on both backends.

use super::gather_nd::{checked_index, index_words, out_of_range};
use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel, strides};
use vkml_shaders::{scatter_elements, scatter_nd};

pub fn register(r: &mut Registry) {
    r.add("ScatterND", build_nd);
    r.add("ScatterElements", build_elements);
    r.add("Scatter", build_elements);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None = 0,
    Add = 1,
    Mul = 2,
    Max = 3,
    Min = 4,
}

fn reduction(spec: &NodeSpec<'_>) -> Result<Reduction, OpError> {
    super::shape_ops::attr_since(spec, "reduction", 16)?;
    Ok(match spec.attrs.string("reduction", "none")? {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" if spec.opset >= 18 => Reduction::Max,
        "min" if spec.opset >= 18 => Reduction::Min,
        other => {
            return Err(OpError::invalid(format!(
                "{} reduction '{other}' is not defined at opset {}",
                spec.op_type, spec.opset
            )));
        }
    })
}

/// Folds `upd` into `acc` (both one element of `dtype`, little-endian bytes).
fn combine(dtype: DType, r: Reduction, acc: &mut [u8], upd: &[u8]) -> Result<(), OpError> {
    macro_rules! typed {
        ($t:ty, $add:expr, $mul:expr) => {{
            let a = <$t>::from_le_bytes(acc.try_into().expect("element size"));
            let b = <$t>::from_le_bytes(upd.try_into().expect("element size"));
            let v: $t = match r {
                Reduction::None => b,
                Reduction::Add => $add(a, b),
                Reduction::Mul => $mul(a, b),
                Reduction::Max => {
                    if b > a {
                        b
                    } else {
                        a
                    }
                }
                Reduction::Min => {
                    if b < a {
                        b
                    } else {
                        a
                    }
                }
            };
            acc.copy_from_slice(&v.to_le_bytes());
        }};
    }
    macro_rules! int {
        ($t:ty) => {
            typed!($t, <$t>::wrapping_add, <$t>::wrapping_mul)
        };
    }
    macro_rules! float {
        ($t:ty) => {
            typed!($t, |a: $t, b: $t| a + b, |a: $t, b: $t| a * b)
        };
    }
    match dtype {
        DType::F32 => float!(f32),
        DType::F64 => float!(f64),
        DType::F16 => float!(half::f16),
        DType::BF16 => float!(half::bf16),
        DType::I8 => int!(i8),
        DType::U8 => int!(u8),
        DType::I16 => int!(i16),
        DType::U16 => int!(u16),
        DType::I32 => int!(i32),
        DType::U32 => int!(u32),
        DType::I64 => int!(i64),
        DType::U64 => int!(u64),
        // Bools and the low-precision types are only ever replaced.
        d => {
            if r != Reduction::None {
                return Err(OpError::unsupported(format!("scatter reductions on {d}")));
            }
            acc.copy_from_slice(upd);
        }
    }
    Ok(())
}

/// The element type a scatter shader runs as: `dtype`, or with no reduction (a plain copy of
/// bytes) the unsigned type of its size.
fn shader_dtype(dtype: DType, r: Reduction) -> Option<DType> {
    Some(match (dtype, r) {
        (d, Reduction::None) => match d.size() {
            1 => DType::U8,
            2 => DType::U16,
            4 => DType::U32,
            _ => DType::U64,
        },
        (DType::Bool | DType::BF16, _) => return None,
        (d, _) => d,
    })
}

/// Copies the data into the output (dispatch 1 of every scatter).
fn copy_data(data: &ValueType) -> Option<Dispatch> {
    super::remap::copy_dispatch(data.numel(), data.dtype.size())
}

fn ints(t: &Tensor, op: &str) -> Result<Vec<i64>, OpError> {
    t.to_i64_vec()
        .map_err(|e| OpError::invalid(format!("{op} indices: {e}")))
}

fn check_types(
    data: &ValueType,
    idx: &ValueType,
    upd: &ValueType,
    op: &str,
) -> Result<(), OpError> {
    if index_words(idx.dtype).is_none() {
        return Err(OpError::invalid(format!(
            "{op} indices must be int32 or int64, found {}",
            idx.dtype
        )));
    }
    if upd.dtype != data.dtype {
        return Err(OpError::invalid(format!(
            "{op} updates are {} but the data is {}",
            upd.dtype, data.dtype
        )));
    }
    Ok(())
}

#[derive(Debug)]
struct ScatterNd {
    reduction: Reduction,
}

fn build_nd(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(ScatterNd {
        reduction: reduction(spec)?,
    }))
}

impl ScatterNd {
    /// (entries per tuple, tuples, elements per slice), checked.
    fn layout(
        &self,
        d: &ValueType,
        i: &ValueType,
        u: &ValueType,
    ) -> Result<(usize, usize, usize), OpError> {
        check_types(d, i, u, "ScatterND")?;
        let Some(&k) = i.shape.last() else {
            return Err(OpError::invalid(
                "ScatterND indices must have rank 1 or more",
            ));
        };
        if k > d.shape.len() {
            return Err(OpError::invalid(format!(
                "ScatterND index tuples of {k} entries for data of rank {}",
                d.shape.len()
            )));
        }
        let want = [&i.shape[..i.shape.len() - 1], &d.shape[k..]].concat();
        if u.shape != want {
            return Err(OpError::invalid(format!(
                "ScatterND updates have shape {:?}, expected {want:?}",
                u.shape
            )));
        }
        Ok((
            k,
            numel(&i.shape[..i.shape.len() - 1]),
            numel(&d.shape[k..]),
        ))
    }
}

impl Op for ScatterNd {
    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        out_of_range(f.index, f.dim, "ScatterND")
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let (d, i, u) = (req(inputs, 0)?.ty, req(inputs, 1)?, req(inputs, 2)?.ty);
        if let Some(t) = i.value {
            let (k, _, _) = self.layout(d, i.ty, u)?;
            for (e, v) in ints(t, "ScatterND")?.into_iter().enumerate() {
                checked_index(v, d.shape[e % k.max(1)], "ScatterND")?;
            }
        }
        Ok(())
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let d = req(inputs, 0)?.ty;
        self.layout(d, req(inputs, 1)?.ty, req(inputs, 2)?.ty)?;
        Ok(vec![d.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (d, i, u) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
        let dt = ValueType::of(d);
        let (k, rows, slice) = self.layout(&dt, &ValueType::of(i), &ValueType::of(u))?;
        let es = d.dtype().size();
        let st = strides(d.shape());
        let idx = ints(i, "ScatterND")?;
        let mut out = d.bytes().to_vec();
        let ub = u.bytes();
        for r in 0..rows {
            let mut off = 0;
            for j in 0..k {
                off += checked_index(idx[r * k + j], d.shape()[j], "ScatterND")? * st[j];
            }
            for s in 0..slice {
                let (o, src) = ((off + s) * es, (r * slice + s) * es);
                combine(
                    d.dtype(),
                    self.reduction,
                    &mut out[o..o + es],
                    &ub[src..src + es],
                )?;
            }
        }
        let y = Tensor::from_bytes(d.dtype(), d.shape().to_vec(), out.into())
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let d = inputs.first().copied().flatten()?;
        let i = inputs.get(1).copied().flatten()?;
        let u = inputs.get(2).copied().flatten()?;
        let (k, rows, slice) = self.layout(d, i, u).ok()?;
        if d.numel() == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        for v in [d.numel(), u.numel(), i.numel()] {
            i32::try_from(v).ok()?;
        }
        let st = strides(&d.shape);
        let mut table: Vec<u32> = (0..k)
            .flat_map(|j| [d.shape[j] as u32, st[j] as u32])
            .collect();
        if table.is_empty() {
            table.push(0);
        }
        let mut dispatches = vec![copy_data(d)?];
        let mut scratch = vec![];
        if u.numel() > 0 {
            let variant = by_dtype!(
                shader_dtype(d.dtype, self.reduction)?,
                scatter_nd::Variant,
                [F32, F16, F64, I64, U64, I32, U32, I16, U16, I8, U8]
            )?;
            let iw = index_words(i.dtype)?;
            let red = self.reduction as u32;
            let table = BufRef::Table(table);
            let step = |n: usize, phase: u32, owners: BufRef| {
                Dispatch::new(
                    variant,
                    scatter_nd::Buffers {
                        indices: BufRef::Input(1),
                        updates: BufRef::Input(2),
                        t: table.clone(),
                        y: BufRef::Output(0),
                        owners,
                        fault: BufRef::Fault,
                    },
                    scatter_nd::Params {
                        n: n as u32,
                        k: k as u32,
                        slice: slice as u32,
                        rows: rows as u32,
                        idx_words: iw,
                        reduction: red,
                        phase,
                    },
                    groups_1d(n, 256),
                )
            };
            if self.reduction == Reduction::None {
                // Owners: one word per output slice, claimed by the last row naming it.
                let slots = d.numel() / slice;
                u32::try_from(rows + 1).ok()?;
                scratch.push((slots * 4) as u64);
                dispatches.push(step(slots, 0, BufRef::Scratch(0)));
                dispatches.push(step(rows, 1, BufRef::Scratch(0)));
                dispatches.push(step(u.numel(), 2, BufRef::Scratch(0)));
            } else {
                dispatches.push(step(u.numel(), 3, BufRef::Input(1)));
            }
        }
        Some(GpuKernel {
            scratch,
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs.iter().map(|o| o.numel() as u64).sum()
    }
}

#[derive(Debug)]
struct ScatterElements {
    axis: i64,
    reduction: Reduction,
}

fn build_elements(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(ScatterElements {
        axis: spec.attrs.int("axis", 0)?,
        reduction: reduction(spec)?,
    }))
}

impl ScatterElements {
    fn check(&self, d: &ValueType, i: &ValueType, u: &ValueType) -> Result<usize, OpError> {
        check_types(d, i, u, "ScatterElements")?;
        if i.shape != u.shape || i.shape.len() != d.shape.len() || d.shape.is_empty() {
            return Err(OpError::invalid(format!(
                "ScatterElements indices {:?} and updates {:?} must share one shape, of the \
                 data's rank ({:?})",
                i.shape, u.shape, d.shape
            )));
        }
        let axis = super::util::axis(self.axis, d.shape.len())?;
        if let Some(k) = (0..d.shape.len()).find(|&k| k != axis && i.shape[k] > d.shape[k]) {
            return Err(OpError::invalid(format!(
                "ScatterElements indices {:?} pass the data {:?} on axis {k}",
                i.shape, d.shape
            )));
        }
        Ok(axis)
    }
}

impl Op for ScatterElements {
    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        out_of_range(f.index, f.dim, "ScatterElements")
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let (d, i, u) = (req(inputs, 0)?.ty, req(inputs, 1)?, req(inputs, 2)?.ty);
        if let Some(t) = i.value {
            let axis = self.check(d, i.ty, u)?;
            let values = t
                .to_i64_vec()
                .map_err(|e| OpError::invalid(format!("ScatterElements indices: {e}")))?;
            for v in values {
                checked_index(v, d.shape[axis], "ScatterElements")?;
            }
        }
        Ok(())
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let d = req(inputs, 0)?.ty;
        self.check(d, req(inputs, 1)?.ty, req(inputs, 2)?.ty)?;
        Ok(vec![d.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (d, i, u) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
        let axis = self.check(&ValueType::of(d), &ValueType::of(i), &ValueType::of(u))?;
        let es = d.dtype().size();
        let st = strides(d.shape());
        let idx = ints(i, "ScatterElements")?;
        let mut out = d.bytes().to_vec();
        let ub = u.bytes();
        let shape = i.shape();
        let mut pos = vec![0usize; shape.len()];
        for (e, &v) in idx.iter().enumerate() {
            let mut off = 0;
            for (k, &p) in pos.iter().enumerate() {
                let c = if k == axis {
                    checked_index(v, d.shape()[axis], "ScatterElements")?
                } else {
                    p
                };
                off += c * st[k];
            }
            let (o, src) = (off * es, e * es);
            combine(
                d.dtype(),
                self.reduction,
                &mut out[o..o + es],
                &ub[src..src + es],
            )?;
            for k in (0..pos.len()).rev() {
                pos[k] += 1;
                if pos[k] < shape[k] {
                    break;
                }
                pos[k] = 0;
            }
        }
        let y = Tensor::from_bytes(d.dtype(), d.shape().to_vec(), out.into())
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let d = inputs.first().copied().flatten()?;
        let i = inputs.get(1).copied().flatten()?;
        let u = inputs.get(2).copied().flatten()?;
        let axis = self.check(d, i, u).ok()?;
        if d.numel() == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        for v in [d.numel(), u.numel()] {
            i32::try_from(v).ok()?;
        }
        let st = strides(&d.shape);
        let table: Vec<u32> = u
            .shape
            .iter()
            .zip(&st)
            .flat_map(|(&n, &s)| [n as u32, s as u32])
            .collect();
        let mut dispatches = vec![copy_data(d)?];
        let mut scratch = vec![];
        if u.numel() > 0 {
            let variant = by_dtype!(
                shader_dtype(d.dtype, self.reduction)?,
                scatter_elements::Variant,
                [F32, F16, F64, I64, U64, I32, U32, I16, U16, I8, U8]
            )?;
            let iw = index_words(i.dtype)?;
            let (rank, red) = (u.shape.len() as u32, self.reduction as u32);
            let dim = d.shape[axis] as u32;
            let table = BufRef::Table(table);
            let step = |n: usize, phase: u32, owners: BufRef| {
                Dispatch::new(
                    variant,
                    scatter_elements::Buffers {
                        indices: BufRef::Input(1),
                        updates: BufRef::Input(2),
                        t: table.clone(),
                        y: BufRef::Output(0),
                        owners,
                        fault: BufRef::Fault,
                    },
                    scatter_elements::Params {
                        n: n as u32,
                        rank,
                        axis: axis as u32,
                        axis_dim: dim,
                        idx_words: iw,
                        reduction: red,
                        phase,
                    },
                    groups_1d(n, 256),
                )
            };
            if self.reduction == Reduction::None {
                scratch.push((d.numel() * 4) as u64);
                dispatches.push(step(d.numel(), 0, BufRef::Scratch(0)));
                dispatches.push(step(u.numel(), 1, BufRef::Scratch(0)));
                dispatches.push(step(u.numel(), 2, BufRef::Scratch(0)));
            } else {
                dispatches.push(step(u.numel(), 3, BufRef::Input(1)));
            }
        }
        Some(GpuKernel {
            scratch,
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs.iter().map(|o| o.numel() as u64).sum()
    }
}

#[cfg(test)]
mod tests;
