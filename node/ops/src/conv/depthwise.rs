//! Depthwise 1-D and 2-D convolutions (one input channel per group), as whole-plane vector
//! multiply-adds.
//!
//! The input plane is copied once into a zero-padded buffer split by stride phase: element
//! `[rp][cp][q][j]` is padded row `q * sh + rp`, column `j * sw + cp`. Tap (kh, kw) of output
//! (oh, ow) then reads phase (kh * dh % sh, kw * dw % sw) at row `oh + kh * dh / sh` and
//! column `ow + kw * dw / sw`: numbering the outputs `oh * wq + ow` over the phase's width
//! `wq` rather than the output width, every tap is ONE contiguous run of that buffer, at any
//! stride, dilation or padding. A tap is then one vector multiply-add over the whole plane
//! (plus `wq - ow` wasted columns a row, dropped when the result is copied out), where the
//! per-output loop it replaces worked out each window's bounds and summed its taps one scalar
//! at a time (MobileNetV2's 3x3 depthwise layers were 70% of its CPU time that way).

use crate::numeric::float::Float;
use crate::window::geometry::Axis;
use crate::window::phases::Phases;

/// Whether [`conv`] serves these axes: 1-D or 2-D (a 3-D one keeps the generic loop), with a
/// non-empty input plane (padding alone can give an empty one outputs: the loop serves that).
pub fn applies(axes: &[Axis; 3]) -> bool {
    axes[0] == Axis::UNIT && axes[1].input > 0 && axes[2].input > 0
}

/// Every group of a depthwise convolution: `y` (N x groups x ocg x OH x OW) from `x` (N x
/// groups x IH x IW), `w` (groups x ocg x KH x KW) and the bias `b` (groups x ocg). Channels
/// go in chunks, so the scratch buffer, the tap offsets and the padding's zeros are set up
/// once per chunk rather than per channel (MobileNetV2's late layers have planes of 2x2 to
/// 4x4, where that setup had cost more than the channel's arithmetic).
pub fn conv<T: Float>(
    axes: &[Axis; 3],
    groups: usize,
    ocg: usize,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    y: &mut [T],
) {
    let [_, ah, aw] = axes;
    let (in_plane, out) = (ah.input * aw.input, ocg * ah.output * aw.output);
    let tasks = y.len() / out.max(1);
    let work = out * ah.kernel * aw.kernel;
    // Channels per chunk: as many as a rayon task should take, or all of them inline.
    let per = crate::window::par::grain(tasks, work)
        .unwrap_or(tasks)
        .max(1);
    crate::window::par::for_each_chunk(y, per * out, per * work, |ci, yc| {
        let t0 = ci * per;
        // The scratch is taken out here, not inside the job: code in with_scratch's closure
        // is compiled outside pulp's AVX2 context unless LLVM happens to inline it there.
        T::with_scratch(|buf| {
            let job = Job {
                axes,
                groups,
                ocg,
                t0,
                x: &x[t0 * in_plane..],
                w,
                b,
                y: yc,
                buf,
            };
            // Compiled for AVX2 + FMA inside pulp's context, the multiply-add loops
            // vectorise eight f32 wide instead of the baseline's four.
            #[cfg(target_arch = "x86_64")]
            if let Some(simd) = pulp::x86::V3::try_new() {
                return simd.vectorize(job);
            }
            job.run();
        })
    });
}

/// A chunk of (image, group) tasks starting at task `t0`: `x` from its first input plane,
/// `y` its outputs.
struct Job<'a, T> {
    axes: &'a [Axis; 3],
    groups: usize,
    ocg: usize,
    t0: usize,
    x: &'a [T],
    w: &'a [T],
    b: Option<&'a [T]>,
    y: &'a mut [T],
    /// This thread's scratch vector, empty.
    buf: &'a mut Vec<T>,
}

impl<T: Float> pulp::NullaryFnOnce for Job<'_, T> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        self.run();
    }
}

impl<T: Float> Job<'_, T> {
    #[inline(always)]
    fn run(self) {
        let Job {
            axes,
            groups,
            ocg,
            t0,
            x,
            w,
            b,
            y,
            buf,
        } = self;
        let [_, ah, aw] = axes;
        let padded = |a: &Axis| a.input + a.pad_begin + a.pad_end;
        let ph = Phases::new((ah.stride, aw.stride), (padded(ah), padded(aw)));
        let (oh, ow) = (ah.output, aw.output);
        let kvol = ah.kernel * aw.kernel;
        let in_plane = ah.input * aw.input;
        // The wide output: rows of wq, the last one cut at ow (its run then ends inside the
        // phase, see the module's comment).
        let len = (oh - 1) * ph.wq + ow;
        let taps: Vec<usize> = (0..kvol)
            .map(|t| ph.at((t / aw.kernel) * ah.dilation, (t % aw.kernel) * aw.dilation))
            .collect();
        // Zeroed once: every channel then writes the same interior, the padding stays 0.
        buf.resize(ph.len() + len, T::default());
        let (planes, acc) = buf.split_at_mut(ph.len());
        for (t, (xc, yt)) in x
            .chunks_exact(in_plane)
            .zip(y.chunks_exact_mut(ocg * oh * ow))
            .enumerate()
        {
            let g = (t0 + t) % groups;
            ph.scatter(ah, aw, xc, planes);
            let wg = &w[g * ocg * kvol..][..ocg * kvol];
            for (oc, (wk, yp)) in wg
                .chunks_exact(kvol)
                .zip(yt.chunks_exact_mut(oh * ow))
                .enumerate()
            {
                acc.fill(b.map_or(T::default(), |b| b[g * ocg + oc]));
                // Three taps a pass: a third of the loads and stores of the accumulator.
                let (tri, rest) = taps.as_chunks::<3>();
                let (wtri, wrest) = wk.as_chunks::<3>();
                for (&[a0, a1, a2], &[w0, w1, w2]) in tri.iter().zip(wtri) {
                    let (p0, p1) = (&planes[a0..a0 + len], &planes[a1..a1 + len]);
                    let p2 = &planes[a2..a2 + len];
                    for (((a, &x0), &x1), &x2) in acc.iter_mut().zip(p0).zip(p1).zip(p2) {
                        *a += w0 * x0 + w1 * x1 + w2 * x2;
                    }
                }
                for (&at, &wv) in rest.iter().zip(wrest) {
                    for (a, &x) in acc.iter_mut().zip(&planes[at..at + len]) {
                        *a += wv * x;
                    }
                }
                for (r, yr) in yp.chunks_exact_mut(ow).enumerate() {
                    yr.copy_from_slice(&acc[r * ph.wq..][..ow]);
                }
            }
        }
    }
}
