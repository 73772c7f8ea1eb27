//! Straightforward f64 references of the three ops, written apart from the kernels: every
//! input brought to [batch, heads, seq, dim] arrays, the whole score matrix of a head
//! materialised, the masks applied as an additive matrix of 0 and -inf, then softmax and the
//! product with v. The GQA and MHA ones follow rules checked against ONNX Runtime 1.32's CPU
//! kernels (the fixtures in tests/fixtures/op_*attention* come from the same runtime).

/// A dense 4-D array.
#[derive(Clone, Debug)]
pub struct A4 {
    pub shape: [usize; 4],
    pub v: Vec<f64>,
}

impl A4 {
    pub fn zeros(shape: [usize; 4]) -> A4 {
        A4 {
            shape,
            v: vec![0.0; shape.iter().product()],
        }
    }
    pub fn idx(&self, a: usize, b: usize, c: usize, d: usize) -> usize {
        let [_, n1, n2, n3] = self.shape;
        ((a * n1 + b) * n2 + c) * n3 + d
    }
    pub fn get(&self, a: usize, b: usize, c: usize, d: usize) -> f64 {
        self.v[self.idx(a, b, c, d)]
    }
    pub fn set(&mut self, a: usize, b: usize, c: usize, d: usize, x: f64) {
        let i = self.idx(a, b, c, d);
        self.v[i] = x;
    }
}

/// [B, S, H * D] -> [B, H, S, D].
pub fn split_heads(v: &[f64], b: usize, s: usize, h: usize, d: usize) -> A4 {
    let mut out = A4::zeros([b, h, s, d]);
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                for di in 0..d {
                    out.set(bi, hi, si, di, v[((bi * s + si) * h + hi) * d + di]);
                }
            }
        }
    }
    out
}

/// [B, H, S, D] -> [B, S, H * D].
pub fn merge_heads(a: &A4) -> Vec<f64> {
    let [b, h, s, d] = a.shape;
    let mut out = vec![0.0; b * h * s * d];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for di in 0..d {
                    out[((bi * s + si) * h + hi) * d + di] = a.get(bi, hi, si, di);
                }
            }
        }
    }
    out
}

/// Concatenation along axis 2.
pub fn concat_seq(a: &A4, b: &A4) -> A4 {
    let [n0, n1, s1, d] = a.shape;
    let s2 = b.shape[2];
    let mut out = A4::zeros([n0, n1, s1 + s2, d]);
    for i in 0..n0 {
        for j in 0..n1 {
            for s in 0..s1 + s2 {
                for k in 0..d {
                    let x = if s < s1 {
                        a.get(i, j, s, k)
                    } else {
                        b.get(i, j, s - s1, k)
                    };
                    out.set(i, j, s, k, x);
                }
            }
        }
    }
    out
}

/// What to keep of the score matrix besides y (ONNX's qk_matmul_output modes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Keep {
    Raw,
    Capped,
    Biased,
    Probs,
}

/// softmax(softcap(scale q k^T) + bias) v per (batch, q head), kv head = h / (Hq / Hkv); bias
/// [B, Hq, S, T] of which -inf leaves the key out; a row left with no key is zero.
pub fn attend(q: &A4, k: &A4, v: &A4, bias: &A4, scale: f64, softcap: f64, keep: Keep) -> (A4, A4) {
    let [b, hq, s, d] = q.shape;
    let [_, hkv, t, _] = k.shape;
    let dv = v.shape[3];
    let mut y = A4::zeros([b, hq, s, dv]);
    let mut kept = A4::zeros([b, hq, s, t]);
    for bi in 0..b {
        for h in 0..hq {
            let g = h / (hq / hkv);
            let scores: Vec<Vec<f64>> = (0..s)
                .map(|si| {
                    (0..t)
                        .map(|j| {
                            let x: f64 = (0..d)
                                .map(|di| q.get(bi, h, si, di) * k.get(bi, g, j, di))
                                .sum();
                            x * scale
                        })
                        .collect()
                })
                .collect();
            for (si, raw) in scores.iter().enumerate() {
                let row: Vec<f64> = raw
                    .iter()
                    .map(|&x| {
                        if softcap > 0.0 {
                            softcap * (x / softcap).tanh()
                        } else {
                            x
                        }
                    })
                    .collect();
                let biased: Vec<f64> = (0..t).map(|j| row[j] + bias.get(bi, h, si, j)).collect();
                let m = biased.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = biased
                    .iter()
                    .map(|&x| {
                        if m == f64::NEG_INFINITY {
                            0.0
                        } else {
                            (x - m).exp()
                        }
                    })
                    .collect();
                let sum: f64 = e.iter().sum();
                let p: Vec<f64> = e
                    .iter()
                    .map(|&x| if sum > 0.0 { x / sum } else { 0.0 })
                    .collect();
                for j in 0..t {
                    let x = match keep {
                        Keep::Raw => raw[j],
                        Keep::Capped => row[j],
                        Keep::Biased => biased[j],
                        Keep::Probs => p[j],
                    };
                    kept.set(bi, h, si, j, x);
                }
                for di in 0..dv {
                    let x: f64 = (0..t).map(|j| p[j] * v.get(bi, g, j, di)).sum();
                    y.set(bi, h, si, di, x);
                }
            }
        }
    }
    (y, kept)
}

/// ONNX Attention's inputs, already 4-D, and attributes.
pub struct OnnxCase {
    pub q: A4,
    pub k: A4,
    pub v: A4,
    /// Shape (rank 1 to 4), values, bool.
    pub mask: Option<(Vec<usize>, Vec<f64>, bool)>,
    pub past: Option<(A4, A4)>,
    pub nonpad: Option<Vec<i64>>,
    pub causal: bool,
    pub scale: Option<f64>,
    pub softcap: f64,
    pub keep: Keep,
}

/// (y [B, Hq, S, Dv], present key, present value, kept scores).
pub fn onnx(c: &OnnxCase) -> (A4, A4, A4, A4) {
    let (k, v) = match &c.past {
        Some((pk, pv)) => (concat_seq(pk, &c.k), concat_seq(pv, &c.v)),
        None => (c.k.clone(), c.v.clone()),
    };
    let [b, hq, s, d] = c.q.shape;
    let t = k.shape[2];
    let past = c.past.as_ref().map_or(0, |p| p.0.shape[2]) as i64;
    let mut bias = A4::zeros([b, hq, s, t]);
    for bi in 0..b {
        for h in 0..hq {
            for si in 0..s {
                for j in 0..t {
                    let mut x = 0.0;
                    if let Some((shape, vals, is_bool)) = &c.mask {
                        let r = shape.len();
                        let full = [bi, h, si, j];
                        if j >= shape[r - 1] {
                            x = f64::NEG_INFINITY;
                        } else {
                            let mut at = 0;
                            for (i, &n) in shape.iter().enumerate() {
                                let idx = full[4 - r + i];
                                at = at * n + if n == 1 { 0 } else { idx };
                            }
                            let m = vals[at];
                            x = if *is_bool {
                                if m != 0.0 { 0.0 } else { f64::NEG_INFINITY }
                            } else {
                                m
                            };
                        }
                    }
                    let offset = match &c.nonpad {
                        Some(n) => n[bi] - s as i64,
                        None => past,
                    };
                    if c.causal && j as i64 > si as i64 + offset {
                        x = f64::NEG_INFINITY;
                    }
                    if c.nonpad.as_ref().is_some_and(|n| j as i64 >= n[bi]) {
                        x = f64::NEG_INFINITY;
                    }
                    bias.set(bi, h, si, j, x);
                }
            }
        }
    }
    let scale = c.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let (y, kept) = attend(&c.q, &k, &v, &bias, scale, c.softcap, c.keep);
    (y, k, v, kept)
}

/// GroupQueryAttention's inputs and attributes. q, k, v are [B, S, H * D]; past is BNSH.
pub struct GqaCase {
    pub b: usize,
    pub s: usize,
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub past: Option<(A4, A4)>,
    pub seqlens: Vec<i64>,
    pub total: usize,
    /// cos and sin [positions, half], interleaved.
    pub rotary: Option<(Vec<f64>, Vec<f64>, usize, bool)>,
    pub window: Option<usize>,
    pub softcap: f64,
    pub scale: f64,
}

fn rotate(x: &mut [f64], pos: usize, cos: &[f64], sin: &[f64], half: usize, interleaved: bool) {
    let src = x.to_vec();
    for i in 0..half {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (c, s) = (cos[pos * half + i], sin[pos * half + i]);
        x[a] = src[a] * c - src[b] * s;
        x[b] = src[a] * s + src[b] * c;
    }
}

/// (output [B, S, Hq * D], present key, present value).
pub fn gqa(c: &GqaCase) -> (Vec<f64>, A4, A4) {
    let (b, s, hq, hkv, d) = (c.b, c.s, c.hq, c.hkv, c.d);
    let mut q = split_heads(&c.q, b, s, hq, d);
    let mut k = split_heads(&c.k, b, s, hkv, d);
    let v = split_heads(&c.v, b, s, hkv, d);
    let p = c.past.as_ref().map_or(0, |x| x.0.shape[2]);
    let len = c.total.max(p);
    let first = s == c.total;
    let mut pk = A4::zeros([b, hkv, len, d]);
    let mut pv = A4::zeros([b, hkv, len, d]);
    let mut out = A4::zeros([b, hq, s, d]);
    let scale = if c.scale == 0.0 {
        1.0 / (d as f64).sqrt()
    } else {
        c.scale
    };
    for bi in 0..b {
        let tot = c.seqlens[bi] as usize + 1;
        let past = if first { 0 } else { tot - s };
        if let Some((cos, sin, half, il)) = &c.rotary {
            for si in 0..s {
                for h in 0..hq {
                    let at = q.idx(bi, h, si, 0);
                    rotate(&mut q.v[at..at + d], past + si, cos, sin, *half, *il);
                }
                for h in 0..hkv {
                    let at = k.idx(bi, h, si, 0);
                    rotate(&mut k.v[at..at + d], past + si, cos, sin, *half, *il);
                }
            }
        }
        for h in 0..hkv {
            for di in 0..d {
                for j in 0..past {
                    let (ok, ov) = c.past.as_ref().unwrap();
                    pk.set(bi, h, j, di, ok.get(bi, h, j, di));
                    pv.set(bi, h, j, di, ov.get(bi, h, j, di));
                }
                for si in 0..s {
                    pk.set(bi, h, past + si, di, k.get(bi, h, si, di));
                    pv.set(bi, h, past + si, di, v.get(bi, h, si, di));
                }
            }
        }
        for h in 0..hq {
            let g = h / (hq / hkv);
            for si in 0..s {
                // The row sees keys lo..hi: up to its own position, within the valid ones,
                // and within the window counted from its unclamped position.
                let pos_end = past + si + 1;
                let hi = pos_end.min(tot);
                let lo = c.window.map_or(0, |w| pos_end.saturating_sub(w));
                if lo >= hi {
                    continue;
                }
                let sc: Vec<f64> = (lo..hi)
                    .map(|j| {
                        let x: f64 = (0..d)
                            .map(|di| q.get(bi, h, si, di) * pk.get(bi, g, j, di))
                            .sum();
                        let x = x * scale;
                        if c.softcap > 0.0 {
                            c.softcap * (x / c.softcap).tanh()
                        } else {
                            x
                        }
                    })
                    .collect();
                let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for di in 0..d {
                    let x: f64 = (lo..hi)
                        .map(|j| e[j - lo] / sum * pv.get(bi, g, j, di))
                        .sum();
                    out.set(bi, h, si, di, x);
                }
            }
        }
    }
    (merge_heads(&out), pk, pv)
}

/// MultiHeadAttention's inputs (3-D query, key and value), attributes and masks.
pub struct MhaCase {
    pub b: usize,
    pub s: usize,
    pub l: usize,
    pub n: usize,
    pub d: usize,
    pub dv: usize,
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub bias: Option<Vec<f64>>,
    pub past: Option<(A4, A4)>,
    /// Lengths [B], or a 0/1 mask [B, T] or [B, S, T].
    pub lens: Option<Vec<i64>>,
    pub keep: Option<(Vec<usize>, Vec<f64>)>,
    /// [B or 1, N or 1, S, T].
    pub attn_bias: Option<([usize; 4], Vec<f64>)>,
    pub causal: bool,
    pub filter: f64,
    pub scale: f64,
}

/// (output [B, S, N * Dv], present key, present value, biased scores).
pub fn mha(c: &MhaCase) -> (Vec<f64>, A4, A4, A4) {
    let (b, s, l, n, d, dv) = (c.b, c.s, c.l, c.n, c.d, c.dv);
    let add = |x: &[f64], off: usize, w: usize| -> Vec<f64> {
        x.iter()
            .enumerate()
            .map(|(i, &v)| v + c.bias.as_ref().map_or(0.0, |bb| bb[off + i % w]))
            .collect()
    };
    let q = split_heads(&add(&c.q, 0, n * d), b, s, n, d);
    let mut k = split_heads(&add(&c.k, n * d, n * d), b, l, n, d);
    let mut v = split_heads(&add(&c.v, 2 * n * d, n * dv), b, l, n, dv);
    let p = c.past.as_ref().map_or(0, |x| x.0.shape[2]);
    if let Some((pk, pv)) = &c.past {
        k = concat_seq(pk, &k);
        v = concat_seq(pv, &v);
    }
    let t = p + l;
    let mut bias = A4::zeros([b, n, s, t]);
    for bi in 0..b {
        for h in 0..n {
            for si in 0..s {
                for j in 0..t {
                    let mut x = 0.0;
                    if c.lens.as_ref().is_some_and(|len| j as i64 >= len[bi]) {
                        x += c.filter;
                    }
                    if let Some((shape, m)) = &c.keep {
                        let at = if shape.len() == 2 {
                            bi * t + j
                        } else {
                            (bi * s + si) * t + j
                        };
                        if m[at] == 0.0 {
                            x += c.filter;
                        }
                    }
                    if let Some((sh, m)) = &c.attn_bias {
                        let (bb, hh) = (
                            if sh[0] == 1 { 0 } else { bi },
                            if sh[1] == 1 { 0 } else { h },
                        );
                        x += m[((bb * sh[1] + hh) * s + si) * t + j];
                    }
                    if c.causal && j > p + si {
                        x = f64::NEG_INFINITY;
                    }
                    bias.set(bi, h, si, j, x);
                }
            }
        }
    }
    let scale = if c.scale == 0.0 {
        1.0 / (d as f64).sqrt()
    } else {
        c.scale
    };
    let (y, kept) = attend(&q, &k, &v, &bias, scale, 0.0, Keep::Biased);
    (merge_heads(&y), k, v, kept)
}
