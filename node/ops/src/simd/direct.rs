//! Small 1-D and 2-D f32 convolutions computed directly, eight outputs to a vector.
//!
//! im2col + GEMM pays three copies of the input per call before its first multiply-add (the
//! im2col rows, the GEMM's packing of them, and of the weights; measured with matrixmultiply,
//! the GEMM before faer, which packs likewise), and
//! for the MNIST CNN those copies, the allocations behind them and the padded-width path's
//! wasted columns cost as much as the arithmetic. Here every input is read straight from the
//! (padded) image, at any stride or dilation, in one of two layouts ([`Variant`]):
//! - by channels: one tap of eight consecutive output channels is one vector of regrouped
//!   weights, and each output position broadcasts its input value against it. Good for many
//!   taps (the stores, one scalar per channel, are few beside the arithmetic);
//! - by columns: eight consecutive output columns of one channel are one vector, each tap's
//!   inputs one load and its weight one broadcast. Good for few taps on wide rows (the MNIST
//!   CNN's first layer: 25 taps, where the scalar stores had cost more than the arithmetic;
//!   9.4 -> 5.9 us on one core of the 2-core VM).
//!
//! A cost model picks the cheaper for each shape.
//!
//! A baseline x86-64 build vectorises only to SSE2 without FMA, half the width of the AVX2
//! kernels a GEMM picks at run time, which would lose to it; pulp's V3 token gives the
//! same run-time choice without `unsafe` here. Without AVX2 + FMA (or off x86-64) the caller
//! keeps im2col + GEMM.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use crate::window::geometry::Axis;

/// How many of par.rs's scalar multiply-adds one of this kernel's costs, for sizing tasks.
const VECTOR_SPEEDUP: usize = 8;

/// Output channels (by channels) or columns (by columns) per vector.
const LANES: usize = 8;

/// Channels per column tile: 4 channels by 2 vectors make 8 accumulators, with 2 input vectors
/// and a broadcast weight in registers; six loads per eight multiply-adds.
const COL_CHANNELS: usize = 4;

/// The most multiply-adds per group this path takes: about 100 us on one core. Past that the
/// GEMM's cache blocking and threads are worth its copies.
const MAX_WORK: usize = 1 << 22;

/// The most taps (input channels x kernel area) per group: two blocks of packed weights,
/// 2 x 8 x 4 bytes per tap, then stay within L2 while every output position sweeps them.
const MAX_TAPS: usize = 4096;

/// Whether [`conv`] takes this group shape (on a CPU with AVX2 and FMA): 1-D or 2-D, at least
/// one full vector of output channels, and small.
pub fn applies(axes: &[Axis; 3], cg: usize, ocg: usize) -> bool {
    let [ad, ah, aw] = axes;
    let taps = cg * ah.kernel * aw.kernel;
    let outputs = ah.output * aw.output;
    *ad == Axis::UNIT
        && ocg >= LANES
        && taps <= MAX_TAPS
        && outputs > 0
        && ocg * taps * outputs <= MAX_WORK
}

/// One group: `yb` (ocg x OH x OW) = `wg` (ocg x cg x KH x KW) applied to `xg` (cg x IH x IW),
/// plus `b` (ocg) when given. Returns false, touching nothing, when this path does not apply
/// (see [`applies`]) or the CPU lacks AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub fn conv(
    axes: &[Axis; 3],
    cg: usize,
    ocg: usize,
    xg: &[f32],
    wg: &[f32],
    b: Option<&[f32]>,
    yb: &mut [f32],
    cache: Option<&PackCache>,
) -> bool {
    conv_as(axes, cg, ocg, xg, wg, b, yb, None, cache)
}

/// [`conv`] by the given variant, or the cheaper one for `None`; false, touching nothing,
/// where that variant does not serve the shape.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub fn conv_as(
    axes: &[Axis; 3],
    cg: usize,
    ocg: usize,
    xg: &[f32],
    wg: &[f32],
    b: Option<&[f32]>,
    yb: &mut [f32],
    forced: Option<Variant>,
    cache: Option<&PackCache>,
) -> bool {
    if !applies(axes, cg, ocg) || (forced == Some(Variant::Columns) && axes[2].output < LANES) {
        return false;
    }
    let Some(simd) = pulp::x86::V3::try_new() else {
        return false;
    };
    let [_, ah, aw] = axes;
    let g = Geom {
        ocg,
        taps: cg * ah.kernel * aw.kernel,
        oh: ah.output,
        ow: aw.output,
        row_step: ah.stride * (aw.input + aw.pad_begin + aw.pad_end).div_ceil(aw.stride),
    };
    let (x, offsets) = arrange(ah, aw, cg, xg);
    let variant = forced.unwrap_or_else(|| Variant::cheaper(&g));
    let packed = Packed::get(cache, variant, ocg, g.taps, wg, b);
    let out_plane = g.oh * g.ow;
    // Pairs of channel blocks (a tile of two blocks shares its broadcasts) are independent,
    // and their outputs contiguous: large layers spread them over rayon. par.rs sizes tasks
    // for scalar loops; this kernel does about VECTOR_SPEEDUP of their multiply-adds in the
    // same time, so its work is declared that much smaller (tasks of 2 x 128K taps cost less
    // than the hand-off: the small YOLO's convolutions were 1.5x slower split so).
    let n = match &packed.w {
        PackedW::Channels(..) => LANES,
        PackedW::Columns(..) => COL_CHANNELS,
    };
    let channels = 2 * n;
    crate::window::par::for_each_chunk(
        &mut yb[..ocg * out_plane],
        channels * out_plane,
        channels * g.taps * out_plane / VECTOR_SPEEDUP,
        |task, y| {
            let first = task * 2;
            let g = Geom {
                ocg: (ocg - first * n).min(channels),
                ..g
            };
            let input = (&x[..], &offsets[..]);
            match &packed.w {
                PackedW::Channels(w, b) => {
                    let k = Kernel::part(simd, &g, input, (w, b), first);
                    simd.vectorize(Run { k, y });
                }
                PackedW::Columns(w, b) => {
                    let k = Kernel::part(simd, &g, input, (w, b), first);
                    simd.vectorize(ColRun { k, y });
                }
            }
        },
    );
    true
}

/// The last weights an op packed, kept for its next run. Packing (a transpose into blocks of
/// channels) cost as much as the convolution itself on small layers: ResNet's 3x3 layers over
/// 2x2 and 1x1 images spent half their time in it. A run checks the cached copy against its
/// weights bit for bit (a memcmp, several times cheaper than the transpose) rather than trust
/// an address, so weights that change between runs (a graph input) are repacked, never stale.
#[derive(Default)]
pub struct PackCache(Mutex<Option<Arc<Packed>>>);

impl Clone for PackCache {
    /// A clone of an op starts empty: the cache is an optimisation, not part of the op.
    fn clone(&self) -> PackCache {
        PackCache::default()
    }
}

impl PartialEq for PackCache {
    /// Ops compare by their attributes; what they happen to have cached is no part of them.
    fn eq(&self, _: &PackCache) -> bool {
        true
    }
}

impl std::fmt::Debug for PackCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PackCache")
    }
}

/// Weights and bias as [`pack`] lays them out for one variant, with the originals they came
/// from (to recognise them on the next run).
pub struct Packed {
    ocg: usize,
    taps: usize,
    wg: Vec<f32>,
    b: Option<Vec<f32>>,
    w: PackedW,
}

enum PackedW {
    Channels(Vec<[f32; LANES]>, Vec<[f32; LANES]>),
    Columns(Vec<[f32; COL_CHANNELS]>, Vec<[f32; COL_CHANNELS]>),
}

impl Packed {
    /// The packing of `wg` and `b` for `variant`: the cached one when it was made from the
    /// same bits, else a new one, which then replaces it in the cache.
    fn get(
        cache: Option<&PackCache>,
        variant: Variant,
        ocg: usize,
        taps: usize,
        wg: &[f32],
        b: Option<&[f32]>,
    ) -> Arc<Packed> {
        let Some(cache) = cache else {
            return Arc::new(Packed::new(variant, ocg, taps, wg, b));
        };
        // A poisoned lock only means another run panicked while holding it; the entry is
        // still checked before use.
        let mut slot = cache.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = slot.as_ref()
            && p.matches(variant, ocg, taps, wg, b)
        {
            return p.clone();
        }
        let p = Arc::new(Packed::new(variant, ocg, taps, wg, b));
        *slot = Some(p.clone());
        p
    }

    fn new(variant: Variant, ocg: usize, taps: usize, wg: &[f32], b: Option<&[f32]>) -> Packed {
        let w = match variant {
            Variant::Channels => {
                let (w, bias) = pack::<LANES>(ocg, taps, wg, b);
                PackedW::Channels(w, bias)
            }
            Variant::Columns => {
                let (w, bias) = pack::<COL_CHANNELS>(ocg, taps, wg, b);
                PackedW::Columns(w, bias)
            }
        };
        Packed {
            ocg,
            taps,
            wg: wg[..ocg * taps].to_vec(),
            b: b.map(|b| b[..ocg].to_vec()),
            w,
        }
    }

    /// Whether this packing is of exactly these bits (NaN weights included) for this variant.
    fn matches(
        &self,
        variant: Variant,
        ocg: usize,
        taps: usize,
        wg: &[f32],
        b: Option<&[f32]>,
    ) -> bool {
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len()
                && bytemuck::cast_slice::<f32, u32>(a) == bytemuck::cast_slice::<f32, u32>(b)
        };
        let kind = match self.w {
            PackedW::Channels(..) => Variant::Channels,
            PackedW::Columns(..) => Variant::Columns,
        };
        kind == variant
            && self.ocg == ocg
            && self.taps == taps
            && wg.len() >= ocg * taps
            && same(&self.wg, &wg[..ocg * taps])
            && match (&self.b, b) {
                (None, None) => true,
                (Some(mine), Some(b)) => b.len() >= ocg && same(mine, &b[..ocg]),
                _ => false,
            }
    }
}

/// The two ways [`conv`] puts outputs in vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Eight output channels of one position: one broadcast input feeds eight channels, but
    /// the results go out as scalar stores (the output is channel-major).
    Channels,
    /// Eight consecutive output columns of one channel: each tap's inputs are one unaligned
    /// load and the results one vector store, but rows are covered in whole vectors (the last
    /// overlapping the one before), and rows narrower than eight do not fit.
    Columns,
}

impl Variant {
    /// The variant with fewer instructions on the critical ports, counting a multiply-add as
    /// one and a scalar store as two (it needs a lane extract first). The MNIST CNN's first
    /// layer (one input channel, 25 taps, 28 columns) spends more on its stores than its
    /// arithmetic by channels and goes by columns; its second (200 taps, 10 columns) by
    /// channels.
    fn cheaper(g: &Geom) -> Variant {
        if g.ow < LANES {
            return Variant::Channels;
        }
        let blocks = g.ocg.div_ceil(LANES);
        let by_channels =
            blocks * g.oh * covered(g.ow, width(g.ow, [7, 6, 5, 4])) * (g.taps + 2 * LANES);
        let col_width = if g.ow >= 2 * LANES { 2 } else { 1 };
        let by_columns =
            g.ocg.div_ceil(COL_CHANNELS) * COL_CHANNELS * g.oh * covered(g.ow, col_width * LANES)
                / LANES
                * g.taps;
        if by_columns < by_channels {
            Variant::Columns
        } else {
            Variant::Channels
        }
    }
}

/// Positions computed for a row of `ow` in tiles of `r` (the last overlapping the one before).
fn covered(ow: usize, r: usize) -> usize {
    ow.div_ceil(r) * r
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub fn conv(
    _: &[Axis; 3],
    _: usize,
    _: usize,
    _: &[f32],
    _: &[f32],
    _: Option<&[f32]>,
    _: &mut [f32],
    _: Option<&PackCache>,
) -> bool {
    false
}

/// The sizes the tile loops use, in the layout [`arrange`] makes.
#[derive(Clone, Copy)]
struct Geom {
    ocg: usize,
    /// Taps per output channel (cg x KH x KW), the packed weights' stride between blocks.
    taps: usize,
    /// Output rows and columns; input elements between output rows (row stride x row length).
    oh: usize,
    ow: usize,
    row_step: usize,
}

/// The input padded with zeros and split by column phase for a column stride `s`: element
/// `[c][p][h][j]` is padded column `j * s + p` of row `h`, so the inputs one tap reads for
/// consecutive output columns are consecutive, at any stride or dilation (borrowed as is at
/// stride 1 without padding). With the offset of every tap in it relative to an output's
/// first tap, so a tile walks one flat list of (offset, weights).
fn arrange<'a>(ah: &Axis, aw: &Axis, cg: usize, xg: &'a [f32]) -> (Cow<'a, [f32]>, Vec<usize>) {
    let (ih, iw, s) = (ah.input, aw.input, aw.stride);
    let hp = ih + ah.pad_begin + ah.pad_end;
    let wq = (iw + aw.pad_begin + aw.pad_end).div_ceil(s);
    let x = if s == 1 && ah.pad_begin + ah.pad_end + aw.pad_begin + aw.pad_end == 0 {
        Cow::Borrowed(&xg[..cg * ih * iw])
    } else {
        let mut v = vec![0.0; cg * s * hp * wq];
        for (c, xc) in xg.chunks_exact(ih * iw).take(cg).enumerate() {
            for (r, xr) in xc.chunks_exact(iw).enumerate() {
                let h = r + ah.pad_begin;
                if s == 1 {
                    v[(c * hp + h) * wq + aw.pad_begin..][..iw].copy_from_slice(xr);
                    continue;
                }
                // Phase by phase rather than a division per element (3 x 64 x 64 inputs at
                // stride 2 spent more time here than in their multiply-adds).
                for p in 0..s {
                    // The first phase column j0 at or past the left padding, input column i0.
                    let j0 = aw.pad_begin.saturating_sub(p).div_ceil(s);
                    let i0 = j0 * s + p - aw.pad_begin;
                    let row = &mut v[((c * s + p) * hp + h) * wq..][..wq];
                    let src = xr.iter().skip(i0).step_by(s);
                    for (dst, &e) in row[j0..].iter_mut().zip(src) {
                        *dst = e;
                    }
                }
            }
        }
        Cow::Owned(v)
    };
    let mut offsets = Vec::with_capacity(cg * ah.kernel * aw.kernel);
    for c in 0..cg {
        for kh in 0..ah.kernel {
            for kw in 0..aw.kernel {
                let col = kw * aw.dilation;
                offsets.push(((c * s + col % s) * hp + kh * ah.dilation) * wq + col / s);
            }
        }
    }
    (x, offsets)
}

/// The weights as blocks of `N` output channels (eight by channels, [`COL_CHANNELS`] by
/// columns), tap-major within a block (element `block * taps + tap` holds that tap of the
/// block's channels), so a tile walks one flat list; the bias likewise. Channels past `ocg`
/// in the last block are zero and never stored.
fn pack<const N: usize>(
    ocg: usize,
    taps: usize,
    wg: &[f32],
    b: Option<&[f32]>,
) -> (Vec<[f32; N]>, Vec<[f32; N]>) {
    let blocks = ocg.div_ceil(N);
    let mut w = vec![[0.0; N]; blocks * taps];
    let mut bias = vec![[0.0; N]; blocks];
    for (oc, wo) in wg.chunks_exact(taps).take(ocg).enumerate() {
        let (block, lane) = (oc / N, oc % N);
        for (dst, &v) in w[block * taps..][..taps].iter_mut().zip(wo) {
            dst[lane] = v;
        }
        if let Some(b) = b {
            bias[block][lane] = b[oc];
        }
    }
    (w, bias)
}

/// The whole group by channels ([`Variant::Channels`]), inside pulp's AVX2 + FMA context.
#[cfg(target_arch = "x86_64")]
struct Run<'a> {
    k: Kernel<'a, LANES>,
    y: &'a mut [f32],
}

/// What the tiles of either variant read: the arranged input, each tap's offset in it, and
/// the weights and bias as [`pack`] lays them out in blocks of `N` channels.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Kernel<'a, const N: usize> {
    simd: pulp::x86::V3,
    g: &'a Geom,
    x: &'a [f32],
    offsets: &'a [usize],
    w: &'a [[f32; N]],
    bias: &'a [[f32; N]],
}

#[cfg(target_arch = "x86_64")]
impl<'a, const N: usize> Kernel<'a, N> {
    /// The kernel over the channel blocks from `first` on, with `g` saying how many.
    fn part(
        simd: pulp::x86::V3,
        g: &'a Geom,
        (x, offsets): (&'a [f32], &'a [usize]),
        (w, bias): (&'a [[f32; N]], &'a [[f32; N]]),
        first: usize,
    ) -> Self {
        Kernel {
            simd,
            g,
            x,
            offsets,
            w: &w[first * g.taps..],
            bias: &bias[first..],
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for Run<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Run { k, y } = self;
        let blocks = k.g.ocg.div_ceil(LANES);
        let mut b0 = 0;
        // A tile's accumulators, its weight vectors and the broadcast inputs (which LLVM
        // loads all before the FMAs) must fit the 16 vector registers, or it spills: 2 x 4 +
        // 2 + 4 for two blocks, 7 + 1 + 7 for one. Two blocks share each broadcast.
        while b0 < blocks {
            if blocks - b0 >= 2 && k.g.ow >= 4 {
                rows::<2, 4>(k, y, b0);
                b0 += 2;
            } else if blocks - b0 >= 2 && k.g.ow < 4 {
                // Rows of one to three: a position at a time, two blocks sharing each
                // broadcast (see tile_one).
                rows::<2, 1>(k, y, b0);
                b0 += 2;
            } else {
                match width(k.g.ow, [7, 6, 5, 4]) {
                    7 => rows::<1, 7>(k, y, b0),
                    6 => rows::<1, 6>(k, y, b0),
                    5 => rows::<1, 5>(k, y, b0),
                    4 => rows::<1, 4>(k, y, b0),
                    _ => rows::<1, 1>(k, y, b0),
                }
                b0 += 1;
            }
        }
    }
}

/// The tile width (output positions along a row) that computes the fewest positions for a
/// row of `ow`, the widest on ties; the last tile of a row overlaps the one before rather than
/// running short. 1 when the row is narrower than every candidate.
fn width(ow: usize, candidates: [usize; 4]) -> usize {
    candidates
        .into_iter()
        .filter(|&r| r <= ow)
        .min_by_key(|&r| ow.div_ceil(r) * r)
        .unwrap_or(1)
}

/// Every output row of blocks `b0..b0 + OB`, in tiles of `R` positions (`R <= ow`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rows<const OB: usize, const R: usize>(k: Kernel<'_, LANES>, y: &mut [f32], b0: usize) {
    let g = k.g;
    let out_plane = g.oh * g.ow;
    for oh in 0..g.oh {
        let mut next = 0;
        while next < g.ow {
            let ow0 = next.min(g.ow - R);
            let base = oh * g.row_step + ow0;
            let acc: [[pulp::f32x8; R]; OB] = if R == 1 {
                let one = tile_one::<OB>(k, b0, base);
                std::array::from_fn(|o| [one[o]; R])
            } else {
                tile::<OB, R>(k, b0, base)
            };
            // Channel-major output from position-major vectors: eight scalar stores each,
            // a few percent of the tile's multiply-adds.
            for (o, vs) in acc.iter().enumerate() {
                let first = (b0 + o) * LANES;
                let lanes = g.ocg.saturating_sub(first).min(LANES);
                for (r, &v) in vs.iter().enumerate() {
                    let v: [f32; LANES] = pulp::cast(v);
                    let at = oh * g.ow + ow0 + r;
                    for (l, &e) in v.iter().enumerate().take(lanes) {
                        y[(first + l) * out_plane + at] = e;
                    }
                }
            }
            next += R;
        }
    }
}

/// `R` consecutive output positions, the first reading its taps at `base + offset`, for the
/// channels of blocks `b0..b0 + OB`; position-major: `[block][position]` is one vector of
/// eight channels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile<const OB: usize, const R: usize>(
    k: Kernel<'_, LANES>,
    b0: usize,
    base: usize,
) -> [[pulp::f32x8; R]; OB] {
    let (simd, taps) = (k.simd, k.g.taps);
    let mut acc = [[simd.splat_f32x8(0.0); R]; OB];
    for (o, row) in acc.iter_mut().enumerate() {
        row.fill(pulp::cast(k.bias[b0 + o]));
    }
    let wa = &k.w[b0 * taps..][..taps];
    // A second block's weights, or the first again when there is one (not read then).
    let wb = &k.w[(b0 + OB - 1) * taps..][..taps];
    let x = &k.x[base..];
    for ((&off, &w0), &w1) in k.offsets.iter().zip(wa).zip(wb) {
        let Some(xs) = x[off..].first_chunk::<R>() else {
            unreachable!("a tap reads past the arranged input");
        };
        let wv: [pulp::f32x8; 2] = [pulp::cast(w0), pulp::cast(w1)];
        for (r, &xv) in xs.iter().enumerate() {
            let xb = simd.splat_f32x8(xv);
            for o in 0..OB {
                acc[o][r] = simd.mul_add_f32x8(wv[o], xb, acc[o][r]);
            }
        }
    }
    acc
}

/// One output position (the first reading its taps at `base + offset`) for the channels of
/// blocks `b0..b0 + OB`, its taps summed in four independent chains. A one-position [`tile`]
/// has only OB accumulators, and each tap's multiply-add then waits for the one before (four
/// cycles of latency for a fraction of a cycle's work): ResNet's 3x3 layers over 2x2 and 1x1
/// images ran at a quarter of the speed the kernel reaches on wider rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_one<const OB: usize>(k: Kernel<'_, LANES>, b0: usize, base: usize) -> [pulp::f32x8; OB] {
    const CHAINS: usize = 4;
    let (simd, taps) = (k.simd, k.g.taps);
    let zero = simd.splat_f32x8(0.0);
    let mut acc = [[zero; OB]; CHAINS];
    for (o, a) in acc[0].iter_mut().enumerate() {
        *a = pulp::cast(k.bias[b0 + o]);
    }
    let wa = &k.w[b0 * taps..][..taps];
    // A second block's weights, or the first again when there is one (not read then).
    let wb = &k.w[(b0 + OB - 1) * taps..][..taps];
    let x = &k.x[base..];
    let (offs, off_rest) = k.offsets.as_chunks::<CHAINS>();
    let (was, wa_rest) = wa.as_chunks::<CHAINS>();
    let (wbs, wb_rest) = wb.as_chunks::<CHAINS>();
    for ((off, w0), w1) in offs.iter().zip(was).zip(wbs) {
        for c in 0..CHAINS {
            let xb = simd.splat_f32x8(x[off[c]]);
            let wv: [pulp::f32x8; 2] = [pulp::cast(w0[c]), pulp::cast(w1[c])];
            for o in 0..OB {
                acc[c][o] = simd.mul_add_f32x8(wv[o], xb, acc[c][o]);
            }
        }
    }
    for ((&off, &w0), &w1) in off_rest.iter().zip(wa_rest).zip(wb_rest) {
        let xb = simd.splat_f32x8(x[off]);
        let wv: [pulp::f32x8; 2] = [pulp::cast(w0), pulp::cast(w1)];
        for o in 0..OB {
            acc[0][o] = simd.mul_add_f32x8(wv[o], xb, acc[0][o]);
        }
    }
    std::array::from_fn(|o| {
        let (a, b) = (
            simd.add_f32x8(acc[0][o], acc[1][o]),
            simd.add_f32x8(acc[2][o], acc[3][o]),
        );
        simd.add_f32x8(a, b)
    })
}

/// The whole group by columns ([`Variant::Columns`]), inside pulp's AVX2 + FMA context.
#[cfg(target_arch = "x86_64")]
struct ColRun<'a> {
    k: Kernel<'a, COL_CHANNELS>,
    y: &'a mut [f32],
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for ColRun<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let ColRun { k, y } = self;
        for block in 0..k.g.ocg.div_ceil(COL_CHANNELS) {
            if k.g.ow >= 2 * LANES {
                col_rows::<2>(k, y, block);
            } else {
                col_rows::<1>(k, y, block);
            }
        }
    }
}

/// Every output row of channel block `block`, in tiles of `V` vectors of consecutive columns
/// (`V * 8 <= ow`), the last tile of a row overlapping the one before.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn col_rows<const V: usize>(k: Kernel<'_, COL_CHANNELS>, y: &mut [f32], block: usize) {
    let (simd, g) = (k.simd, k.g);
    let (out_plane, span) = (g.oh * g.ow, V * LANES);
    let oc0 = block * COL_CHANNELS;
    let channels = (g.ocg - oc0).min(COL_CHANNELS);
    let w = &k.w[block * g.taps..][..g.taps];
    let bias = k.bias[block];
    for oh in 0..g.oh {
        let mut next = 0;
        while next < g.ow {
            let ow0 = next.min(g.ow - span);
            let mut acc: [[pulp::f32x8; V]; COL_CHANNELS] =
                std::array::from_fn(|o| [simd.splat_f32x8(bias[o]); V]);
            let x = &k.x[oh * g.row_step + ow0..];
            for (&off, wt) in k.offsets.iter().zip(w) {
                let xv: [pulp::f32x8; V] = std::array::from_fn(|v| {
                    let Some(xs) = x[off + v * LANES..].first_chunk::<LANES>() else {
                        unreachable!("a tap reads past the arranged input");
                    };
                    pulp::cast(*xs)
                });
                for (row, &wo) in acc.iter_mut().zip(wt) {
                    let wv = simd.splat_f32x8(wo);
                    for (a, &xs) in row.iter_mut().zip(&xv) {
                        *a = simd.mul_add_f32x8(xs, wv, *a);
                    }
                }
            }
            for (o, vs) in acc.iter().enumerate().take(channels) {
                let at = (oc0 + o) * out_plane + oh * g.ow + ow0;
                for (dst, v) in y[at..at + span].chunks_exact_mut(LANES).zip(vs) {
                    dst.copy_from_slice(&pulp::cast::<_, [f32; LANES]>(*v));
                }
            }
            next += span;
        }
    }
}
