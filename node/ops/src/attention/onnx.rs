//! ONNX's Attention (opset 23; opset 24 adds nonpad_kv_seqlen): Q, K, V in 4-D
//! (batch, heads, seq, head size) or 3-D (batch, seq, heads * head size) form, an optional
//! bool or float mask (broadcast, and possibly shorter than the keys: the rest is masked), a
//! past key/value concatenated before the new ones, and the per-batch valid key count.

use super::core::{Buf, Lens, Mask, MaskKind, Offset, Pack, Plan, QkMode, Rows};
use super::{Attention, Mapping};
use crate::tensor::DType;
use crate::util::{opt, req};
use crate::{InferInput, NodeSpec, Op, OpError, ValueType};

const NAME: &str = "Attention";
const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16];

#[derive(Debug)]
pub struct OnnxAttention {
    causal: bool,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    qk_mode: QkMode,
    scale: Option<f32>,
    softcap: f32,
    num_outputs: usize,
}

pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Attention(mapping(spec)?)))
}

/// The node's attributes, checked.
pub fn mapping(spec: &NodeSpec<'_>) -> Result<OnnxAttention, OpError> {
    let a = spec.attrs;
    if spec.opset < 23 {
        return Err(OpError::unsupported(format!(
            "Attention of opset {}: the op exists from opset 23",
            spec.opset
        )));
    }
    for w in ["left_window_size", "right_window_size"] {
        if a.int(w, -1)? != -1 {
            return Err(OpError::unsupported(format!(
                "Attention with {w}: sliding windows are not implemented"
            )));
        }
    }
    let heads = |name: &str| -> Result<Option<usize>, OpError> {
        match a.int_opt(name)? {
            None => Ok(None),
            Some(h) if h > 0 => Ok(Some(h as usize)),
            Some(h) => Err(OpError::invalid(format!(
                "Attention: {name} must be positive, got {h}"
            ))),
        }
    };
    let qk_mode = match a.int("qk_matmul_output_mode", 0)? {
        0 => QkMode::Raw,
        1 => QkMode::Softcapped,
        2 => QkMode::Biased,
        3 => QkMode::Probs,
        m => {
            return Err(OpError::invalid(format!(
                "Attention: qk_matmul_output_mode must be 0 to 3, got {m}"
            )));
        }
    };
    Ok(OnnxAttention {
        causal: a.int("is_causal", 0)? != 0,
        q_heads: heads("q_num_heads")?,
        kv_heads: heads("kv_num_heads")?,
        qk_mode,
        scale: a.float_opt("scale")?,
        softcap: a.float("softcap", 0.0)?,
        num_outputs: spec.num_outputs.max(1),
    })
}

fn invalid(what: String) -> OpError {
    OpError::invalid(format!("{NAME}: {what}"))
}

/// (batch, heads, seq, head size) of Q, K or V; `heads` is the attribute for 3-D inputs.
fn dims(t: &ValueType, heads: Option<usize>, what: &str) -> Result<[usize; 4], OpError> {
    match (t.shape.as_slice(), heads) {
        (&[b, h, s, d], _) => Ok([b, h, s, d]),
        (&[b, s, w], Some(h)) if w.is_multiple_of(h) => Ok([b, h, s, w / h]),
        (&[_, _, w], Some(h)) => Err(invalid(format!(
            "{what}'s hidden size {w} does not split into {h} heads"
        ))),
        (&[_, _, _], None) => Err(invalid(format!(
            "3-D {what} needs the q_num_heads and kv_num_heads attributes"
        ))),
        (s, _) => Err(invalid(format!(
            "{what} must be 3-D or 4-D, got shape {s:?}"
        ))),
    }
}

fn rows(t: &ValueType, buf: Buf, [_, h, s, d]: [usize; 4]) -> Rows {
    if t.shape.len() == 4 {
        Rows::bnsh(buf, h, s, d)
    } else {
        Rows::bsnh(buf, s, h * d, d, 0)
    }
}

/// The mask's layout over (batch, query head, query row, key), checking it broadcasts.
fn mask(m: &ValueType, dtype: DType, full: [usize; 4]) -> Result<Mask, OpError> {
    let kind = match m.dtype {
        DType::Bool => MaskKind::Bool,
        d if d == dtype => MaskKind::Float,
        d => {
            return Err(invalid(format!(
                "attn_mask must be bool or {dtype} like Q, found {d}"
            )));
        }
    };
    let r = m.shape.len();
    if !(1..=4).contains(&r) {
        return Err(invalid(format!("attn_mask must have rank 1 to 4, got {r}")));
    }
    let own = crate::tensor::strides(&m.shape);
    let mut strides = [0; 4];
    for (i, (&n, &st)) in m.shape.iter().zip(&own).enumerate() {
        let axis = 4 - r + i;
        let fits = if axis == 3 {
            n <= full[3]
        } else {
            n == full[axis] || n == 1
        };
        if !fits {
            return Err(invalid(format!(
                "attn_mask of shape {:?} does not broadcast to {full:?}",
                m.shape
            )));
        }
        strides[axis] = if n == 1 && axis != 3 { 0 } else { st };
    }
    Ok(Mask {
        input: 3,
        kind,
        strides,
        cols: m.shape[r - 1],
    })
}

/// The sizes of one node's inputs.
struct Geo {
    dtype: DType,
    b: usize,
    hq: usize,
    hkv: usize,
    s: usize,
    l: usize,
    d: usize,
    dv: usize,
    /// Past keys (0 without past).
    p: usize,
    past: bool,
}

impl OnnxAttention {
    fn geometry(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Geo, OpError> {
        let (q, k, v) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty, req(inputs, 2)?.ty);
        crate::util::expect_dtype(q, FLOATS, "Attention's Q")?;
        let dtype = q.dtype;
        if k.dtype != dtype || v.dtype != dtype {
            return Err(invalid(format!("K and V must be {dtype} like Q")));
        }
        if k.shape.len() != q.shape.len() || v.shape.len() != q.shape.len() {
            return Err(invalid("Q, K and V must all be 3-D or all 4-D".into()));
        }
        let [b, hq, s, d] = dims(q, self.q_heads, "Q")?;
        let [kb, hkv, l, kd] = dims(k, self.kv_heads, "K")?;
        let [vb, vh, vl, dv] = dims(v, self.kv_heads, "V")?;
        if kb != b || vb != b || vh != hkv || vl != l || kd != d {
            return Err(invalid(format!(
                "K {:?} and V {:?} do not fit Q {:?}",
                k.shape, v.shape, q.shape
            )));
        }
        if hkv == 0 || !hq.is_multiple_of(hkv) {
            return Err(invalid(format!(
                "{hq} query heads are not a multiple of {hkv} key/value heads"
            )));
        }
        let p = match (opt(inputs, 4), opt(inputs, 5)) {
            (None, None) => None,
            (Some(pk), Some(pv)) => {
                let (pk, pv) = (pk.ty, pv.ty);
                let n = pk.shape.get(2).copied().unwrap_or(0);
                if pk.shape != [b, hkv, n, d] || pv.shape != [b, hkv, n, dv] {
                    return Err(invalid(format!(
                        "past_key {:?} and past_value {:?} must be [{b}, {hkv}, past, {d}] \
                         and [{b}, {hkv}, past, {dv}]",
                        pk.shape, pv.shape
                    )));
                }
                if pk.dtype != dtype || pv.dtype != dtype {
                    return Err(invalid(format!("past_key and past_value must be {dtype}")));
                }
                Some(n)
            }
            _ => return Err(invalid("past_key and past_value go together".into())),
        };
        Ok(Geo {
            dtype,
            b,
            hq,
            hkv,
            s,
            l,
            d,
            dv,
            p: p.unwrap_or(0),
            past: p.is_some(),
        })
    }

    fn outputs(&self, g: &Geo, four: bool) -> Vec<ValueType> {
        let (t, n) = (g.p + g.l, self.num_outputs);
        let y = if four {
            vec![g.b, g.hq, g.s, g.dv]
        } else {
            vec![g.b, g.s, g.hq * g.dv]
        };
        let all = [
            y,
            vec![g.b, g.hkv, t, g.d],
            vec![g.b, g.hkv, t, g.dv],
            vec![g.b, g.hq, g.s, t],
        ];
        all.into_iter()
            .take(n.min(4))
            .map(|s| ValueType::new(g.dtype, s))
            .collect()
    }
}

/// nonpad_kv_seqlen (opset 24), as per-batch lengths.
fn nonpad(inputs: &[Option<InferInput<'_>>], g: &Geo) -> Result<Option<Lens>, OpError> {
    match opt(inputs, 6) {
        None => Ok(None),
        Some(_) if g.past => Err(invalid(
            "nonpad_kv_seqlen cannot be used with past_key and past_value".into(),
        )),
        Some(n) if n.ty.shape == [g.b] && n.ty.dtype == DType::I64 => Ok(Some(Lens {
            input: 6,
            int64: true,
            plus: 0,
            exclude: true,
        })),
        Some(n) => Err(invalid(format!(
            "nonpad_kv_seqlen must be int64 of shape [{}], got {}",
            g.b, n.ty
        ))),
    }
}

/// The present key and value (past, then new rows), written when they are outputs or when a
/// past makes them the keys attended; and where the attention then reads keys and values.
fn caches(g: &Geo, outputs: usize, k_in: Rows, v_in: Rows) -> (Rows, Rows, Vec<Pack>, Vec<usize>) {
    let t = g.p + g.l;
    let mut scratch = vec![];
    let mut packs = vec![];
    let mut present = |src: Rows, dim: usize, out: usize, past_in: usize| -> Rows {
        let dst = if outputs > out {
            Buf::Output(out)
        } else if g.past {
            scratch.push(g.b * g.hkv * t * dim);
            Buf::Scratch(scratch.len() - 1)
        } else {
            return src;
        };
        packs.push(Pack {
            src,
            heads: g.hkv,
            dim,
            rows: g.l,
            dst,
            len: t,
            past: g.past.then_some(past_in),
            past_len: g.p,
            into_past: true,
            rotary: None,
            bias: None,
        });
        // Without past the inputs are the keys: read them in place.
        if g.past {
            Rows::bnsh(dst, g.hkv, t, dim)
        } else {
            src
        }
    };
    let k = present(k_in, g.d, 1, 4);
    let v = present(v_in, g.dv, 2, 5);
    (k, v, packs, scratch)
}

impl Mapping for OnnxAttention {
    fn plan(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(Plan, Vec<ValueType>), OpError> {
        let g = self.geometry(inputs)?;
        let (q, k, v) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty, req(inputs, 2)?.ty);
        let t = g.p + g.l;
        let lens = nonpad(inputs, &g)?;
        let masks = match opt(inputs, 3) {
            Some(m) => vec![mask(m.ty, g.dtype, [g.b, g.hq, g.s, t])?],
            None => vec![],
        };
        let outs = self.outputs(&g, q.shape.len() == 4);
        let k_in = rows(k, Buf::Input(1), [g.b, g.hkv, g.l, g.d]);
        let v_in = rows(v, Buf::Input(2), [g.b, g.hkv, g.l, g.dv]);
        let (k_rows, v_rows, packs, scratch) = caches(&g, outs.len(), k_in, v_in);
        let plan = Plan {
            op: NAME,
            dtype: g.dtype,
            batch: g.b,
            q_heads: g.hq,
            kv_heads: g.hkv,
            q_len: g.s,
            kv_len: t,
            head_dim: g.d,
            v_head_dim: g.dv,
            scale: self.scale.unwrap_or(1.0 / (g.d as f32).sqrt()),
            softcap: self.softcap,
            filter: 0.0,
            causal: self.causal,
            window: None,
            offset: if lens.is_some() {
                Offset::FromLens
            } else {
                Offset::Fixed(g.p)
            },
            lens,
            masks,
            packs,
            scratch,
            q: rows(q, Buf::Input(0), [g.b, g.hq, g.s, g.d]),
            k: k_rows,
            v: v_rows,
            y: rows(&outs[0], Buf::Output(0), [g.b, g.hq, g.s, g.dv]),
            qk: (outs.len() >= 4).then_some((3, self.qk_mode)),
        };
        Ok((plan, outs))
    }
}
