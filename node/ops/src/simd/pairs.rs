//! The interior of a 2-D max pool whose windows are two columns wide at column stride 2 (the
//! usual 2x2 / stride 2), eight outputs to an AVX2 vector (four to an SSE one on rows of four
//! to seven): the scalar loop took a tenth of the MNIST CNN's time on one core.
//!
//! The taps of every window are visited in the general path's order (row by row, left to
//! right), each as `t > best ? t : best`, which is exactly what `maxps(t, best)` computes (it
//! returns its second operand when the comparison fails, NaN included): ties and NaN resolve
//! as in every other path.

use std::ops::Range;

/// For each output row `i` of a plane whose windows cover input rows `rows[i]` (empty ranges
/// are skipped), writes outputs `cols` of `yp`'s row `i` (rows of `width` outputs): output `o`
/// is the maximum over those input rows of the plane `xp` (row length `iw`) at columns
/// `c0 + 2 (o - cols.start)` and the one after. Returns false, touching nothing, on a CPU
/// without AVX2 (or off x86-64) or for fewer than four outputs a row.
#[cfg(target_arch = "x86_64")]
pub fn max_pairs(
    rows: &[(usize, usize)],
    xp: &[f32],
    iw: usize,
    yp: &mut [f32],
    width: usize,
    cols: Range<usize>,
    c0: usize,
) -> bool {
    if cols.len() < 4 {
        return false;
    }
    let Some(simd) = pulp::x86::V3::try_new() else {
        return false;
    };
    simd.vectorize(Plane {
        simd,
        rows,
        xp,
        iw,
        yp,
        width,
        cols,
        c0,
    });
    true
}

#[cfg(not(target_arch = "x86_64"))]
pub fn max_pairs(
    _: &[(usize, usize)],
    _: &[f32],
    _: usize,
    _: &mut [f32],
    _: usize,
    _: Range<usize>,
    _: usize,
) -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
struct Plane<'a> {
    simd: pulp::x86::V3,
    rows: &'a [(usize, usize)],
    xp: &'a [f32],
    iw: usize,
    yp: &'a mut [f32],
    width: usize,
    cols: Range<usize>,
    c0: usize,
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for Plane<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Plane {
            simd,
            rows,
            xp,
            iw,
            yp,
            width,
            cols,
            c0,
        } = self;
        let n = cols.len();
        for (i, &(r0, r1)) in rows.iter().enumerate() {
            if r0 >= r1 {
                continue;
            }
            let mid = &mut yp[i * width..][cols.clone()];
            let inputs = |r: usize, j: usize| &xp[r * iw + c0 + 2 * j..];
            if n >= 8 {
                blocks::<8, 16>(mid, r0..r1, inputs, |best, x| max8(simd, best, x));
            } else {
                blocks::<4, 8>(mid, r0..r1, inputs, |best, x| max4(simd, best, x));
            }
        }
    }
}

/// `mid` (at least `B` outputs) in blocks of `B` windows, each block folding `step` over the
/// window rows `rows`, reading the `I = 2B` inputs from `inputs(row, first window)`. The last
/// block overlaps the one before rather than running short: its outputs are recomputed from
/// the same inputs, to the same values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn blocks<'a, const B: usize, const I: usize>(
    mid: &mut [f32],
    rows: Range<usize>,
    inputs: impl Fn(usize, usize) -> &'a [f32],
    step: impl Fn(Option<[f32; B]>, &[f32; I]) -> [f32; B],
) {
    let n = mid.len();
    let mut j = 0;
    while j < n {
        let j0 = j.min(n - B);
        let best = rows.clone().fold(None, |best, r| {
            let Some(x) = inputs(r, j0).first_chunk::<I>() else {
                unreachable!("a pool window reads past its row");
            };
            Some(step(best, x))
        });
        if let Some(best) = best {
            mid[j0..j0 + B].copy_from_slice(&best);
        }
        j += B;
    }
}

/// Eight windows' maxima so far, taking in their next row's two taps `x` (16 inputs).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn max8(simd: pulp::x86::V3, best: Option<[f32; 8]>, x: &[f32; 16]) -> [f32; 8] {
    use std::arch::x86_64::__m256;
    let [a, b]: [__m256; 2] = pulp::cast(*x);
    // Lane by 128-bit lane: even = [a0 a2 b0 b2 | a4 a6 b4 b6], odd likewise, so window k's
    // taps sit in the same lane of both, in the order [0 1 4 5 2 3 6 7].
    let even = simd.avx._mm256_shuffle_ps::<0b10_00_10_00>(a, b);
    let odd = simd.avx._mm256_shuffle_ps::<0b11_01_11_01>(a, b);
    // 64-bit pairs (0 1)(4 5)(2 3)(6 7) into order and back (the same swap both ways).
    let order = |v: __m256| -> __m256 {
        pulp::cast(
            simd.avx2
                ._mm256_permute4x64_pd::<0b11_01_10_00>(pulp::cast(v)),
        )
    };
    let m = match best {
        None => even,
        Some(m) => simd.avx._mm256_max_ps(even, order(pulp::cast(m))),
    };
    pulp::cast(order(simd.avx._mm256_max_ps(odd, m)))
}

/// Four windows' maxima so far, taking in their next row's two taps `x` (8 inputs).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn max4(simd: pulp::x86::V3, best: Option<[f32; 4]>, x: &[f32; 8]) -> [f32; 4] {
    use std::arch::x86_64::__m128;
    let [a, b]: [__m128; 2] = pulp::cast(*x);
    let even = simd.sse._mm_shuffle_ps::<0b10_00_10_00>(a, b);
    let odd = simd.sse._mm_shuffle_ps::<0b11_01_11_01>(a, b);
    let m = match best {
        None => even,
        Some(m) => simd.sse._mm_max_ps(even, pulp::cast(m)),
    };
    pulp::cast(simd.sse._mm_max_ps(odd, m))
}
