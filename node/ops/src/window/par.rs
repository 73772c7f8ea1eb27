//! When the windowed CPU kernels (Conv, the pools, BatchNormalization) go to rayon, and in
//! what grain.
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

#[cfg(test)]
mod tests {
    use super::*;

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
