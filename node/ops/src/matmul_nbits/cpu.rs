//! The CPU kernel. B is dequantized a few rows (output columns) at a time into small f32
//! buffers, never as a whole: for a few rows of A (decode) each dequantized row of B meets
//! every row of A in a dot product; for more (prefill) a tile of B's rows is dequantized and
//! multiplied by the whole of A with the GEMM MatMul uses (ops/cpu_gemm.rs).

use super::Geometry;
use crate::cpu_gemm::{Dot, gemm};
use crate::window::par::for_each_chunk;

/// The zero points, as the kernel reads them.
pub enum Zp<'a> {
    /// `2^(bits - 1)` everywhere.
    Default,
    /// Packed uint8 bytes and the bytes of one row of B's zero points.
    Packed(&'a [u8], usize),
    /// One per block.
    Float(Vec<f32>),
}

/// The quantized weight of one product, its scales and zero points.
pub struct Weights<'a> {
    pub g: &'a Geometry,
    pub b: &'a [u8],
    pub scales: Vec<f32>,
    pub zp: Zp<'a>,
}

/// Up to this many rows of A the product is dot products against one dequantized row of B at
/// a time; past it, tiles of B go through the GEMM (whose packing pays off from there).
const FEW_ROWS: usize = 8;

/// Output columns per task in the dot-product form.
const COLUMNS_PER_TASK: usize = 16;

/// f32 weights one dequantized tile holds at most (256 KiB, within a core's L2 cache), unless
/// K alone is larger than [`MIN_TILE_ROWS`] rows of it.
const TILE_ELEMS: usize = 64 * 1024;
const MIN_TILE_ROWS: usize = 8;
const MAX_TILE_ROWS: usize = 256;

impl Weights<'_> {
    fn zero_point(&self, n: usize, block: usize) -> f32 {
        let g = self.g;
        match &self.zp {
            Zp::Default => (1u32 << (g.bits - 1)) as f32,
            Zp::Packed(bytes, row_bytes) => {
                let bit = block * g.bits;
                let byte = bytes[n * row_bytes + bit / 8];
                ((byte >> (bit % 8)) & mask(g.bits)) as f32
            }
            Zp::Float(z) => z[n * g.k_blocks + block],
        }
    }

    /// Row `n` of B (K values) dequantized into `out`.
    fn dequant_row(&self, n: usize, out: &mut [f32]) {
        match self.g.bits {
            2 => self.dequant_row_bits::<2>(n, out),
            4 => self.dequant_row_bits::<4>(n, out),
            _ => self.dequant_row_bits::<8>(n, out),
        }
    }

    fn dequant_row_bits<const BITS: usize>(&self, n: usize, out: &mut [f32]) {
        let g = self.g;
        let per_byte = 8 / BITS;
        let row = &self.b[n * g.row_bytes()..][..g.row_bytes()];
        for (block, values) in out[..g.k].chunks_mut(g.block).enumerate() {
            let scale = self.scales[n * g.k_blocks + block];
            let zero = self.zero_point(n, block);
            let blob = &row[block * g.blob..][..g.blob];
            // The last block may be short (K not a multiple of block_size): its padding is
            // never read.
            for (byte, vs) in blob.iter().zip(values.chunks_mut(per_byte)) {
                for (i, v) in vs.iter_mut().enumerate() {
                    let q = (byte >> (i * BITS)) & mask(BITS);
                    *v = (q as f32 - zero) * scale;
                }
            }
        }
    }

    /// `A x B^T` for A of `g.m` rows of K: `g.m` rows of N, without the bias.
    pub fn product(&self, a: &[f32]) -> Vec<f32> {
        let g = self.g;
        if g.m == 0 || g.n == 0 {
            return Vec::new();
        }
        if g.m <= FEW_ROWS {
            self.few_rows(a)
        } else {
            self.tiled(a)
        }
    }

    fn few_rows(&self, a: &[f32]) -> Vec<f32> {
        let (m, k, n) = (self.g.m, self.g.k, self.g.n);
        // Computed transposed (column-major), so that each task owns a contiguous run of
        // columns of every row.
        let mut yt = vec![0.0f32; n * m];
        let work = COLUMNS_PER_TASK * k * (m + 1);
        for_each_chunk(&mut yt, COLUMNS_PER_TASK * m, work, |task, chunk| {
            let mut w = vec![0.0f32; k];
            for (j, col) in chunk.chunks_mut(m).enumerate() {
                self.dequant_row(task * COLUMNS_PER_TASK + j, &mut w);
                for (r, y) in col.iter_mut().enumerate() {
                    *y = f32::dot(&a[r * k..][..k], &w);
                }
            }
        });
        if m == 1 {
            return yt;
        }
        let mut y = vec![0.0f32; m * n];
        for (j, col) in yt.chunks(m).enumerate() {
            for (r, &v) in col.iter().enumerate() {
                y[r * n + j] = v;
            }
        }
        y
    }

    fn tiled(&self, a: &[f32]) -> Vec<f32> {
        let (m, k, n) = (self.g.m, self.g.k, self.g.n);
        let rows = (TILE_ELEMS / k).clamp(MIN_TILE_ROWS, MAX_TILE_ROWS).min(n);
        let mut tile = vec![0.0f32; rows * k];
        let mut y = vec![0.0f32; m * n];
        for n0 in (0..n).step_by(rows) {
            let cols = rows.min(n - n0);
            let t = &mut tile[..cols * k];
            for_each_chunk(t, k, k, |r, w| self.dequant_row(n0 + r, w));
            // The tile holds B^T's columns as rows: element (p, j) of B^T is t[j * k + p].
            gemm(
                (m, k, cols),
                1.0,
                (a, 0, k, 1),
                (t, 0, 1, k),
                0.0,
                &mut y[n0..],
                n,
            );
        }
        y
    }
}

fn mask(bits: usize) -> u8 {
    ((1u16 << bits) - 1) as u8
}
