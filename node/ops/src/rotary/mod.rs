//! RotaryEmbedding, ONNX's (opset 23) and com.microsoft's: rotary position embeddings (RoPE)
//! applied to queries or keys laid out [B, S, H * D] or [B, H, S, D]. The first
//! `rotary_embedding_dim` elements of each head rotate in pairs, (d, d + rot/2) or, when
//! interleaved, (2c, 2c + 1), by the angle whose cosine and sine a token's cache row holds;
//! the rest of the head passes through.
//!
//! The two ops differ in their inputs and in how a token finds its cache row (`geometry.rs`):
//! ONNX's takes (X, cos_cache, sin_cache, position_ids?), and without position_ids its caches
//! are [B, S, rot/2], one row per token; com.microsoft's takes (input, position_ids, cos_cache,
//! sin_cache), whose position_ids are [B, S] or a single start offset (token s at offset + s).

mod cpu;
mod geometry;
mod gpu;
#[cfg(test)]
mod tests;

use crate::tensor::{DType, Tensor};
use crate::util::{opt, req, types_of};
use crate::{
    GpuKernel, IndexFault, InferInput, MS_DOMAIN, NodeSpec, Op, OpError, Registry, ValueType,
};
use geometry::Geometry;

pub fn register(r: &mut Registry) {
    r.add("RotaryEmbedding", |s| Rotary::build(s, false));
    r.add_in(MS_DOMAIN, "RotaryEmbedding", |s| Rotary::build(s, true));
}

const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64];

#[derive(Debug)]
struct Rotary {
    /// com.microsoft's input order and position rules.
    ms: bool,
    interleaved: bool,
    /// 0 when not given.
    num_heads: usize,
    /// 0: the whole head.
    rotary_dim: usize,
}

/// Input indices of (x, cos, sin, position_ids).
struct Slots {
    x: usize,
    cos: usize,
    sin: usize,
    pos: usize,
}

impl Rotary {
    fn build(spec: &NodeSpec<'_>, ms: bool) -> Result<Box<dyn Op>, OpError> {
        let a = spec.attrs;
        let name = if ms {
            "com.microsoft RotaryEmbedding"
        } else {
            "RotaryEmbedding"
        };
        let count = |attr: &str| -> Result<usize, OpError> {
            let v = a.int(attr, 0)?;
            usize::try_from(v).map_err(|_| {
                OpError::invalid(format!("{name}: {attr} must not be negative, got {v}"))
            })
        };
        if ms && a.int("is_packed_batching", 0)? != 0 {
            return Err(OpError::unsupported(format!(
                "{name}: is_packed_batching = 1 (ragged batches) is not implemented; export \
                 with padded batches"
            )));
        }
        // com.microsoft's `scale` only matters when the op extends its caches for a sequence
        // longer than they are, which onnxruntime's CPU kernel refuses too: it is read (so a
        // wrong type is still an error) and otherwise unused.
        a.float("scale", 1.0)?;
        let op = Rotary {
            ms,
            interleaved: a.int("interleaved", 0)? != 0,
            num_heads: count("num_heads")?,
            rotary_dim: count("rotary_embedding_dim")?,
        };
        if ms && op.rotary_dim > 0 && op.num_heads == 0 {
            return Err(OpError::invalid(format!(
                "{name}: num_heads must be given with rotary_embedding_dim"
            )));
        }
        Ok(Box::new(op))
    }

    fn name(&self) -> &'static str {
        if self.ms {
            "com.microsoft RotaryEmbedding"
        } else {
            "RotaryEmbedding"
        }
    }

    fn slots(&self) -> Slots {
        if self.ms {
            Slots {
                x: 0,
                pos: 1,
                cos: 2,
                sin: 3,
            }
        } else {
            Slots {
                x: 0,
                cos: 1,
                sin: 2,
                pos: 3,
            }
        }
    }

    fn geometry(&self, types: &[Option<&ValueType>]) -> Result<Geometry, OpError> {
        let s = self.slots();
        geometry::of(
            self,
            req(types, s.x)?,
            req(types, s.cos)?,
            req(types, s.sin)?,
            opt(types, s.pos),
        )
    }

    fn bad_position(&self, element: u64, position: i64, rows: u64) -> OpError {
        OpError::invalid(format!(
            "{}: position {position} (from element {element} of position_ids) is out of \
             range for caches of {rows} rows",
            self.name()
        ))
    }
}

impl Op for Rotary {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types = types_of(inputs);
        self.geometry(&types)?;
        Ok(vec![req(&types, self.slots().x)?.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let g = self.geometry(&refs)?;
        let s = self.slots();
        let f64s = |i: usize| {
            req(inputs, i)?
                .to_f64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))
        };
        let pos = match opt(inputs, s.pos) {
            Some(p) => p
                .to_i64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))?,
            None => vec![],
        };
        let y = cpu::rotate(&f64s(s.x)?, &f64s(s.cos)?, &f64s(s.sin)?, &pos, &g)
            .map_err(|(e, p)| self.bad_position(e as u64, p, g.cache_rows as u64))?;
        let x = req(inputs, s.x)?;
        Ok(vec![crate::numeric::from_f64(
            x.dtype(),
            x.shape().to_vec(),
            y,
        )?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let g = self.geometry(inputs).ok()?;
        let s = self.slots();
        let x = req(inputs, s.x).ok()?;
        // The shader reads the caches in the input's type.
        if req(inputs, s.cos).ok()?.dtype != x.dtype {
            return None;
        }
        gpu::kernel(x.dtype, &g, &s)
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let types = types_of(inputs);
        let g = self.geometry(&types)?;
        let Some(pos) = opt(inputs, self.slots().pos).and_then(|p| p.value) else {
            return Ok(());
        };
        let pos = pos
            .to_i64_vec()
            .map_err(|e| OpError::invalid(e.to_string()))?;
        for b in 0..g.batch {
            for t in 0..g.seq {
                g.cache_row(&pos, b, t)
                    .map_err(|(e, p)| self.bad_position(e as u64, p, g.cache_rows as u64))?;
            }
        }
        Ok(())
    }

    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &IndexFault) -> OpError {
        self.bad_position(f.element, f.index, f.dim)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs.iter().map(|o| 3 * o.numel() as u64).sum()
    }
}
