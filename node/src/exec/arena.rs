//! Offsets for intermediate buffers, assigned by lifetime: two values whose lifetimes do not
//! overlap may share bytes, so a model's footprint is its widest cut, not all activations.

/// A request: `bytes` live from step `start` to step `end`, both inclusive.
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub bytes: u64,
    pub start: usize,
    pub end: usize,
}

/// Storage-buffer offsets must be aligned; 256 covers every device's minimum.
pub const ALIGN: u64 = 256;

/// First-fit by start time. Returns each request's offset and the arena's total size.
pub fn assign(reqs: &[Interval]) -> (Vec<u64>, u64) {
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by_key(|&i| (reqs[i].start, std::cmp::Reverse(reqs[i].bytes), i));
    let mut offsets = vec![0; reqs.len()];
    // (offset, size, end) of placed requests still alive.
    let mut active: Vec<(u64, u64, usize)> = Vec::new();
    let mut total = 0;
    for i in order {
        let r = reqs[i];
        active.retain(|&(_, _, end)| end >= r.start);
        active.sort_unstable();
        let size = r.bytes.div_ceil(ALIGN).max(1) * ALIGN;
        let mut at = 0;
        for &(off, sz, _) in &active {
            if off >= at + size {
                break;
            }
            at = at.max(off + sz);
        }
        offsets[i] = at;
        active.push((at, size, r.end));
        total = total.max(at + size);
    }
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_lifetimes_share_and_overlapping_ones_do_not() {
        let reqs = [
            Interval {
                bytes: 100,
                start: 0,
                end: 1,
            },
            Interval {
                bytes: 100,
                start: 1,
                end: 2,
            },
            Interval {
                bytes: 100,
                start: 2,
                end: 3,
            },
        ];
        let (off, total) = assign(&reqs);
        assert_ne!(off[0], off[1]);
        assert_ne!(off[1], off[2]);
        assert_eq!(off[0], off[2], "the first is dead when the third starts");
        assert_eq!(total, 2 * ALIGN);
    }
}
