//! Transpose: output axis `i` is input axis `perm[i]`. One kernel over raw element bytes serves
//! every dtype; both the CPU and the GPU side first merge axes that stay adjacent and drop unit
//! axes, so most real transposes shrink to rank 2 or 3.

use bytes::Bytes;

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{Tensor, numel, strides};
use vkml_shaders::{transpose, transpose_tiled};

pub fn register(r: &mut Registry) {
    r.add("Transpose", build);
}

#[derive(Debug)]
struct Transpose {
    /// `None`: reverse the axes.
    perm: Option<Vec<i64>>,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Transpose {
        perm: spec.attrs.ints_opt("perm")?.map(<[i64]>::to_vec),
    }))
}

impl Transpose {
    /// The permutation for an input of `rank`, checked.
    fn perm(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        let Some(perm) = &self.perm else {
            return Ok((0..rank).rev().collect());
        };
        if perm.len() != rank {
            return Err(OpError::invalid(format!(
                "perm {perm:?} has {} entries for an input of rank {rank}",
                perm.len()
            )));
        }
        let mut seen = vec![false; rank];
        perm.iter()
            .map(|&p| {
                let i = usize::try_from(p)
                    .ok()
                    .filter(|&i| i < rank)
                    .ok_or_else(|| {
                        OpError::invalid(format!(
                            "perm {perm:?}: {p} is not an axis of rank {rank}"
                        ))
                    })?;
                if std::mem::replace(&mut seen[i], true) {
                    return Err(OpError::invalid(format!(
                        "perm {perm:?} names axis {i} twice"
                    )));
                }
                Ok(i)
            })
            .collect()
    }
}

/// A transpose reduced to its essentials: output dims, and for each output axis the stride (in
/// elements) of the input axis it walks. Unit axes are gone, and output-adjacent axes that are
/// also adjacent, in order, in the input are merged.
#[derive(Debug, Clone, PartialEq)]
struct Walk {
    dims: Vec<usize>,
    strides: Vec<usize>,
}

fn walk(shape: &[usize], perm: &[usize]) -> Walk {
    let own = strides(shape);
    let mut w = Walk {
        dims: Vec::new(),
        strides: Vec::new(),
    };
    for &p in perm.iter().filter(|&&p| shape[p] != 1) {
        let (d, s) = (shape[p], own[p]);
        match (w.dims.last_mut(), w.strides.last_mut()) {
            // The previous output axis steps over exactly one run of this one: one axis.
            (Some(pd), Some(ps)) if *ps == s * d => {
                *pd *= d;
                *ps = s;
            }
            _ => {
                w.dims.push(d);
                w.strides.push(s);
            }
        }
    }
    w
}

/// Moves `es`-byte elements of `src` (row-major, any shape) along `w`.
fn transpose_bytes(src: &[u8], es: usize, w: &Walk) -> Vec<u8> {
    let n = numel(&w.dims);
    let mut out = vec![0u8; n * es];
    if n == 0 {
        return out;
    }
    let (last_d, last_s) = match (w.dims.last(), w.strides.last()) {
        (Some(&d), Some(&s)) => (d, s),
        _ => (1, 1),
    };
    let outer = w.dims.len().saturating_sub(1);
    let mut idx = vec![0usize; outer];
    let mut base = 0usize;
    for row in out.chunks_exact_mut(last_d * es) {
        if last_s == 1 {
            row.copy_from_slice(&src[base * es..(base + last_d) * es]);
        } else {
            match es {
                1 => strided::<1>(row, src, base, last_s),
                2 => strided::<2>(row, src, base, last_s),
                4 => strided::<4>(row, src, base, last_s),
                8 => strided::<8>(row, src, base, last_s),
                _ => {
                    for (k, d) in row.chunks_exact_mut(es).enumerate() {
                        let s = (base + k * last_s) * es;
                        d.copy_from_slice(&src[s..s + es]);
                    }
                }
            }
        }
        // Odometer over the outer output axes, keeping `base` the input offset of the row.
        for ax in (0..outer).rev() {
            idx[ax] += 1;
            base += w.strides[ax];
            if idx[ax] < w.dims[ax] {
                break;
            }
            base -= w.strides[ax] * w.dims[ax];
            idx[ax] = 0;
        }
    }
    out
}

/// One row of a strided gather; `N` is a constant so each element copy is a plain load/store.
fn strided<const N: usize>(dst: &mut [u8], src: &[u8], base: usize, stride: usize) {
    for (k, d) in dst.chunks_exact_mut(N).enumerate() {
        let s = (base + k * stride) * N;
        d.copy_from_slice(&src[s..s + N]);
    }
}

impl Op for Transpose {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let perm = self.perm(x.shape.len())?;
        let shape = perm.iter().map(|&p| x.shape[p]).collect();
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let perm = self.perm(x.rank())?;
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        let w = walk(x.shape(), &perm);
        // With at most one axis left the bytes are already in output order.
        let data = if w.dims.len() <= 1 {
            x.bytes().clone()
        } else {
            Bytes::from(transpose_bytes(x.bytes(), x.dtype().size(), &w))
        };
        let y = Tensor::from_bytes(x.dtype(), shape, data)
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = inputs.first().copied().flatten()?;
        let perm = self.perm(x.shape.len()).ok()?;
        let Some(plan) = gpu::plan(&x.shape, &perm, x.dtype.size()) else {
            // Not whole words (or too many axes): move elements one by one.
            let d = super::remap::Remap::transpose(&x.shape, &perm).dispatch(
                x.dtype.size(),
                BufRef::Input(0),
                BufRef::Output(0),
                x.numel(),
                x.numel(),
            )?;
            return Some(GpuKernel {
                scratch: Vec::new(),
                dispatches: vec![d],
            });
        };
        let dispatches = match plan {
            gpu::Plan::Empty => Vec::new(),
            gpu::Plan::Words(p) => vec![Dispatch::new(
                transpose::Variant::Main,
                transpose::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                p,
                groups_1d(p.n as usize, 256),
            )],
            gpu::Plan::Tiled(p) => vec![Dispatch::new(
                transpose_tiled::Variant::Main,
                transpose_tiled::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                p,
                groups_1d(p.groups as usize, 1),
            )],
        };
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

mod gpu;

#[cfg(test)]
mod tests;
