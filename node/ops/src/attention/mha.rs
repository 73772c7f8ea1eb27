//! com.microsoft MultiHeadAttention, as ONNX Runtime's CPU kernel computes it (Optimum's
//! and ORT's transformer optimizer's fused attention).
//!
//! query [B, S, N * D] (or packed QKV [B, S, N, 3, D]); key/value [B, L, N * D] and
//! [B, L, N * Dv] (or packed KV [B, L, N, 2, D] as key, or BNSH [B, N, L, D] caches for
//! cross attention); bias [N * D + N * D + N * Dv] added to query, key and value (to the
//! query only with BNSH key and value); past_key/past_value [B, N, P, D] concatenated before
//! the new keys; key_padding_mask (int32 [B] valid lengths, or [B, T] / [B, S, T] with 0 for
//! padding): padded keys get mask_filter_value added, they are not left out; attention_bias
//! [B or 1, N or 1, S, T] added to the scores; unidirectional leaves out keys after the row's
//! position (P + s).

use super::core::{Buf, Lens, Mask, MaskKind, Offset, Pack, Plan, QkMode, Rows};
use super::{Attention, Mapping};
use crate::tensor::DType;
use crate::util::{opt, req};
use crate::{InferInput, NodeSpec, Op, OpError, ValueType};

const NAME: &str = "MultiHeadAttention";
const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16];

#[derive(Debug)]
pub struct Mha {
    heads: usize,
    scale: f32,
    filter: f32,
    causal: bool,
    num_outputs: usize,
}

fn invalid(what: String) -> OpError {
    OpError::invalid(format!("{NAME}: {what}"))
}

fn unsupported(what: &str) -> OpError {
    OpError::unsupported(format!("{NAME} with {what}"))
}

pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Attention(mapping(spec)?)))
}

/// The node's attributes, checked.
pub fn mapping(spec: &NodeSpec<'_>) -> Result<Mha, OpError> {
    let a = spec.attrs;
    let heads = match a.int_opt("num_heads")? {
        Some(h) if h > 0 => h as usize,
        h => {
            return Err(invalid(format!(
                "num_heads must be a positive int, got {h:?}"
            )));
        }
    };
    Ok(Mha {
        heads,
        scale: a.float("scale", 0.0)?,
        filter: a.float("mask_filter_value", -10000.0)?,
        causal: a.int("unidirectional", 0)? != 0,
        num_outputs: spec.num_outputs.max(1),
    })
}

/// How the query, key and value arrive.
struct Sources {
    b: usize,
    s: usize,
    l: usize,
    d: usize,
    dv: usize,
    q: Rows,
    k: Rows,
    v: Rows,
    /// Key and value are BNSH caches (cross attention): read as they are.
    cached: bool,
    packed: bool,
}

impl Mha {
    fn sources(
        &self,
        q: &ValueType,
        k: Option<&ValueType>,
        v: Option<&ValueType>,
    ) -> Result<Sources, OpError> {
        let n = self.heads;
        let width = |w: usize, what: &str| {
            if w.is_multiple_of(n) {
                Ok(w / n)
            } else {
                Err(invalid(format!(
                    "{what}'s hidden size {w} does not split into {n} heads"
                )))
            }
        };
        let packed_rows = |buf, seq: usize, parts: usize, h: usize, part: usize| Rows {
            buf,
            off: part * h,
            sb: seq * n * parts * h,
            sh: parts * h,
            ss: n * parts * h,
        };
        match (
            q.shape.as_slice(),
            k.map(|k| k.shape.as_slice()),
            v.map(|v| v.shape.as_slice()),
        ) {
            (&[b, s, nn, 3, h], None, None) if nn == n => Ok(Sources {
                b,
                s,
                l: s,
                d: h,
                dv: h,
                q: packed_rows(Buf::Input(0), s, 3, h, 0),
                k: packed_rows(Buf::Input(0), s, 3, h, 1),
                v: packed_rows(Buf::Input(0), s, 3, h, 2),
                cached: false,
                packed: true,
            }),
            (&[b, s, w], Some(&[kb, l, nn, 2, h]), None) if kb == b && nn == n && w == n * h => {
                Ok(Sources {
                    b,
                    s,
                    l,
                    d: h,
                    dv: h,
                    q: Rows::bsnh(Buf::Input(0), s, w, h, 0),
                    k: packed_rows(Buf::Input(1), l, 2, h, 0),
                    v: packed_rows(Buf::Input(1), l, 2, h, 1),
                    cached: false,
                    packed: true,
                })
            }
            (&[b, s, w], Some(&[kb, l, kw]), Some(&[vb, vl, vw]))
                if kb == b && vb == b && vl == l =>
            {
                let (d, dv) = (width(w, "query")?, width(vw, "value")?);
                if width(kw, "key")? != d {
                    return Err(invalid(format!(
                        "key's head size differs from query's ({d})"
                    )));
                }
                Ok(Sources {
                    b,
                    s,
                    l,
                    d,
                    dv,
                    q: Rows::bsnh(Buf::Input(0), s, w, d, 0),
                    k: Rows::bsnh(Buf::Input(1), l, kw, d, 0),
                    v: Rows::bsnh(Buf::Input(2), l, vw, dv, 0),
                    cached: false,
                    packed: false,
                })
            }
            (&[b, s, w], Some(&[kb, kn, l, d]), Some(&[vb, vn, vl, dv]))
                if kb == b && vb == b && kn == n && vn == n && vl == l && w == n * d =>
            {
                Ok(Sources {
                    b,
                    s,
                    l,
                    d,
                    dv,
                    q: Rows::bsnh(Buf::Input(0), s, w, d, 0),
                    k: Rows::bnsh(Buf::Input(1), n, l, d),
                    v: Rows::bnsh(Buf::Input(2), n, l, dv),
                    cached: true,
                    packed: false,
                })
            }
            (qs, ks, vs) => Err(invalid(format!(
                "query {qs:?}, key {ks:?} and value {vs:?} do not fit any of its input forms \
                 for {n} heads"
            ))),
        }
    }

    /// The key padding mask: lengths, or a mask of 0/1 per key.
    fn padding(
        &self,
        m: &ValueType,
        (b, s, t): (usize, usize, usize),
    ) -> Result<(Option<Lens>, Option<Mask>), OpError> {
        if m.dtype != DType::I32 {
            return Err(invalid(format!(
                "key_padding_mask must be int32, got {}",
                m.dtype
            )));
        }
        let keep = |strides| Mask {
            input: 4,
            kind: MaskKind::Keep,
            strides,
            cols: t,
        };
        match m.shape.as_slice() {
            &[n] if n == b => Ok((
                Some(Lens {
                    input: 4,
                    int64: false,
                    plus: 0,
                    exclude: false,
                }),
                None,
            )),
            &[n, c] if n == b && c == t => Ok((None, Some(keep([t, 0, 0, 1])))),
            &[n, r, c] if n == b && r == s && c == t => Ok((None, Some(keep([s * t, 0, t, 1])))),
            sh => Err(unsupported(&format!(
                "key_padding_mask of shape {sh:?} (supported: [{b}], [{b}, {t}], [{b}, {s}, {t}])"
            ))),
        }
    }
}

/// attention_bias [B or 1, N or 1, S, T].
fn attention_bias(
    m: &ValueType,
    dtype: DType,
    (b, n, s, t): (usize, usize, usize, usize),
) -> Result<Mask, OpError> {
    match m.shape.as_slice() {
        &[mb, mn, ms, mt]
            if (mb == b || mb == 1)
                && (mn == n || mn == 1)
                && ms == s
                && mt == t
                && m.dtype == dtype =>
        {
            Ok(Mask {
                input: 5,
                kind: MaskKind::Float,
                strides: [
                    if mb == 1 { 0 } else { mn * s * t },
                    if mn == 1 { 0 } else { s * t },
                    t,
                    1,
                ],
                cols: t,
            })
        }
        _ => Err(invalid(format!(
            "attention_bias must be {dtype} [{b} or 1, {n} or 1, {s}, {t}], got {m}"
        ))),
    }
}

impl Mha {
    /// The sources, the bias (checked) and the past's length.
    fn inputs(
        &self,
        inputs: &[Option<InferInput<'_>>],
    ) -> Result<(Sources, Option<DType>, Option<usize>), OpError> {
        if opt(inputs, 8).is_some() {
            return Err(unsupported(
                "past_sequence_length (a shared past/present buffer)",
            ));
        }
        if opt(inputs, 9).is_some() {
            return Err(unsupported("cache_indirection (beam search)"));
        }
        let q = req(inputs, 0)?.ty;
        crate::util::expect_dtype(q, FLOATS, "MultiHeadAttention's query")?;
        let dtype = q.dtype;
        let (k, v) = (opt(inputs, 1).map(|i| i.ty), opt(inputs, 2).map(|i| i.ty));
        if [k, v].into_iter().flatten().any(|t| t.dtype != dtype) {
            return Err(invalid(format!("key and value must be {dtype} like query")));
        }
        let src = self.sources(q, k, v)?;
        let (b, d, dv, n) = (src.b, src.d, src.dv, self.heads);
        if let Some(bt) = opt(inputs, 3).map(|t| t.ty) {
            if src.packed {
                return Err(unsupported("bias and packed query/key/value"));
            }
            if bt.shape != [2 * n * d + n * dv] || bt.dtype != dtype {
                return Err(invalid(format!(
                    "bias must be {dtype} [{}], got {bt}",
                    2 * n * d + n * dv
                )));
            }
        }
        let past = match (opt(inputs, 6), opt(inputs, 7)) {
            (None, None) => None,
            (Some(_), Some(_)) if src.cached => {
                return Err(unsupported("past_key with BNSH key and value"));
            }
            (Some(pk), Some(pv)) => {
                let pl = pk.ty.shape.get(2).copied().unwrap_or(0);
                let fits = |t: &ValueType, dim| t.shape == [b, n, pl, dim] && t.dtype == dtype;
                if !fits(pk.ty, d) || !fits(pv.ty, dv) {
                    return Err(invalid(format!(
                        "past_key {} and past_value {} must be {dtype} [{b}, {n}, past, {d}] \
                         and [{b}, {n}, past, {dv}]",
                        pk.ty, pv.ty
                    )));
                }
                Some(pl)
            }
            _ => return Err(invalid("past_key and past_value go together".into())),
        };
        Ok((src, opt(inputs, 3).map(|_| dtype), past))
    }

    fn outputs(&self, dtype: DType, src: &Sources, t: usize) -> Result<Vec<ValueType>, OpError> {
        let (b, s, d, dv, n) = (src.b, src.s, src.d, src.dv, self.heads);
        let nout = self.num_outputs;
        if src.cached && nout > 1 {
            return Err(unsupported("present outputs of BNSH key and value"));
        }
        if self.causal && nout > 3 {
            return Err(unsupported("the qk output with unidirectional"));
        }
        let all = [
            vec![b, s, n * dv],
            vec![b, n, t, d],
            vec![b, n, t, dv],
            vec![b, n, s, t],
        ];
        Ok(all
            .into_iter()
            .take(nout.min(4))
            .map(|s| ValueType::new(dtype, s))
            .collect())
    }

    /// The biased query, the present key and value: where the attention reads q, k, v.
    fn packs(
        &self,
        src: &Sources,
        bias: bool,
        past: Option<usize>,
    ) -> ([Rows; 3], Vec<Pack>, Vec<usize>) {
        let (b, s, l, d, dv, n) = (src.b, src.s, src.l, src.d, src.dv, self.heads);
        let p = past.unwrap_or(0);
        let t = p + l;
        let nout = self.num_outputs;
        let mut scratch = vec![];
        let mut packs = vec![];
        let mut pack =
            |src: Rows, dim: usize, rows: usize, out: Option<(usize, usize)>, bias_at: usize| {
                let len = if out.is_some() { t } else { rows };
                let dst = match out {
                    Some((o, _)) if nout > o => Buf::Output(o),
                    _ => {
                        scratch.push(b * n * len * dim);
                        Buf::Scratch(scratch.len() - 1)
                    }
                };
                packs.push(Pack {
                    src,
                    heads: n,
                    dim,
                    rows,
                    dst,
                    len,
                    past: out.and_then(|(_, past_in)| past.map(|_| past_in)),
                    past_len: p,
                    into_past: out.is_some(),
                    rotary: None,
                    bias: bias.then_some((3, bias_at)),
                });
                Rows::bnsh(dst, n, len, dim)
            };
        let q = if bias {
            pack(src.q, d, s, None, 0)
        } else {
            src.q
        };
        if src.cached || (past.is_none() && !bias && nout == 1) {
            return ([q, src.k, src.v], packs, scratch);
        }
        let k = pack(src.k, d, l, Some((1, 6)), n * d);
        let v = pack(src.v, dv, l, Some((2, 7)), 2 * n * d);
        ([q, k, v], packs, scratch)
    }
}

impl Mapping for Mha {
    fn plan(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(Plan, Vec<ValueType>), OpError> {
        let (src, bias, past) = self.inputs(inputs)?;
        let dtype = req(inputs, 0)?.ty.dtype;
        let (b, s, n) = (src.b, src.s, self.heads);
        let p = past.unwrap_or(0);
        let t = p + src.l;
        let (lens, mut masks) = match opt(inputs, 4) {
            Some(m) => {
                let (lens, mask) = self.padding(m.ty, (b, s, t))?;
                (lens, mask.into_iter().collect())
            }
            None => (None, vec![]),
        };
        if let Some(m) = opt(inputs, 5) {
            masks.push(attention_bias(m.ty, dtype, (b, n, s, t))?);
        }
        let outs = self.outputs(dtype, &src, t)?;
        let ([q, k, v], packs, scratch) = self.packs(&src, bias.is_some(), past);
        let plan = Plan {
            op: NAME,
            dtype,
            batch: b,
            q_heads: n,
            kv_heads: n,
            q_len: s,
            kv_len: t,
            head_dim: src.d,
            v_head_dim: src.dv,
            scale: if self.scale == 0.0 {
                1.0 / (src.d as f32).sqrt()
            } else {
                self.scale
            },
            softcap: 0.0,
            filter: self.filter,
            causal: self.causal,
            window: None,
            offset: Offset::Fixed(p),
            lens,
            masks,
            packs,
            scratch,
            q,
            k,
            v,
            y: Rows::bsnh(Buf::Output(0), s, n * src.dv, src.dv, 0),
            qk: (outs.len() >= 4).then_some((3, QkMode::Biased)),
        };
        Ok((plan, outs))
    }
}
