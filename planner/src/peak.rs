//! The highest point of a sum of intervals: add bytes over a range of op positions, read the
//! maximum over all positions, both in O(log n). Greedy placement asks "what would the peak be"
//! of every device for every op, so a linear scan would make planning quadratic in the ops.

/// A segment tree over positions `0..len`, range addition, global maximum. Each node keeps the
/// maximum of its range including the additions made at it (`add`), so nothing is pushed down.
pub struct PeakTree {
    len: usize,
    max: Vec<i128>,
    add: Vec<i128>,
}

impl PeakTree {
    pub fn new(len: usize) -> PeakTree {
        let len = len.max(1);
        PeakTree {
            len,
            max: vec![0; 4 * len],
            add: vec![0; 4 * len],
        }
    }

    /// Adds `delta` at every position of `from..=to` (clamped to the tree).
    pub fn add(&mut self, from: usize, to: usize, delta: i128) {
        let to = to.min(self.len - 1);
        if from <= to {
            self.add_at(1, 0, self.len - 1, from, to, delta);
        }
    }

    /// The maximum over every position (0 for an empty tree: sums start at zero).
    pub fn max(&self) -> u64 {
        u64::try_from(self.max[1].max(0)).unwrap_or(u64::MAX)
    }

    fn add_at(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, delta: i128) {
        if to < lo || hi < from {
            return;
        }
        if from <= lo && hi <= to {
            self.max[node] += delta;
            self.add[node] += delta;
            return;
        }
        let mid = lo + (hi - lo) / 2;
        self.add_at(2 * node, lo, mid, from, to, delta);
        self.add_at(2 * node + 1, mid + 1, hi, from, to, delta);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]) + self.add[node];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain array, for random ranges.
    #[test]
    fn matches_a_direct_sum() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for len in [1usize, 2, 3, 7, 64, 100] {
            let mut tree = PeakTree::new(len);
            let mut direct = vec![0i128; len];
            for _ in 0..200 {
                let a = next(len as u64) as usize;
                let b = a + next((len - a) as u64) as usize;
                let d = next(1000) as i128 - 300;
                tree.add(a, b, d);
                for x in &mut direct[a..=b] {
                    *x += d;
                }
                let want = direct.iter().copied().max().unwrap().max(0) as u64;
                assert_eq!(tree.max(), want, "len {len}");
            }
        }
    }
}
