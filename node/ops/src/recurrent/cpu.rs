//! The reference: each direction of each batch row stepped through its sequence in f64.

use super::{Cell, Dims, Direction, Recurrent};

pub struct Run<'a> {
    pub op: &'a Recurrent,
    pub d: Dims,
    pub x: Vec<f64>,
    pub w: Vec<f64>,
    pub r: Vec<f64>,
    pub b: Option<Vec<f64>>,
    pub lens: Vec<usize>,
    pub h0: Option<Vec<f64>>,
    pub c0: Option<Vec<f64>>,
    pub p: Option<Vec<f64>>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Run<'_> {
    /// Y, Y_h and Y_c in the op's layout.
    pub fn all(&self) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let Dims {
            seq,
            batch,
            hidden,
            dirs,
            ..
        } = self.d;
        let mut y = vec![0.0; seq * dirs * batch * hidden];
        let mut yh = vec![0.0; dirs * batch * hidden];
        let mut yc = vec![0.0; dirs * batch * hidden];
        for dir in 0..dirs {
            for row in 0..batch {
                let state = self.state_at(dir, row);
                let (h, c) = self.row(dir, row, state, &mut |t, h| {
                    let at = self.y_index(t, dir, row);
                    y[at..at + hidden].copy_from_slice(h);
                });
                let at = self.state_index(dir, row);
                yh[at..at + hidden].copy_from_slice(&h);
                yc[at..at + hidden].copy_from_slice(&c);
            }
        }
        (y, yh, yc)
    }

    fn y_index(&self, t: usize, dir: usize, row: usize) -> usize {
        let Dims {
            seq,
            batch,
            hidden,
            dirs,
            ..
        } = self.d;
        let i = if self.op.batch_first {
            (row * seq + t) * dirs + dir
        } else {
            (t * dirs + dir) * batch + row
        };
        i * hidden
    }

    fn state_index(&self, dir: usize, row: usize) -> usize {
        let Dims {
            batch,
            hidden,
            dirs,
            ..
        } = self.d;
        let i = if self.op.batch_first {
            row * dirs + dir
        } else {
            dir * batch + row
        };
        i * hidden
    }

    fn state_at(&self, dir: usize, row: usize) -> (Vec<f64>, Vec<f64>) {
        let at = self.state_index(dir, row);
        let h = self.d.hidden;
        let take =
            |v: &Option<Vec<f64>>| v.as_ref().map_or(vec![0.0; h], |v| v[at..at + h].to_vec());
        (take(&self.h0), take(&self.c0))
    }

    /// Steps one row of one direction from its initial state, giving each step's H to `emit`
    /// with its time; returns the final H and C.
    fn row(
        &self,
        dir: usize,
        row: usize,
        (mut h, mut c): (Vec<f64>, Vec<f64>),
        emit: &mut dyn FnMut(usize, &[f64]),
    ) -> (Vec<f64>, Vec<f64>) {
        let Dims {
            seq,
            batch,
            input,
            hidden,
            ..
        } = self.d;
        let gates = self.op.cell.gates();
        let reverse = match self.op.direction {
            Direction::Forward => false,
            Direction::Reverse => true,
            Direction::Both => dir == 1,
        };
        let w = &self.w[dir * gates * hidden * input..][..gates * hidden * input];
        let r = &self.r[dir * gates * hidden * hidden..][..gates * hidden * hidden];
        let bias = |g: usize, j: usize, recurrent: bool| {
            self.b.as_ref().map_or(0.0, |b| {
                b[dir * 2 * gates * hidden
                    + usize::from(recurrent) * gates * hidden
                    + g * hidden
                    + j]
            })
        };
        let acts = &self.op.activations[dir];
        let clip = |v: f64| match self.op.clip {
            Some(c) => v.clamp(-f64::from(c), f64::from(c)),
            None => v,
        };
        let len = self.lens[row];
        for step in 0..len {
            let t = if reverse { len - 1 - step } else { step };
            let xi = if self.op.batch_first {
                row * seq + t
            } else {
                t * batch + row
            };
            let x = &self.x[xi * input..][..input];
            let wx = |g: usize, j: usize| {
                dot(x, &w[(g * hidden + j) * input..][..input]) + bias(g, j, false)
            };
            let rh = |g: usize, j: usize, h: &[f64]| {
                dot(h, &r[(g * hidden + j) * hidden..][..hidden]) + bias(g, j, true)
            };
            let next: Vec<f64> = match self.op.cell {
                Cell::Rnn => (0..hidden)
                    .map(|j| acts[0].apply(clip(wx(0, j) + rh(0, j, &h))))
                    .collect(),
                Cell::Gru => {
                    let z: Vec<f64> = (0..hidden)
                        .map(|j| acts[0].apply(clip(wx(0, j) + rh(0, j, &h))))
                        .collect();
                    let rg: Vec<f64> = (0..hidden)
                        .map(|j| acts[0].apply(clip(wx(1, j) + rh(1, j, &h))))
                        .collect();
                    let reset: Vec<f64> = rg.iter().zip(&h).map(|(r, h)| r * h).collect();
                    (0..hidden)
                        .map(|j| {
                            let pre = if self.op.linear_before_reset {
                                wx(2, j) + rg[j] * rh(2, j, &h)
                            } else {
                                wx(2, j) + rh(2, j, &reset)
                            };
                            let cand = acts[1].apply(clip(pre));
                            (1.0 - z[j]) * cand + z[j] * h[j]
                        })
                        .collect()
                }
                Cell::Lstm => {
                    let peep = |k: usize, j: usize| {
                        self.p
                            .as_ref()
                            .map_or(0.0, |p| p[dir * 3 * hidden + k * hidden + j])
                    };
                    let mut next = vec![0.0; hidden];
                    for j in 0..hidden {
                        let i = acts[0].apply(clip(wx(0, j) + rh(0, j, &h) + peep(0, j) * c[j]));
                        let f = if self.op.input_forget {
                            1.0 - i
                        } else {
                            acts[0].apply(clip(wx(2, j) + rh(2, j, &h) + peep(2, j) * c[j]))
                        };
                        let cand = acts[1].apply(clip(wx(3, j) + rh(3, j, &h)));
                        let cn = f * c[j] + i * cand;
                        let o = acts[0].apply(clip(wx(1, j) + rh(1, j, &h) + peep(1, j) * cn));
                        next[j] = o * acts[2].apply(cn);
                        c[j] = cn;
                    }
                    next
                }
            };
            h = next;
            emit(t, &h);
        }
        (h, c)
    }
}
