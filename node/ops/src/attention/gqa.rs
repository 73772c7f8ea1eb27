//! com.microsoft GroupQueryAttention, as ONNX Runtime's CPU kernel computes it: what the
//! GenAI model builder emits for Llama-family models.
//!
//! query [B, S, Hq * D] (or packed QKV [B, S, (Hq + 2 Hkv) * D] with key and value absent),
//! key and value [B, S, Hkv * D], past_key/past_value [B, Hkv, P, D] (BNSH), seqlens_k
//! (int32 [B]: valid keys - 1 per batch entry), total_sequence_length (int32 scalar, needed
//! while planning: it sizes the present), optional cos_cache/sin_cache with do_rotary.
//! - The first prompt is S == total_sequence_length: its rows start at position 0 whatever
//!   seqlens_k says (right padding: row s sees keys min(s + 1, seqlens_k + 1)). Otherwise
//!   (decoding, or a later chunk) batch entry b has past_b = seqlens_k[b] + 1 - S cached keys
//!   and its new keys go right after them.
//! - present_key/value has max(total_sequence_length, P) rows: when past and present share
//!   one buffer (P is the maximum length) that is P. Rows past_b.. past_b + S - 1 are the new
//!   keys, rows before them the past's, and the rest zero, as ONNX Runtime writes them into a
//!   present that is not the past's buffer.
//! - local_window_size W: a row sees its W last keys (itself included).

use super::core::{Buf, Lens, Offset, Pack, Plan, Rotary, Rows};
use super::{Attention, Mapping};
use crate::tensor::DType;
use crate::util::{const_input, opt, req};
use crate::{InferInput, NodeSpec, Op, OpError, ValueType};

const NAME: &str = "GroupQueryAttention";
const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16];

#[derive(Debug)]
pub struct Gqa {
    q_heads: usize,
    kv_heads: usize,
    scale: f32,
    softcap: f32,
    window: Option<usize>,
    rotary: bool,
    interleaved: bool,
    causal: bool,
    num_outputs: usize,
}

fn unsupported(what: &str) -> OpError {
    OpError::unsupported(format!("{NAME} with {what}"))
}

fn invalid(what: String) -> OpError {
    OpError::invalid(format!("{NAME}: {what}"))
}

pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Attention(mapping(spec)?)))
}

/// The node's attributes, checked.
pub fn mapping(spec: &NodeSpec<'_>) -> Result<Gqa, OpError> {
    let a = spec.attrs;
    let heads = |name: &str| match a.int_opt(name)? {
        Some(h) if h > 0 => Ok(h as usize),
        h => Err(invalid(format!("{name} must be a positive int, got {h:?}"))),
    };
    let (q_heads, kv_heads) = (heads("num_heads")?, heads("kv_num_heads")?);
    if !q_heads.is_multiple_of(kv_heads) {
        return Err(invalid(format!(
            "num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}"
        )));
    }
    for (attr, what) in [
        ("smooth_softmax", "smooth_softmax (a softmax sink)"),
        ("qk_output", "qk_output"),
        (
            "sliding_window_cache",
            "sliding_window_cache (a windowed KV cache)",
        ),
    ] {
        if a.int(attr, 0)? != 0 {
            return Err(unsupported(what));
        }
    }
    for q in ["k_quant_type", "v_quant_type"] {
        if a.string(q, "NONE")? != "NONE" {
            return Err(unsupported("a quantized KV cache"));
        }
    }
    let causal = match a.int("causal", 1)? {
        0 => false,
        1 => true,
        c => return Err(invalid(format!("causal must be 0 or 1, got {c}"))),
    };
    let window = match a.int("local_window_size", -1)? {
        -1 => None,
        w if w > 0 && causal => Some(w as usize),
        w => {
            return Err(invalid(format!(
                "local_window_size must be -1 or positive (with causal 1), got {w}"
            )));
        }
    };
    Ok(Gqa {
        q_heads,
        kv_heads,
        scale: a.float("scale", 0.0)?,
        softcap: a.float("softcap", 0.0)?,
        window,
        rotary: a.int("do_rotary", 0)? != 0,
        interleaved: a.int("rotary_interleaved", 0)? != 0,
        causal,
        num_outputs: spec.num_outputs.max(1),
    })
}

impl Gqa {
    /// (packed, head size) from query and key.
    fn head_size(&self, q: &ValueType, k: Option<&ValueType>) -> Result<(bool, usize), OpError> {
        let w = match q.shape.as_slice() {
            &[_, _, w] => w,
            s => return Err(invalid(format!("query must be 3-D, got shape {s:?}"))),
        };
        let heads = match k {
            None => self.q_heads + 2 * self.kv_heads,
            Some(_) => self.q_heads,
        };
        if !w.is_multiple_of(heads) {
            return Err(invalid(format!(
                "query's hidden size {w} does not split into {heads} heads"
            )));
        }
        Ok((k.is_none(), w / heads))
    }

    /// The rotary tables' layout, checked against the head size.
    fn rotary(
        &self,
        inputs: &[Option<InferInput<'_>>],
        d: usize,
    ) -> Result<Option<Rotary>, OpError> {
        if !self.rotary {
            return Ok(None);
        }
        let (Some(c), Some(s)) = (opt(inputs, 7), opt(inputs, 8)) else {
            return Err(invalid("do_rotary needs cos_cache and sin_cache".into()));
        };
        let (positions, half) = match c.ty.shape.as_slice() {
            &[n, h] if 2 * h <= d && h > 0 => (n, h),
            sh => {
                return Err(invalid(format!(
                    "cos_cache must be [positions, at most head size / 2 = {}], got {sh:?}",
                    d / 2
                )));
            }
        };
        if s.ty.shape != c.ty.shape {
            return Err(invalid(
                "cos_cache and sin_cache must have one shape".into(),
            ));
        }
        Ok(Some(Rotary {
            cos: 7,
            sin: 8,
            half,
            positions,
            interleaved: self.interleaved,
        }))
    }
}

/// The sizes of one node's inputs.
struct Geo {
    dtype: DType,
    b: usize,
    s: usize,
    d: usize,
    /// The query input's row width.
    width: usize,
    packed: bool,
    past: Option<usize>,
    total: usize,
    /// The present's length.
    len: usize,
}

/// Inputs this implementation refuses, with what they are for.
const REFUSED: [(usize, &str); 8] = [
    (9, "position_ids"),
    (10, "attention_bias"),
    (11, "head_sink"),
    (12, "k_scale (a quantized KV cache)"),
    (13, "v_scale (a quantized KV cache)"),
    (14, "q_norm_weight"),
    (15, "k_norm_weight"),
    (16, "query_seqlens"),
];

impl Gqa {
    fn geometry(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Geo, OpError> {
        if let Some((_, what)) = REFUSED.iter().find(|(i, _)| opt(inputs, *i).is_some()) {
            return Err(unsupported(what));
        }
        let q = req(inputs, 0)?.ty;
        crate::util::expect_dtype(q, FLOATS, "GroupQueryAttention's query")?;
        let dtype = q.dtype;
        let (k, v) = (opt(inputs, 1).map(|i| i.ty), opt(inputs, 2).map(|i| i.ty));
        if k.is_some() != v.is_some() {
            return Err(invalid(
                "key and value go together (both absent: packed QKV)".into(),
            ));
        }
        let (packed, d) = self.head_size(q, k)?;
        let (b, s, width) = (q.shape[0], q.shape[1], q.shape[2]);
        let hkv = self.kv_heads;
        for t in [k, v].into_iter().flatten() {
            if t.shape != [b, s, hkv * d] || t.dtype != dtype {
                return Err(invalid(format!(
                    "key and value must be {dtype} [{b}, {s}, {}], got {t}",
                    hkv * d
                )));
            }
        }
        let past = match (opt(inputs, 3), opt(inputs, 4)) {
            (None, None) => None,
            (Some(pk), Some(pv)) => {
                let n = pk.ty.shape.get(2).copied().unwrap_or(0);
                for t in [pk.ty, pv.ty] {
                    if t.shape != [b, hkv, n, d] || t.dtype != dtype {
                        return Err(invalid(format!(
                            "past_key and past_value must be {dtype} [{b}, {hkv}, past, {d}], \
                             got {t}"
                        )));
                    }
                }
                Some(n)
            }
            _ => return Err(invalid("past_key and past_value go together".into())),
        };
        let seqlens = req(inputs, 5)?.ty;
        if seqlens.dtype != DType::I32 || seqlens.shape != [b] {
            return Err(invalid(format!(
                "seqlens_k must be int32 [{b}], got {seqlens}"
            )));
        }
        let total = const_input(inputs, 6)?
            .to_i64_vec()
            .ok()
            .filter(|v| v.len() == 1 && v[0] >= 0)
            .ok_or_else(|| invalid("total_sequence_length must be one int32 >= 0".into()))?[0]
            as usize;
        if s != total && past.is_none() {
            return Err(invalid(format!(
                "{s} new rows with total_sequence_length {total} need past_key and past_value"
            )));
        }
        Ok(Geo {
            dtype,
            b,
            s,
            d,
            width,
            packed,
            past,
            total,
            len: total.max(past.unwrap_or(0)),
        })
    }

    /// The present key and value (written to the outputs, or scratch when they are not
    /// wanted), the rotated query, and where the attention reads its q, k, v.
    fn packs(&self, g: &Geo, rotary: Option<Rotary>) -> ([Rows; 3], Vec<Pack>, Vec<usize>) {
        let (hq, hkv, d, s) = (self.q_heads, self.kv_heads, g.d, g.s);
        let (k_src, v_src) = if g.packed {
            (
                Rows::bsnh(Buf::Input(0), s, g.width, d, hq * d),
                Rows::bsnh(Buf::Input(0), s, g.width, d, (hq + hkv) * d),
            )
        } else {
            (
                Rows::bsnh(Buf::Input(1), s, hkv * d, d, 0),
                Rows::bsnh(Buf::Input(2), s, hkv * d, d, 0),
            )
        };
        let mut scratch = vec![];
        let mut packs = vec![];
        let mut cache = |src: Rows, out: usize, past: usize, rotary: Option<Rotary>| {
            let dst = if self.num_outputs > out {
                Buf::Output(out)
            } else {
                scratch.push(g.b * hkv * g.len * d);
                Buf::Scratch(scratch.len() - 1)
            };
            packs.push(Pack {
                src,
                heads: hkv,
                dim: d,
                rows: s,
                dst,
                len: g.len,
                past: g.past.map(|_| past),
                past_len: g.past.unwrap_or(0),
                into_past: true,
                rotary,
                bias: None,
            });
            Rows::bnsh(dst, hkv, g.len, d)
        };
        let k = cache(k_src, 1, 3, rotary);
        let v = cache(v_src, 2, 4, None);
        let mut q = Rows::bsnh(Buf::Input(0), s, g.width, d, 0);
        if rotary.is_some() {
            scratch.push(g.b * hq * s * d);
            let dst = Buf::Scratch(scratch.len() - 1);
            packs.push(Pack {
                src: q,
                heads: hq,
                dim: d,
                rows: s,
                dst,
                len: s,
                past: None,
                past_len: 0,
                into_past: false,
                rotary,
                bias: None,
            });
            q = Rows::bnsh(dst, hq, s, d);
        }
        ([q, k, v], packs, scratch)
    }
}

impl Mapping for Gqa {
    /// past_key -> present_key and past_value -> present_value: the cache pass
    /// (attention_pack.comp) writes only the new rows when the present is the past's buffer,
    /// and attention reads the present after it.
    fn writes_in_place(&self, input: usize, output: usize) -> bool {
        matches!((input, output), (3, 1) | (4, 2))
    }

    fn plan(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(Plan, Vec<ValueType>), OpError> {
        let g = self.geometry(inputs)?;
        let (hq, hkv, d) = (self.q_heads, self.kv_heads, g.d);
        let rotary = self.rotary(inputs, d)?;
        let mut outs = vec![ValueType::new(g.dtype, vec![g.b, g.s, hq * d])];
        for _ in 1..self.num_outputs.min(3) {
            outs.push(ValueType::new(g.dtype, vec![g.b, hkv, g.len, d]));
        }
        let ([q, k, v], packs, scratch) = self.packs(&g, rotary);
        let plan = Plan {
            op: NAME,
            dtype: g.dtype,
            batch: g.b,
            q_heads: hq,
            kv_heads: hkv,
            q_len: g.s,
            kv_len: g.len,
            head_dim: d,
            v_head_dim: d,
            scale: if self.scale == 0.0 {
                1.0 / (d as f32).sqrt()
            } else {
                self.scale
            },
            softcap: self.softcap,
            filter: 0.0,
            causal: self.causal,
            window: self.window,
            // The first prompt starts at position 0 whatever the lengths say.
            offset: if g.s == g.total {
                Offset::Fixed(0)
            } else {
                Offset::FromLens
            },
            lens: Some(Lens {
                input: 5,
                int64: false,
                plus: 1,
                exclude: true,
            }),
            masks: vec![],
            packs,
            scratch,
            q,
            k,
            v,
            y: Rows::bsnh(Buf::Output(0), g.s, hq * d, d, 0),
            qk: None,
        };
        Ok((plan, outs))
    }
}
