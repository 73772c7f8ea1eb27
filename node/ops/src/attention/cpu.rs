//! The CPU kernel of a [`Plan`]: the packs (present key/value, rotated query), then the
//! attention row by row, in f32 with the scores of one row at a time. Values of a 16-bit
//! type are rounded to it wherever the GPU stores them (packed rows, outputs).

use super::core::{Buf, MaskKind, Pack, Plan, QkMode};
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor};
use crate::{OpError, ValueType};

/// The buffers of one run, as f32.
struct State<'a> {
    plan: &'a Plan,
    inputs: Vec<Option<Vec<f32>>>,
    outputs: Vec<Vec<f32>>,
    scratch: Vec<Vec<f32>>,
    lens: Vec<i64>,
    round: fn(f32) -> f32,
}

fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

fn as_f32(t: &Tensor) -> Result<Vec<f32>, OpError> {
    Ok(match t.dtype() {
        DType::F32 => t.view::<f32>().map_err(bad)?.into_owned(),
        DType::Bool => t
            .view_bool()
            .map_err(bad)?
            .iter()
            .map(|&b| b as u8 as f32)
            .collect(),
        d if d.is_float() => t
            .to_f64_vec()
            .map_err(bad)?
            .iter()
            .map(|&v| v as f32)
            .collect(),
        _ => t
            .to_i64_vec()
            .map_err(bad)?
            .iter()
            .map(|&v| v as f32)
            .collect(),
    })
}

fn bad(e: crate::tensor::TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

/// The per-batch lengths of `plan.lens`, or an empty list.
pub fn lens_of(plan: &Plan, inputs: &[Option<&Tensor>]) -> Result<Vec<i64>, OpError> {
    match plan.lens {
        None => Ok(Vec::new()),
        Some(l) => crate::util::req(inputs, l.input)?.to_i64_vec().map_err(bad),
    }
}

/// Checks the per-batch lengths against the buffers they index, as ONNX Runtime does.
pub fn check_lens(plan: &Plan, lens: &[i64]) -> Result<(), OpError> {
    let Some(l) = plan.lens else { return Ok(()) };
    if lens.len() != plan.batch {
        return Err(OpError::invalid(format!(
            "{}: the lengths input has {} entries for a batch of {}",
            plan.op,
            lens.len(),
            plan.batch
        )));
    }
    for (b, &v) in lens.iter().enumerate() {
        let n = v + l.plus;
        if l.exclude && !(0..=plan.kv_len as i64).contains(&n) {
            return Err(OpError::invalid(format!(
                "{}: batch entry {b} has {n} keys, outside [0, {}]: fix the lengths input",
                plan.op, plan.kv_len
            )));
        }
        let (offset, _) = plan.limits(lens, b);
        for p in &plan.packs {
            if p.into_past && p.past.is_some() && !(0..=p.past_len as i64).contains(&offset) {
                return Err(OpError::invalid(format!(
                    "{}: batch entry {b} has {offset} past keys, but the past cache holds {}",
                    plan.op, p.past_len
                )));
            }
            if p.into_past && offset + p.rows as i64 > p.len as i64 {
                return Err(OpError::invalid(format!(
                    "{}: batch entry {b}: {offset} past and {} new keys exceed the present's {}",
                    plan.op, p.rows, p.len
                )));
            }
            if let Some(r) = p.rotary
                && offset.max(0) + p.rows as i64 > r.positions as i64
            {
                return Err(OpError::invalid(format!(
                    "{}: batch entry {b} reaches position {}, past the {} rows of cos_cache",
                    plan.op,
                    offset.max(0) + p.rows as i64 - 1,
                    r.positions
                )));
            }
        }
    }
    Ok(())
}

pub fn run(
    plan: &Plan,
    inputs: &[Option<&Tensor>],
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, OpError> {
    let lens = lens_of(plan, inputs)?;
    check_lens(plan, &lens)?;
    let mut st = State {
        plan,
        inputs: inputs
            .iter()
            .map(|t| t.map(as_f32).transpose())
            .collect::<Result<_, _>>()?,
        outputs: outputs.iter().map(|o| vec![0.0; o.numel()]).collect(),
        scratch: plan.scratch.iter().map(|&n| vec![0.0; n]).collect(),
        lens,
        round: match plan.dtype {
            DType::F16 => round_f16,
            DType::BF16 => round_bf16,
            _ => |x| x,
        },
    };
    for p in &plan.packs {
        st.pack(p)?;
    }
    st.attend()?;
    outputs
        .iter()
        .zip(st.outputs)
        .map(|(o, v)| {
            from_f64(
                o.dtype,
                o.shape.clone(),
                v.into_iter().map(f64::from).collect(),
            )
        })
        .collect()
}

impl State<'_> {
    fn buf(&self, b: Buf) -> Result<&[f32], OpError> {
        let missing = || OpError::invalid(format!("{}: a required input is missing", self.plan.op));
        match b {
            Buf::Input(i) => self
                .inputs
                .get(i)
                .and_then(Option::as_deref)
                .ok_or_else(missing),
            Buf::Output(i) => Ok(&self.outputs[i]),
            Buf::Scratch(i) => Ok(&self.scratch[i]),
        }
    }

    fn input(&self, i: usize) -> Result<&[f32], OpError> {
        self.buf(Buf::Input(i))
    }

    fn pack(&mut self, p: &Pack) -> Result<(), OpError> {
        let src = self.buf(p.src.buf)?;
        let past = p.past.map(|i| self.input(i)).transpose()?;
        let bias = p
            .bias
            .map(|(i, off)| self.input(i).map(|v| &v[off..]))
            .transpose()?;
        let rot = match p.rotary {
            Some(r) => Some((r, self.input(r.cos)?, self.input(r.sin)?)),
            None => None,
        };
        let mut out = vec![0.0; self.plan.batch * p.heads * p.len * p.dim];
        let mut row = vec![0.0f32; p.dim];
        for b in 0..self.plan.batch {
            let (offset, _) = self.plan.limits(&self.lens, b);
            let past_b = offset.clamp(0, p.past_len as i64) as usize;
            for h in 0..p.heads {
                for t in 0..p.len {
                    let dst = &mut out[((b * p.heads + h) * p.len + t) * p.dim..][..p.dim];
                    if let (true, Some(past), true) = (p.into_past, past, t < past_b) {
                        let at = ((b * p.heads + h) * p.past_len + t) * p.dim;
                        dst.copy_from_slice(&past[at..at + p.dim]);
                        continue;
                    }
                    let s = if p.into_past { t - past_b } else { t };
                    if s >= p.rows {
                        continue;
                    }
                    let at = p.src.at(b, h, s);
                    for (d, x) in row.iter_mut().enumerate() {
                        *x = src[at + d] + bias.map_or(0.0, |v| v[h * p.dim + d]);
                    }
                    if let Some((r, cos, sin)) = rot {
                        let pos = offset.max(0) as usize + s;
                        rotate(
                            &mut row,
                            r.half,
                            r.interleaved,
                            &cos[pos * r.half..][..r.half],
                            &sin[pos * r.half..][..r.half],
                        );
                    }
                    for (o, &x) in dst.iter_mut().zip(&row) {
                        *o = (self.round)(x);
                    }
                }
            }
        }
        match p.dst {
            Buf::Output(i) => self.outputs[i] = out,
            Buf::Scratch(i) => self.scratch[i] = out,
            Buf::Input(_) => unreachable!("packs write outputs or scratch"),
        }
        Ok(())
    }

    /// The mask biases, one value per element of each mask input.
    fn mask_values(&self) -> Result<Vec<Vec<f32>>, OpError> {
        self.plan
            .masks
            .iter()
            .map(|m| {
                let v = self.input(m.input)?;
                Ok(v.iter()
                    .map(|&x| match m.kind {
                        MaskKind::Float => x,
                        MaskKind::Bool if x != 0.0 => 0.0,
                        MaskKind::Bool => f32::NEG_INFINITY,
                        MaskKind::Keep if x != 0.0 => 0.0,
                        MaskKind::Keep => self.plan.filter,
                    })
                    .collect())
            })
            .collect()
    }

    fn attend(&mut self) -> Result<(), OpError> {
        let pl = self.plan;
        let masks = self.mask_values()?;
        let (q, k, v) = (
            self.buf(pl.q.buf)?,
            self.buf(pl.k.buf)?,
            self.buf(pl.v.buf)?,
        );
        let t = pl.kv_len;
        let mut y = vec![0.0f32; self.outputs[0].len()];
        let mut qk = pl.qk.map(|(i, _)| vec![0.0f32; self.outputs[i].len()]);
        let mut scores = vec![f32::NEG_INFINITY; t];
        let mut acc = vec![0.0f32; pl.v_head_dim];
        for b in 0..pl.batch {
            let (offset, valid) = pl.limits(&self.lens, b);
            for hq in 0..pl.q_heads {
                let kvh = hq / pl.group();
                for s in 0..pl.q_len {
                    let qrow = &q[pl.q.at(b, hq, s)..][..pl.head_dim];
                    let raw = |j: usize| {
                        let krow = &k[pl.k.at(b, kvh, j)..][..pl.head_dim];
                        qrow.iter().zip(krow).map(|(a, c)| a * c).sum::<f32>() * pl.scale
                    };
                    let capped = |x: f32| match pl.softcap {
                        c if c > 0.0 => c * (x / c).tanh(),
                        _ => x,
                    };
                    for (j, sc) in scores.iter_mut().enumerate() {
                        *sc = if pl.sees(offset, valid, s, j) {
                            capped(raw(j)) + self.bias(&masks, b, hq, s, j)
                        } else {
                            f32::NEG_INFINITY
                        };
                    }
                    let row = ((b * pl.q_heads + hq) * pl.q_len + s) * t;
                    if let (Some(out), Some((_, mode))) = (qk.as_mut(), pl.qk) {
                        let out = &mut out[row..row + t];
                        for (j, o) in out.iter_mut().enumerate() {
                            *o = match mode {
                                QkMode::Raw => raw(j),
                                QkMode::Softcapped => capped(raw(j)),
                                QkMode::Biased | QkMode::Probs => scores[j],
                            };
                        }
                    }
                    let probs = softmax(&mut scores);
                    if let (Some(out), Some((_, QkMode::Probs))) = (qk.as_mut(), pl.qk) {
                        out[row..row + t].copy_from_slice(&scores);
                    }
                    acc.fill(0.0);
                    if probs {
                        for (j, &p) in scores.iter().enumerate().filter(|(_, p)| **p > 0.0) {
                            let vrow = &v[pl.v.at(b, kvh, j)..][..pl.v_head_dim];
                            acc.iter_mut().zip(vrow).for_each(|(a, x)| *a += p * x);
                        }
                    }
                    let at = pl.y.at(b, hq, s);
                    y[at..at + pl.v_head_dim].copy_from_slice(&acc);
                }
            }
        }
        self.outputs[0] = y;
        if let (Some(out), Some((i, _))) = (qk, pl.qk) {
            self.outputs[i] = out;
        }
        Ok(())
    }

    /// The sum of the masks' biases for one score, -inf past a mask's columns.
    fn bias(&self, masks: &[Vec<f32>], b: usize, h: usize, s: usize, j: usize) -> f32 {
        let pl = self.plan;
        let mut x = 0.0;
        if let Some(l) = pl.lens
            && !l.exclude
            && (j as i64) >= self.lens[b] + l.plus
        {
            x += pl.filter;
        }
        for (m, vals) in pl.masks.iter().zip(masks) {
            if j >= m.cols {
                return f32::NEG_INFINITY;
            }
            x += vals[m.at(b, h, s, j)];
        }
        x
    }
}

/// Softmax in place; false (and all zeros) when every score is -inf.
fn softmax(x: &mut [f32]) -> bool {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        x.fill(0.0);
        return false;
    }
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
    true
}

/// Rotary embedding of the first 2 * half dims of `row`: pairs (i, i + half), or (2i, 2i + 1)
/// when interleaved, each rotated by the angle whose cosine and sine are cos[i], sin[i].
pub fn rotate(row: &mut [f32], half: usize, interleaved: bool, cos: &[f32], sin: &[f32]) {
    for i in 0..half {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x1, x2) = (row[a], row[b]);
        row[a] = x1 * cos[i] - x2 * sin[i];
        row[b] = x1 * sin[i] + x2 * cos[i];
    }
}
