//! The reference kernel, in f64 for every float type.

use super::geometry::Geometry;

/// The rotated input, or (element of position_ids, position) for a token whose cache row is
/// outside the caches.
pub fn rotate(
    x: &[f64],
    cos: &[f64],
    sin: &[f64],
    pos: &[i64],
    g: &Geometry,
) -> Result<Vec<f64>, (usize, i64)> {
    let mut y = x.to_vec();
    let half = g.rot / 2;
    for b in 0..g.batch {
        for s in 0..g.seq {
            let row = g.cache_row(pos, b, s)? * half;
            for h in 0..g.heads {
                let base = if g.transposed {
                    ((b * g.heads + h) * g.seq + s) * g.head
                } else {
                    ((b * g.seq + s) * g.heads + h) * g.head
                };
                for c in 0..half {
                    // The pair (first, second) rotates by the angle of column c.
                    let (i, j) = if g.interleaved {
                        (base + 2 * c, base + 2 * c + 1)
                    } else {
                        (base + c, base + c + half)
                    };
                    let (co, si) = (cos[row + c], sin[row + c]);
                    y[i] = x[i] * co - x[j] * si;
                    y[j] = x[j] * co + x[i] * si;
                }
            }
        }
    }
    Ok(y)
}
