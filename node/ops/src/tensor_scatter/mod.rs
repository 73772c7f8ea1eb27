//! ONNX's TensorScatter (opset 24): a KV cache's update. present = past_cache with `update`'s
//! rows written along `axis` (the sequence axis, -2 by default; never the batch axis 0) from
//! write_indices[b] on for batch entry b (0 when absent); in "circular" mode positions wrap
//! around the cache's length, in "linear" mode they must fit in it. The GPU kernel
//! (shaders/tensor_scatter.comp) computes each present element from one of the two inputs,
//! and may write present over past in place (a cache bound across runs).

#[cfg(test)]
mod tests;

use crate::tensor::{DType, Tensor};
use crate::util::{groups_1d, opt, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use vkml_shaders::tensor_scatter;

pub fn register(r: &mut Registry) {
    r.add("TensorScatter", build);
}

#[derive(Debug)]
struct TensorScatter {
    axis: i64,
    circular: bool,
}

fn invalid(what: String) -> OpError {
    OpError::invalid(format!("TensorScatter: {what}"))
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let circular = match spec.attrs.string("mode", "linear")? {
        "linear" => false,
        "circular" => true,
        m => {
            return Err(invalid(format!(
                "mode must be linear or circular, got '{m}'"
            )));
        }
    };
    Ok(Box::new(TensorScatter {
        axis: spec.attrs.int("axis", -2)?,
        circular,
    }))
}

/// The tensors seen as [batch, mid, len, inner]; `seq` rows of update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geo {
    batch: usize,
    mid: usize,
    len: usize,
    inner: usize,
    seq: usize,
}

impl TensorScatter {
    fn geometry(
        &self,
        past: &ValueType,
        update: &ValueType,
        idx: Option<&ValueType>,
    ) -> Result<Geo, OpError> {
        let r = past.shape.len();
        let a = if self.axis < 0 {
            self.axis + r as i64
        } else {
            self.axis
        };
        if r < 2 || a < 1 || a >= r as i64 {
            return Err(invalid(format!(
                "axis {} of a rank-{r} cache: it must name an axis after the batch axis",
                self.axis
            )));
        }
        let a = a as usize;
        let same_but_axis = update.shape.len() == r
            && (0..r).all(|d| d == a || update.shape[d] == past.shape[d])
            && update.shape[a] <= past.shape[a];
        if update.dtype != past.dtype || !same_but_axis {
            return Err(invalid(format!(
                "update {update} must be past_cache's type and shape ({past}) but for at most \
                 as many rows along axis {a}"
            )));
        }
        if let Some(i) = idx
            && (i.dtype != DType::I64 || i.shape != [past.shape[0]])
        {
            return Err(invalid(format!(
                "write_indices must be int64 [{}], got {i}",
                past.shape[0]
            )));
        }
        Ok(Geo {
            batch: past.shape[0],
            mid: past.shape[1..a].iter().product(),
            len: past.shape[a],
            inner: past.shape[a + 1..].iter().product(),
            seq: update.shape[a],
        })
    }

    fn types<'a>(
        &self,
        inputs: &'a [Option<InferInput<'a>>],
    ) -> Result<(&'a ValueType, Geo), OpError> {
        let past = req(inputs, 0)?.ty;
        let g = self.geometry(past, req(inputs, 1)?.ty, opt(inputs, 2).map(|i| i.ty))?;
        Ok((past, g))
    }

    /// The row of the cache that update row `s` of batch entry `b` goes to.
    fn row(&self, g: &Geo, start: i64, s: usize) -> Result<usize, OpError> {
        let t = start + s as i64;
        if self.circular {
            return Ok(t.rem_euclid(g.len as i64) as usize);
        }
        if t < 0 || t >= g.len as i64 {
            return Err(invalid(format!(
                "write index {start} with {} rows leaves the cache's {} rows (linear mode)",
                g.seq, g.len
            )));
        }
        Ok(t as usize)
    }
}

impl Op for TensorScatter {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![self.types(inputs)?.0.clone()])
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let Ok((_, g)) = self.types(inputs) else {
            return Ok(());
        };
        let Some(idx) = opt(inputs, 2).and_then(|i| i.value) else {
            return Ok(());
        };
        let starts = idx.to_i64_vec().map_err(|e| invalid(e.to_string()))?;
        for &w in &starts {
            if g.seq > 0 {
                self.row(&g, w, 0)?;
                self.row(&g, w, g.seq - 1)?;
            }
        }
        Ok(())
    }

    fn writes_in_place(&self, input: usize, output: usize) -> bool {
        (input, output) == (0, 0)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (past, update) = (req(inputs, 0)?, req(inputs, 1)?);
        let idx = opt(inputs, 2);
        let idx_ty = idx.map(ValueType::of);
        let g = self.geometry(
            &ValueType::of(past),
            &ValueType::of(update),
            idx_ty.as_ref(),
        )?;
        let starts = match idx {
            Some(t) => t.to_i64_vec().map_err(|e| invalid(e.to_string()))?,
            None => vec![0; g.batch],
        };
        let size = past.dtype().size();
        let chunk = g.inner * size;
        let mut out = past.bytes().to_vec();
        let src = update.bytes();
        for (b, &w) in starts.iter().enumerate() {
            for s in 0..g.seq {
                let t = self.row(&g, w, s)?;
                for m in 0..g.mid {
                    let bm = b * g.mid + m;
                    let from = (bm * g.seq + s) * chunk;
                    let to = (bm * g.len + t) * chunk;
                    out[to..to + chunk].copy_from_slice(&src[from..from + chunk]);
                }
            }
        }
        let y = Tensor::from_bytes(past.dtype(), past.shape().to_vec(), out.into())
            .map_err(|e| invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let past = req(inputs, 0).ok()?;
        let idx = opt(inputs, 2);
        let g = self.geometry(past, req(inputs, 1).ok()?, idx).ok()?;
        let variant = by_dtype!(past.dtype, tensor_scatter::Variant, [F32, F16])?;
        let n = u32::try_from(outputs.first()?.numel()).ok()?;
        let word = |x: usize| u32::try_from(x).ok();
        let dispatch = Dispatch::new(
            variant,
            tensor_scatter::Buffers {
                past: BufRef::Input(0),
                update: BufRef::Input(1),
                // Stood in for by past when absent: the flag keeps the shader off it.
                idx: BufRef::Input(if idx.is_some() { 2 } else { 0 }),
                y: BufRef::Output(0),
            },
            tensor_scatter::Params {
                n,
                mid: word(g.mid)?,
                len: word(g.len)?,
                inner: word(g.inner)?,
                seq: word(g.seq)?,
                flags: u32::from(self.circular) | (u32::from(idx.is_some()) << 1),
            },
            groups_1d(n as usize, 256),
        );
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 { vec![] } else { vec![dispatch] },
        })
    }
}
