//! f32 GEMM throughput, C (M x N) = A (M x K) B (K x N), all row-major, on the shapes of
//! ResNet-50's and a YOLO-style detector's convolutions as im2col + GEMM gives them (M output
//! channels, K = input channels x kernel area, N output positions) and a BERT-style product.
//! Prints GFLOP/s (medians of REPEAT runs) for matrixmultiply on one thread, matrixmultiply
//! split over rayon by blocks of C's longer side (as cpu_gemm.rs does), and faer on one
//! thread and on every rayon thread.
//! Usage: cargo run --release [-- REPEAT]

use std::time::Instant;

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

const SHAPES: &[(&str, usize, usize, usize)] = &[
    ("resnet50 stem 7x7/2", 64, 147, 12544),
    ("resnet50 3x3 64", 64, 576, 3136),
    ("resnet50 1x1 64->256", 256, 64, 3136),
    ("resnet50 3x3 128", 128, 1152, 784),
    ("resnet50 3x3 512", 512, 4608, 49),
    ("resnet50 1x1 512->2048", 2048, 512, 49),
    ("yolo stem 3x3/2", 16, 27, 25600),
    ("yolo c2f 3x3 32", 32, 288, 6400),
    ("bert ffn 128x512x2048", 128, 512, 2048),
    ("bert-tiny qkv", 128, 128, 128),
    ("mnist conv 8x25x784", 8, 25, 784),
    ("small 32^3", 32, 32, 32),
    ("tiny 8^3", 8, 8, 8),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(repeat: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..repeat)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn mm_one(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    // matrixmultiply's safe entry is through raw strides; this is the same call ndarray makes.
    #[allow(unsafe_code)]
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

fn mm_split(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let threads = rayon::current_num_threads();
    if m >= n {
        let rows = m.div_ceil(threads).max(1);
        c.par_chunks_mut(rows * n).enumerate().for_each(|(i, cb)| {
            let r = cb.len() / n;
            mm_one(r, k, n, &a[i * rows * k..][..r * k], b, cb);
        });
    } else {
        // Blocks of columns: each writes a strided part of C, through its own buffer.
        let cols = n.div_ceil(threads).max(1);
        let parts: Vec<(usize, Vec<f32>)> = (0..n.div_ceil(cols))
            .into_par_iter()
            .map(|j| {
                let w = cols.min(n - j * cols);
                let bj: Vec<f32> = (0..k)
                    .flat_map(|p| b[p * n + j * cols..][..w].to_vec())
                    .collect();
                let mut cj = vec![0.0; m * w];
                mm_one(m, k, w, a, &bj, &mut cj);
                (j, cj)
            })
            .collect();
        for (j, cj) in parts {
            let w = cj.len() / m;
            for i in 0..m {
                c[i * n + j * cols..][..w].copy_from_slice(&cj[i * w..][..w]);
            }
        }
    }
}

/// faer on one thread per block, C cut into blocks along its longer side over rayon (the
/// split cpu_gemm.rs makes), each block a view of C: no copies.
fn faer_split(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let threads = rayon::current_num_threads();
    let a = MatRef::from_row_major_slice(a, m, k);
    let b = MatRef::from_row_major_slice(b, k, n);
    let mut c = MatMut::from_row_major_slice_mut(c, m, n);
    let side = m.max(n);
    let blocks = threads.min(side / 16).max(1);
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 0..blocks {
        let len = side * (i + 1) / blocks - start;
        let (part, rest) = if m >= n { c.split_at_row_mut(len) } else { c.split_at_col_mut(len) };
        parts.push((start, len, part));
        c = rest;
        start += len;
    }
    parts.into_par_iter().for_each(|(at, len, part)| {
        if m >= n {
            matmul(part, Accum::Replace, a.subrows(at, len), b, 1.0, Par::Seq);
        } else {
            matmul(part, Accum::Replace, a, b.subcols(at, len), 1.0, Par::Seq);
        }
    });
}

fn faer_mm(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32], par: Par) {
    let a = MatRef::from_row_major_slice(a, m, k);
    let b = MatRef::from_row_major_slice(b, k, n);
    let c = MatMut::from_row_major_slice_mut(c, m, n);
    matmul(c, Accum::Replace, a, b, 1.0, par);
}

fn main() {
    let repeat: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let threads = rayon::current_num_threads();
    println!("threads {threads}, repeat {repeat}, GFLOP/s (medians)");
    println!(
        "{:<26} {:>5} {:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "shape", "M", "K", "N", "mm 1t", "mm split", "faer 1t", "faer all", "faer split"
    );
    for &(name, m, k, n) in SHAPES {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 13.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 11.0)
            .collect();
        let mut want = vec![0.0; m * n];
        mm_one(m, k, n, &a, &b, &mut want);
        let flop = 2.0 * (m * k * n) as f64 / 1e9;
        let mut c = vec![0.0; m * n];
        let mut rate = |f: &mut dyn FnMut(&mut [f32])| {
            let t = time(repeat, || f(&mut c));
            let worst = c
                .iter()
                .zip(&want)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(worst <= 1e-2, "{name}: off by {worst}");
            flop / t
        };
        let r = [
            rate(&mut |c| mm_one(m, k, n, &a, &b, c)),
            rate(&mut |c| mm_split(m, k, n, &a, &b, c)),
            rate(&mut |c| faer_mm(m, k, n, &a, &b, c, Par::Seq)),
            rate(&mut |c| faer_mm(m, k, n, &a, &b, c, Par::rayon(0))),
            rate(&mut |c| faer_split(m, k, n, &a, &b, c)),
        ];
        println!(
            "{name:<26} {m:>5} {k:>5} {n:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1}",
            r[0], r[1], r[2], r[3], r[4]
        );
    }
}
