//! The description every attention op maps its node onto, and which both kernels run: the
//! CPU one (`cpu.rs`) and the GPU dispatches (`gpu.rs`).

use crate::tensor::DType;

/// A buffer of the op: an input, an output, or a scratch buffer of `Plan::scratch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    Input(usize),
    Output(usize),
    Scratch(usize),
}

/// Where the rows of a [batch, heads, seq, dim] view sit in a buffer: row (b, h, s) starts at
/// `off + b * sb + h * sh + s * ss` and its `dim` elements are contiguous. BNSH tensors, BSNH
/// (3-D) tensors and packed QKV are all such views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub buf: Buf,
    pub off: usize,
    pub sb: usize,
    pub sh: usize,
    pub ss: usize,
}

impl Rows {
    /// A contiguous [batch, heads, seq, dim] tensor.
    pub fn bnsh(buf: Buf, heads: usize, seq: usize, dim: usize) -> Rows {
        Rows {
            buf,
            off: 0,
            sb: heads * seq * dim,
            sh: seq * dim,
            ss: dim,
        }
    }

    /// A [batch, seq, width] tensor whose row holds `heads` heads of `dim` starting at `off`.
    pub fn bsnh(buf: Buf, seq: usize, width: usize, dim: usize, off: usize) -> Rows {
        Rows {
            buf,
            off,
            sb: seq * width,
            sh: dim,
            ss: width,
        }
    }

    pub fn at(&self, b: usize, h: usize, s: usize) -> usize {
        self.off + b * self.sb + h * self.sh + s * self.ss
    }
}

/// The causal offset of batch entry b (the number of cached keys before its first query
/// row: query row s sits at position s + offset); also where new keys go in the present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    Fixed(usize),
    /// The length of batch entry b (see [`Lens`]) minus the query length.
    FromLens,
}

/// A per-batch length input (int32 or int64 of shape [batch]): `value + plus` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lens {
    pub input: usize,
    pub int64: bool,
    pub plus: i64,
    /// Keys past the length are left out (ONNX's nonpad_kv_seqlen, GQA's seqlens_k); else
    /// they get the filter value added (MultiHeadAttention's 1-D key padding mask).
    pub exclude: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskKind {
    /// Added to the score (the op's float type).
    Float,
    /// False leaves the key out.
    Bool,
    /// int32; 0 adds the filter value (MultiHeadAttention's key padding mask).
    Keep,
}

/// A mask input broadcast over (batch, query head, query row, key): element strides of each
/// (0 where broadcast). Keys at or past `cols` (a mask shorter than the keys) are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mask {
    pub input: usize,
    pub kind: MaskKind,
    pub strides: [usize; 4],
    pub cols: usize,
}

impl Mask {
    pub fn at(&self, b: usize, h: usize, s: usize, j: usize) -> usize {
        let [sb, sh, ss, sj] = self.strides;
        b * sb + h * sh + s * ss + j * sj
    }
}

/// Rotary position embedding of the first `2 * half` dims of each row, at the row's
/// position; `cos` and `sin` are [positions, half] inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotary {
    pub cos: usize,
    pub sin: usize,
    pub half: usize,
    pub positions: usize,
    pub interleaved: bool,
}

/// A copy before attention: writes the [batch, heads, len, dim] tensor `dst` whose rows
/// (b, h, t) are the past cache's rows for t < past_b, then the `rows` new rows of `src`
/// (plus `bias`, rotated at position past_b + s), then zeros; past_b is the causal offset
/// clamped to the past's length. Without `into_past`, row t is new row t (a rotated query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pack {
    pub src: Rows,
    pub heads: usize,
    pub dim: usize,
    pub rows: usize,
    pub dst: Buf,
    pub len: usize,
    /// The past cache input, BNSH with `past_len` rows.
    pub past: Option<usize>,
    pub past_len: usize,
    pub into_past: bool,
    pub rotary: Option<Rotary>,
    /// An input holding a bias per element of the new rows' heads (head h, dim d at
    /// offset + h * dim + d): MultiHeadAttention's input projection bias.
    pub bias: Option<(usize, usize)>,
}

/// What the qk output holds (ONNX's qk_matmul_output_mode, MultiHeadAttention's qk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkMode {
    /// scale * q k^T.
    Raw,
    /// After the softcap.
    Softcapped,
    /// After the softcap and every mask (left-out keys are -inf).
    Biased,
    /// The softmax.
    Probs,
}

/// One attention: for batch b, query head h (its kv head h / group), query row s,
/// y = softmax_j(softcap(scale * q.k_j) + bias_j) v_j over the keys the row sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub op: &'static str,
    pub dtype: DType,
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    /// Keys addressed (past + new; for GQA the present's length, of which only the valid
    /// ones are seen).
    pub kv_len: usize,
    pub head_dim: usize,
    pub v_head_dim: usize,
    pub scale: f32,
    /// Zero for none.
    pub softcap: f32,
    /// What a left-out key of a [`MaskKind::Keep`] mask or non-excluding [`Lens`] adds.
    pub filter: f32,
    pub causal: bool,
    /// Keys j > pos - window only (GQA's local_window_size).
    pub window: Option<usize>,
    pub offset: Offset,
    pub lens: Option<Lens>,
    pub masks: Vec<Mask>,
    pub packs: Vec<Pack>,
    /// Elements of each scratch buffer (of `dtype`).
    pub scratch: Vec<usize>,
    pub q: Rows,
    pub k: Rows,
    pub v: Rows,
    pub y: Rows,
    pub qk: Option<(usize, QkMode)>,
}

impl Plan {
    pub fn group(&self) -> usize {
        self.q_heads / self.kv_heads.max(1)
    }

    /// The keys row s of batch entry b may see, before masks: (offset, valid length).
    pub fn limits(&self, lens: &[i64], b: usize) -> (i64, i64) {
        let len = self.lens.map(|l| lens[b] + l.plus);
        let valid = match (self.lens, len) {
            (Some(l), Some(n)) if l.exclude => n.clamp(0, self.kv_len as i64),
            _ => self.kv_len as i64,
        };
        let offset = match self.offset {
            Offset::Fixed(o) => o as i64,
            Offset::FromLens => len.unwrap_or(0) - self.q_len as i64,
        };
        (offset, valid)
    }

    /// Whether row s (causal offset `offset`, `valid` keys) sees key j at all.
    pub fn sees(&self, offset: i64, valid: i64, s: usize, j: usize) -> bool {
        let (pos, j) = (s as i64 + offset, j as i64);
        j < valid && (!self.causal || j <= pos) && self.window.is_none_or(|w| j > pos - w as i64)
    }
}
