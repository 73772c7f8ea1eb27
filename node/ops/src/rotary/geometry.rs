//! The layout of a rotary embedding: the input's axes, the rotated part of each head and how
//! a token finds its cache row, checked against the inputs' shapes for both ops.

use super::{FLOATS, Rotary};
use crate::tensor::DType;
use crate::util::expect_dtype;
use crate::{OpError, ValueType};

/// How a token (b, s) finds its cache row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Its own: caches [B, S, rot/2] (ONNX's op without position_ids).
    Token,
    /// position_ids[b, s].
    Ids,
    /// position_ids[0] + s (com.microsoft's single start offset).
    Offset,
}

#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head: usize,
    /// Rotated elements at the start of each head (even, at most `head`).
    pub rot: usize,
    /// [B, H, S, D] rather than [B, S, H, D].
    pub transposed: bool,
    pub interleaved: bool,
    pub rows: Rows,
    pub cache_rows: usize,
}

impl Geometry {
    /// The cache row of token (b, s), or (element of position_ids, position) when that is
    /// outside the caches.
    pub fn cache_row(&self, pos: &[i64], b: usize, s: usize) -> Result<usize, (usize, i64)> {
        let (element, p) = match self.rows {
            Rows::Token => return Ok(b * self.seq + s),
            Rows::Ids => (b * self.seq + s, pos[b * self.seq + s]),
            Rows::Offset => (0, pos[0].saturating_add(s as i64)),
        };
        usize::try_from(p)
            .ok()
            .filter(|&r| r < self.cache_rows)
            .ok_or((element, p))
    }
}

/// The geometry of `op` for these input types.
pub fn of(
    op: &Rotary,
    x: &ValueType,
    cos: &ValueType,
    sin: &ValueType,
    pos: Option<&ValueType>,
) -> Result<Geometry, OpError> {
    let name = op.name();
    let bad = |what: String| OpError::invalid(format!("{name}: {what}"));
    expect_dtype(x, FLOATS, &format!("{name}: input"))?;
    if cos.dtype != x.dtype || sin.dtype != x.dtype {
        return Err(bad(format!(
            "the caches must be {} like the input, found {} and {}",
            x.dtype, cos.dtype, sin.dtype
        )));
    }
    if cos.shape != sin.shape {
        return Err(bad(format!(
            "cos_cache {:?} and sin_cache {:?} must have one shape",
            cos.shape, sin.shape
        )));
    }
    if let Some(p) = pos
        && p.dtype != DType::I64
    {
        return Err(bad(format!(
            "position_ids must be int64, found {}",
            p.dtype
        )));
    }
    let (batch, seq, heads, head, transposed) = axes(op, &x.shape, cos).map_err(bad)?;
    let rot = if op.rotary_dim > 0 {
        op.rotary_dim
    } else {
        head
    };
    if rot > head || rot % 2 != 0 {
        return Err(bad(format!(
            "the rotary dimension {rot} must be even and at most the head size {head}"
        )));
    }
    let (rows, cache_rows) = cache_rows(op.ms, pos, &cos.shape, batch, seq).map_err(bad)?;
    if cos.shape.last() != Some(&(rot / 2)) {
        return Err(bad(format!(
            "the caches {:?} must have rot / 2 = {} columns (rotary dimension {rot})",
            cos.shape,
            rot / 2
        )));
    }
    Ok(Geometry {
        batch,
        seq,
        heads,
        head,
        rot,
        transposed,
        interleaved: op.interleaved,
        rows,
        cache_rows,
    })
}

/// (batch, sequence, heads, head size, transposed) of the input.
fn axes(
    op: &Rotary,
    x: &[usize],
    cos: &ValueType,
) -> Result<(usize, usize, usize, usize, bool), String> {
    match *x {
        [b, h, s, d] => {
            // onnxruntime reads num_heads for a 4-D input too: it must agree.
            if op.ms && op.num_heads > 0 && op.num_heads != h {
                return Err(format!(
                    "num_heads {} but the input {x:?} has {h}",
                    op.num_heads
                ));
            }
            Ok((b, s, h, d, true))
        }
        [b, s, hidden] => {
            let heads = if op.num_heads > 0 {
                op.num_heads
            } else if op.ms && op.rotary_dim == 0 {
                // com.microsoft's without num_heads: the head size is twice the caches' width.
                match cos.shape.last() {
                    Some(&c) if c > 0 && hidden % (2 * c) == 0 => hidden / (2 * c),
                    _ => 0,
                }
            } else {
                0
            };
            if heads == 0 || hidden % heads != 0 {
                return Err(format!(
                    "a 3-D input {x:?} needs num_heads dividing its last axis"
                ));
            }
            Ok((b, s, heads, hidden / heads, false))
        }
        _ => Err(format!("the input {x:?} must have 3 or 4 axes")),
    }
}

/// How tokens find their cache rows, and how many rows the caches have.
fn cache_rows(
    ms: bool,
    pos: Option<&ValueType>,
    cache: &[usize],
    batch: usize,
    seq: usize,
) -> Result<(Rows, usize), String> {
    let Some(pos) = pos else {
        if ms {
            return Err("position_ids (input 1) is required".into());
        }
        if cache.len() != 3 || cache[..2] != [batch, seq] {
            return Err(format!(
                "without position_ids the caches must be [{batch}, {seq}, rot / 2], found {cache:?}"
            ));
        }
        return Ok((Rows::Token, batch * seq));
    };
    if cache.len() != 2 {
        return Err(format!(
            "with position_ids the caches must be [max_position, rot / 2], found {cache:?}"
        ));
    }
    let rows = if pos.shape == [batch, seq] {
        Rows::Ids
    } else if ms && pos.shape.len() <= 1 && pos.numel() == 1 {
        Rows::Offset
    } else {
        let one = if ms { " or a single start offset" } else { "" };
        return Err(format!(
            "position_ids {:?} must be [{batch}, {seq}]{one}",
            pos.shape
        ));
    };
    Ok((rows, cache[0]))
}
