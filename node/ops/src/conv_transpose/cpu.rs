//! The fast CPU ConvTranspose for f32 and f64: per (batch, group), one GEMM makes every
//! (output channel, tap) row of contributions, `col = W_g^T X_g` ((M/g x K) x in_vol, by the
//! blocked GEMM of cpu_gemm.rs, on rayon when large), then each output channel's plane adds
//! its taps' rows at their shifted positions (col2im), planes spread over rayon. The naive
//! scatter this replaces walked every (input, tap, channel) with index arithmetic per element
//! and ran a DB-style detector's upsampling head at 0.5 GMAC/s on 16 cores.

use super::Geometry;
use crate::cpu_gemm::{Dot, gemm};

/// Y (N x M x out_vol) for X (N x C x in_vol), W (C x M/g x kernel) and an optional bias.
pub fn conv_transpose<T>(g: &Geometry, x: &[T], w: &[T], b: Option<&[T]>) -> Vec<T>
where
    T: Dot + std::ops::AddAssign + From<f32>,
{
    let in_vol: usize = g.input.iter().product();
    let out_vol: usize = g.output.iter().product();
    let k_vol: usize = g.kernel.iter().product();
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let rows = mg * k_vol;
    let mut y = vec![T::default(); g.n * g.m * out_vol];
    if y.is_empty() {
        return y;
    }
    let taps = tap_tables(g);
    let mut col = vec![T::default(); rows * in_vol];
    for n in 0..g.n {
        for grp in 0..g.group {
            let xg = &x[(n * g.c + grp * cg) * in_vol..][..cg * in_vol];
            let wg = &w[grp * cg * rows..][..cg * rows];
            // A = W_g^T: row i (= mo * k_vol + kv) of A is column i of W_g (cg x rows).
            gemm(
                (rows, cg, in_vol),
                T::from(1.0),
                (wg, 0, 1, rows),
                (xg, 0, in_vol, 1),
                T::default(),
                &mut col,
                in_vol,
            );
            let yg = &mut y[(n * g.m + grp * mg) * out_vol..][..mg * out_vol];
            crate::window::par::for_each_chunk(yg, out_vol, k_vol * in_vol, |mo, plane| {
                if let Some(b) = b {
                    plane.fill(b[grp * mg + mo]);
                }
                for (kv, targets) in taps.iter().enumerate() {
                    let src = &col[(mo * k_vol + kv) * in_vol..][..in_vol];
                    for &(iv, ov) in targets {
                        plane[ov] += src[iv];
                    }
                }
            });
        }
    }
    y
}

/// For each kernel tap, the (input position, output position) pairs it joins inside the
/// output: worked out once per call, so the per-channel loops are a gather and an add.
fn tap_tables(g: &Geometry) -> Vec<Vec<(usize, usize)>> {
    let sp = g.input.len();
    let k_vol: usize = g.kernel.iter().product();
    let in_vol: usize = g.input.iter().product();
    let mut tables = Vec::with_capacity(k_vol);
    let mut kk = vec![0usize; sp];
    let mut ii = vec![0usize; sp];
    for kv in 0..k_vol {
        unravel(kv, &g.kernel, &mut kk);
        let mut t = Vec::with_capacity(in_vol);
        for iv in 0..in_vol {
            unravel(iv, &g.input, &mut ii);
            let mut ov = 0usize;
            let inside = (0..sp).all(|a| {
                let o = (ii[a] * g.stride[a] + kk[a] * g.dilation[a]) as i64 - g.pad_begin[a];
                let ok = (0..g.output[a] as i64).contains(&o);
                ov = ov * g.output[a] + if ok { o as usize } else { 0 };
                ok
            });
            if inside {
                t.push((iv, ov));
            }
        }
        tables.push(t);
    }
    tables
}

/// `i`'s coordinates in a row-major box of `dims`.
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for a in (0..dims.len()).rev() {
        out[a] = i % dims[a];
        i /= dims[a];
    }
}
