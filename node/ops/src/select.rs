//! Compress, Unique and ReverseSequence. Compress's and Unique's output shapes are their
//! inputs' values, so their rules need those values (the graph layer specializes on them, or
//! folds the op); ReverseSequence's lengths only move data. Unique runs on the CPU only (it is
//! folded whenever its rule can run); Compress and ReverseSequence also have GPU kernels.

use super::util::{const_input, groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel};
use vkml_shaders::{compress_table, gather_e, reverse_sequence};

pub fn register(r: &mut Registry) {
    r.add("Compress", build_compress);
    r.add("Unique", build_unique);
    r.add("ReverseSequence", build_reverse_sequence);
}

fn tensor(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Tensor, OpError> {
    Tensor::from_bytes(dtype, shape, data.into()).map_err(|e| OpError::invalid(e.to_string()))
}

/// `t` seen as [outer, axis, inner] (`axis` None: flattened to [1, n, 1]).
fn split3(shape: &[usize], axis: Option<usize>) -> (usize, usize, usize) {
    match axis {
        Some(a) => (numel(&shape[..a]), shape[a], numel(&shape[a + 1..])),
        None => (1, numel(shape), 1),
    }
}

#[derive(Debug)]
struct Compress {
    axis: Option<i64>,
}

fn build_compress(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Compress {
        axis: spec.attrs.int_opt("axis")?,
    }))
}

impl Compress {
    fn compress(&self, x: &Tensor, cond: &Tensor) -> Result<Tensor, OpError> {
        if cond.rank() != 1 {
            return Err(OpError::invalid("Compress condition must be 1-D"));
        }
        let keep: Vec<bool> = cond
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("Compress condition: {e}")))?
            .iter()
            .map(|&v| v != 0.0)
            .collect();
        let axis = self
            .axis
            .map(|a| super::util::axis_of_tensor(a, x.rank()))
            .transpose()?;
        let (outer, n, inner) = split3(x.shape(), axis);
        if keep.len() > n {
            return Err(OpError::invalid(format!(
                "Compress condition has {} entries for an axis of {n}",
                keep.len()
            )));
        }
        let picks: Vec<usize> = (0..keep.len()).filter(|&i| keep[i]).collect();
        let es = x.dtype().size();
        let block = inner * es;
        let mut out = Vec::with_capacity(outer * picks.len() * block);
        for o in 0..outer {
            for &i in &picks {
                let at = (o * n + i) * block;
                out.extend_from_slice(&x.bytes()[at..at + block]);
            }
        }
        let shape = match axis {
            Some(a) => {
                let mut s = x.shape().to_vec();
                s[a] = picks.len();
                s
            }
            None => vec![picks.len()],
        };
        tensor(x.dtype(), shape, out)
    }
}

impl Op for Compress {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let cond = const_input(inputs, 1)?;
        // Only the shape matters here: run the selection on an empty stand-in of x's type.
        let stand_in = Tensor::zeros(x.dtype, x.shape.clone());
        Ok(vec![ValueType::of(&self.compress(&stand_in, cond)?)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![self.compress(req(inputs, 0)?, req(inputs, 1)?)?])
    }

    /// A pre-pass turns the condition (a run-time buffer) into indices, then gather_e.comp
    /// picks the slices.
    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = inputs.first().copied().flatten()?;
        let cond = inputs.get(1).copied().flatten()?;
        let y = outputs.first()?;
        if cond.dtype != DType::Bool || cond.shape.len() != 1 {
            return None;
        }
        let axis = self
            .axis
            .map(|a| super::util::axis_of_tensor(a, x.shape.len()))
            .transpose()
            .ok()?;
        let (_, n, inner) = split3(&x.shape, axis);
        let picks = match axis {
            Some(a) => *y.shape.get(a)?,
            None => y.numel(),
        };
        let total = y.numel();
        for v in [total, x.numel(), n] {
            i32::try_from(v).ok()?;
        }
        if total == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        let pre = Dispatch::new(
            compress_table::Variant::Main,
            compress_table::Buffers {
                cond: BufRef::Input(1),
                y: BufRef::Scratch(0),
            },
            compress_table::Params {
                n: cond.numel() as u32,
                picks: picks as u32,
            },
            [1, 1, 1],
        );
        // The table of picked positions is int32: one index word each.
        let main = Dispatch::new(
            by_width!(x.dtype.size(), gather_e::Variant)?,
            gather_e::Buffers {
                x: BufRef::Input(0),
                indices: BufRef::Scratch(0),
                y: BufRef::Output(0),
                // Positions the pre-pass computed: always in range.
                fault: BufRef::Fault,
            },
            gather_e::Params {
                n: total as u32,
                inner: inner as u32,
                picks: picks as u32,
                rows: n as u32,
                idx_words: 1,
            },
            groups_1d(total, 256),
        );
        Some(GpuKernel {
            scratch: vec![(picks * 4) as u64],
            dispatches: vec![pre, main],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[derive(Debug)]
struct Unique {
    sorted: bool,
    axis: Option<i64>,
    /// Outputs the node names (Y, then the optional indices, inverse_indices, counts).
    outputs: usize,
}

fn build_unique(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Unique {
        sorted: spec.attrs.int("sorted", 1)? != 0,
        axis: spec.attrs.int_opt("axis")?,
        outputs: spec.num_outputs.clamp(1, 4),
    }))
}

impl Unique {
    fn unique(&self, x: &Tensor) -> Result<Vec<Tensor>, OpError> {
        let axis = self
            .axis
            .map(|a| super::util::axis_of_tensor(a, x.rank()))
            .transpose()?;
        let (outer, n, inner) = split3(x.shape(), axis);
        let es = x.dtype().size();
        let vals = x
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("Unique input: {e}")))?;
        // Item i: the slice at position i of the axis, as bytes (identity) and values (order).
        let item_bytes = |i: usize| -> Vec<u8> {
            (0..outer)
                .flat_map(|o| {
                    let at = (o * n + i) * inner * es;
                    x.bytes()[at..at + inner * es].to_vec()
                })
                .collect()
        };
        let item_vals = |i: usize| -> Vec<f64> {
            (0..outer)
                .flat_map(|o| vals[(o * n + i) * inner..(o * n + i + 1) * inner].to_vec())
                .collect()
        };
        let mut firsts: Vec<usize> = Vec::new();
        let mut inverse = Vec::with_capacity(n);
        let mut counts: Vec<i64> = Vec::new();
        let mut seen: std::collections::HashMap<Vec<u8>, usize> = Default::default();
        for i in 0..n {
            let k = item_bytes(i);
            let u = *seen.entry(k).or_insert_with(|| {
                firsts.push(i);
                counts.push(0);
                firsts.len() - 1
            });
            counts[u] += 1;
            inverse.push(u);
        }
        let mut order: Vec<usize> = (0..firsts.len()).collect();
        if self.sorted {
            // NaN last, as numpy sorts: a comparison that called NaN equal to everything
            // was no order at all, and the sort panicked on it (a fuzzer's find).
            let nan_last = |a: &f64, b: &f64| match (a.is_nan(), b.is_nan()) {
                (false, false) => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
                (x, y) => x.cmp(&y),
            };
            order.sort_by(|&a, &b| {
                let (va, vb) = (item_vals(firsts[a]), item_vals(firsts[b]));
                va.iter()
                    .zip(&vb)
                    .map(|(x, y)| nan_last(x, y))
                    .find(|o| o.is_ne())
                    .unwrap_or_else(|| va.len().cmp(&vb.len()))
            });
        }
        let mut rank = vec![0usize; order.len()];
        for (r, &u) in order.iter().enumerate() {
            rank[u] = r;
        }
        let m = order.len();
        let block = inner * es;
        let mut y = vec![0u8; outer * m * block];
        for (r, &u) in order.iter().enumerate() {
            for o in 0..outer {
                let src = (o * n + firsts[u]) * block;
                let dst = (o * m + r) * block;
                y[dst..dst + block].copy_from_slice(&x.bytes()[src..src + block]);
            }
        }
        let shape = match axis {
            Some(a) => {
                let mut s = x.shape().to_vec();
                s[a] = m;
                s
            }
            None => vec![m],
        };
        let ints = |v: Vec<i64>| Tensor::from_vec(vec![v.len()], v);
        let mut all = vec![
            tensor(x.dtype(), shape, y)?,
            ints(order.iter().map(|&u| firsts[u] as i64).collect()),
            ints(inverse.iter().map(|&u| rank[u] as i64).collect()),
            ints(order.iter().map(|&u| counts[u]).collect()),
        ];
        all.truncate(self.outputs);
        Ok(all)
    }
}

impl Op for Unique {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(self
            .unique(const_input(inputs, 0)?)?
            .iter()
            .map(ValueType::of)
            .collect())
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        self.unique(req(inputs, 0)?)
    }
}

#[derive(Debug)]
struct ReverseSequence {
    batch_axis: usize,
    time_axis: usize,
}

fn build_reverse_sequence(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let b = spec.attrs.int("batch_axis", 1)?;
    let t = spec.attrs.int("time_axis", 0)?;
    if !matches!((b, t), (0, 1) | (1, 0)) {
        return Err(OpError::invalid(format!(
            "ReverseSequence batch_axis {b} and time_axis {t} must be 0 and 1 in some order"
        )));
    }
    Ok(Box::new(ReverseSequence {
        batch_axis: b as usize,
        time_axis: t as usize,
    }))
}

impl Op for ReverseSequence {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let lens = req(inputs, 1)?.ty;
        if x.shape.len() < 2 || lens.shape != [x.shape[self.batch_axis]] {
            return Err(OpError::invalid(format!(
                "ReverseSequence needs rank 2 or more and one length per batch entry \
                 (input {:?}, lengths {:?})",
                x.shape, lens.shape
            )));
        }
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (x, lens) = (req(inputs, 0)?, req(inputs, 1)?);
        let lens = lens
            .to_i64_vec()
            .map_err(|e| OpError::invalid(format!("ReverseSequence lengths: {e}")))?;
        let s = x.shape();
        let inner = numel(&s[2..]) * x.dtype().size();
        let (st_b, st_t) = if self.batch_axis == 0 {
            (s[1] * inner, inner)
        } else {
            (inner, s[1] * inner)
        };
        let (nb, nt) = (s[self.batch_axis], s[self.time_axis]);
        let mut out = x.bytes().to_vec();
        for (b, &l) in lens.iter().enumerate().take(nb) {
            if l < 0 || l as usize > nt {
                return Err(OpError::invalid(format!(
                    "ReverseSequence length {l} is outside [0, {nt}]"
                )));
            }
            let l = l as usize;
            for t in 0..l {
                let dst = b * st_b + t * st_t;
                let src = b * st_b + (l - 1 - t) * st_t;
                out[dst..dst + inner].copy_from_slice(&x.bytes()[src..src + inner]);
            }
        }
        Ok(vec![tensor(x.dtype(), s.to_vec(), out)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = inputs.first().copied().flatten()?;
        let lens = inputs.get(1).copied().flatten()?;
        let n = x.numel();
        i32::try_from(n).ok()?;
        let dispatches = if n == 0 {
            vec![]
        } else {
            vec![Dispatch::new(
                by_width!(x.dtype.size(), reverse_sequence::Variant)?,
                reverse_sequence::Buffers {
                    x: BufRef::Input(0),
                    lens: BufRef::Input(1),
                    y: BufRef::Output(0),
                },
                reverse_sequence::Params {
                    n: n as u32,
                    d0: x.shape[0] as u32,
                    d1: x.shape[1] as u32,
                    inner: numel(&x.shape[2..]) as u32,
                    batch_first: (self.batch_axis == 0) as u32,
                    idx_words: super::gather_nd::index_words(lens.dtype)?,
                },
                groups_1d(n, 256),
            )]
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
