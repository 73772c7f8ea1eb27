//! When the windowed CPU kernels (Conv, the pools, BatchNormalization) go to rayon, and in
//! what grain; and large outputs zeroed or joined by rayon's threads ([`zeroed`],
//! [`concat_bytes`]).
//!
//! Handing work to rayon from a thread outside its pool (the executor's) is not free: the job
//! is injected, a sleeping worker is woken through a futex, and the caller blocks on a latch
//! until it is done; that round trip measured 10 to 30 us here, far more than a small
//! convolution or pool takes (a profile of a 28x28 MNIST CNN spent a quarter of its time in
//! sched_yield, futexes and the latch). So work runs on the calling thread unless there is
//! enough of it for at least two tasks of [`TASK_MIN_WORK`] each, and each rayon task gets at
//! least that much.

use rayon::prelude::*;

/// The least work (multiply-adds, or input elements visited) worth one rayon task: about
/// 30 to 100 us on one core for these scalar or packed loops, so the hand-off above costs
/// under a third of what a task does.
pub const TASK_MIN_WORK: usize = 128 * 1024;

/// How many consecutive items of `work_per_item` each a rayon task should take, or `None`
/// when `items` of them do not make two such tasks and the loop should run inline.
pub fn grain(items: usize, work_per_item: usize) -> Option<usize> {
    let per_task = TASK_MIN_WORK.div_ceil(work_per_item.max(1)).max(1);
    (items >= 2 * per_task).then_some(per_task)
}

/// `f(i, chunk)` for each `chunk`-sized piece of `y` (the last may be shorter), on rayon when
/// [`grain`] says so, else in order on this thread.
pub fn for_each_chunk<T: Send>(
    y: &mut [T],
    chunk: usize,
    work_per_chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    chunks(y, chunk, work_per_chunk, &f);
}

/// [`for_each_chunk`] with the closure as a trait object, so that rayon's generic machinery is
/// compiled once per element type, not once per caller's closure.
fn chunks<T: Send>(
    y: &mut [T],
    chunk: usize,
    work_per_chunk: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let chunk = chunk.max(1);
    match grain(y.len().div_ceil(chunk), work_per_chunk) {
        Some(min) => y
            .par_chunks_mut(chunk)
            .with_min_len(min)
            .enumerate()
            .for_each(|(i, c)| f(i, c)),
        None => y.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c)),
    }
}

/// A vector of `n` zeros (`T::default()`), written by rayon's threads when it is large.
///
/// A CPU kernel's output is allocated zeroed and then overwritten, as safe Rust cannot hand a
/// GEMM uninitialised memory. The allocator zeroes memory it reuses (or the kernel clears fresh
/// pages as they are first touched) on the calling thread alone: a serial pass over a
/// convolution's output of several MB while the other threads wait. Here each of rayon's
/// threads zeroes (and faults in) its own part.
pub fn zeroed<T: Copy + Default + Send + Sync>(n: usize) -> Vec<T> {
    if n < PAR_ZERO_MIN {
        return vec![T::default(); n];
    }
    let mut v = Vec::with_capacity(n);
    v.par_extend(rayon::iter::repeat_n(T::default(), n).with_min_len(PAR_ZERO_MIN / 2));
    v
}

/// `segments` joined end to end, copied by rayon's threads in pieces of [`COPY_PIECE`] bytes
/// when the whole is large (a copy on one core runs at a fraction of the memory's bandwidth;
/// Concat's joins of a few MB were 3-6% of the CNNs' time on 16 cores), else in one pass.
pub fn concat_bytes(segments: &[&[u8]]) -> Vec<u8> {
    let total: usize = segments.iter().map(|s| s.len()).sum();
    if total < 2 * COPY_PIECE {
        let mut out = Vec::with_capacity(total);
        for s in segments {
            out.extend_from_slice(s);
        }
        return out;
    }
    // Where each segment starts in the output.
    let starts: Vec<usize> = segments
        .iter()
        .scan(0, |at, s| {
            let start = *at;
            *at += s.len();
            Some(start)
        })
        .collect();
    let mut out = zeroed::<u8>(total);
    out.par_chunks_mut(COPY_PIECE)
        .enumerate()
        .for_each(|(i, piece)| {
            let (lo, hi) = (i * COPY_PIECE, i * COPY_PIECE + piece.len());
            // The last segment starting at or before lo, then each one overlapping the piece.
            let first = starts.partition_point(|&s| s <= lo).saturating_sub(1);
            for (seg, &start) in segments[first..].iter().zip(&starts[first..]) {
                if start >= hi {
                    break;
                }
                let (a, b) = (lo.max(start), hi.min(start + seg.len()));
                if a < b {
                    piece[a - lo..b - lo].copy_from_slice(&seg[a - start..b - start]);
                }
            }
        });
    out
}

/// The bytes one task of [`concat_bytes`] copies.
const COPY_PIECE: usize = 256 * 1024;

/// The fewest elements [`zeroed`] splits over threads: 256K elements (1 MiB of f32) is some
/// 20-50 us of memset, past the cost of a hand-off to the pool.
const PAR_ZERO_MIN: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_bytes_joins_segments_of_every_size_across_pieces() {
        let mut rng = 1u32;
        let mut byte = || {
            rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (rng >> 24) as u8
        };
        // Small (one pass), and large: segments empty, inside one piece, straddling pieces,
        // longer than several, ending exactly on a piece's edge.
        let cases: [&[usize]; 3] = [
            &[3, 0, 5],
            &[0, 10, COPY_PIECE - 10, 3 * COPY_PIECE + 1, 0, 7, COPY_PIECE],
            &[2 * COPY_PIECE + 5],
        ];
        for lens in cases {
            let segs: Vec<Vec<u8>> = lens
                .iter()
                .map(|&n| (0..n).map(|_| byte()).collect())
                .collect();
            let refs: Vec<&[u8]> = segs.iter().map(|s| s.as_slice()).collect();
            assert_eq!(concat_bytes(&refs), segs.concat(), "{lens:?}");
        }
    }

    #[test]
    fn zeroed_is_n_zeros_at_every_size() {
        for n in [0, 1, PAR_ZERO_MIN - 1, PAR_ZERO_MIN, 3 * PAR_ZERO_MIN + 7] {
            let v: Vec<f32> = zeroed(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x.to_bits() == 0));
        }
    }

    #[test]
    fn small_work_stays_inline_and_large_work_is_split_in_coarse_tasks() {
        // 784 outputs x 25 taps: one small convolution plane, far under two tasks.
        assert_eq!(grain(8, 784 * 25), None);
        // Exactly two tasks' worth is split; each task takes ceil(128Ki / 1000) items.
        assert_eq!(grain(2 * 132, 1000), Some(132));
        assert_eq!(grain(2 * 132 - 1, 1000), None);
        // Items larger than a task: each is its own task.
        assert_eq!(grain(64, 1 << 20), Some(1));
        assert_eq!(grain(1, 1 << 30), None);
        assert_eq!(grain(0, 0), None);
    }

    #[test]
    fn every_chunk_is_visited_once_with_its_index() {
        for (len, chunk, work) in [(10, 3, 1), (1 << 16, 16, 1 << 14), (7, 7, 1 << 20)] {
            let mut y = vec![0usize; len];
            for_each_chunk(&mut y, chunk, work, |i, c| {
                for (j, v) in c.iter_mut().enumerate() {
                    *v += i * chunk + j + 1;
                }
            });
            assert!(
                y.iter().enumerate().all(|(i, &v)| v == i + 1),
                "{len} {chunk}"
            );
        }
    }
}
