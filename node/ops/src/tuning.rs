//! Choices among kernels that compute the same thing, passed to the ops as a value so that two
//! sessions in one process may differ, and nothing in the library reads the environment. The
//! defaults are the shape rules; the alternatives exist for A/B measurements.

pub use crate::splitk::SplitK;

/// How the GPU kernels of Conv, MatMul and Gemm are chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KernelTuning {
    /// Split-K of the implicit-GEMM convolution (splitk.rs).
    pub conv_splitk: SplitK,
    /// Split-K of single-dispatch f32 matrix products.
    pub gemm_splitk: SplitK,
    /// The tensor-core kernels f16 and bf16 products may take (matmul/coop.rs).
    pub gemm_coop: CoopKernels,
    /// The tile of the f32 matrix-product kernel.
    pub gemm_tiles: GemmTiles,
    /// Products of a few rows (decode) through gemv.comp (matmul/gemv.rs).
    pub gemv: Gemv,
}

/// Which tensor-core kernels f16/bf16 products are offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CoopKernels {
    /// KHR cooperative matrix and NV cooperative matrix 2, best first.
    #[default]
    Any,
    /// KHR cooperative matrix only.
    Khr,
    /// NV cooperative matrix 2 only, its tile chosen by the product's size.
    Nv2,
    /// NV cooperative matrix 2 with its 128x256 tiles whatever the size.
    Nv2Wide,
    /// NV cooperative matrix 2 with its 128x128 tiles whatever the size.
    Nv2Narrow,
    /// None: the products take the plain kernels.
    Off,
}

/// The tile of the f32 matrix-product kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum GemmTiles {
    /// 128x128 (gemm_big) for products with enough of them to fill a large GPU, else 64x64.
    #[default]
    Auto,
    /// 64x64 (gemm) always.
    Small,
    /// 128x128 (gemm_big) always.
    Big,
}

/// Whether MatMul products of a few rows of A take the matrix-vector kernel (matmul/gemv.rs),
/// in which of its workgroup sizes, and how many 16-byte column vectors one workgroup owns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Gemv {
    /// The shape rule (matmul/gemv.rs `auto_choice`): one row against a wide B (an LLM's
    /// head, q, o, gate, up) in the wide workgroups; a deep product (K >= 3N: the down
    /// projection) in the four-row ones with K split over as many workgroups as fill a large
    /// GPU; the rest in the four-row ones with all of K each.
    #[default]
    Auto,
    /// The four-row workgroups with all of K each, as many vectors as keep enough workgroups
    /// (the rule before K was split).
    Unsplit,
    /// The four-row workgroups (256 invocations) with this many vectors (1, 2, 4, 8, 16, 32).
    Lanes(u8),
    /// The four-row workgroups with this many vectors and K split into this many slices (up
    /// to 64, fewer where a slice would give an invocation less than a round of loads).
    Split(u8, u8),
    /// The wide workgroups (1,024 invocations, one row of A) with this many; products of
    /// more rows take the four-row ones.
    Wide(u8),
    /// The one-row workgroups (256 invocations) with this many vectors and K in this many
    /// slices (1: whole); products of more rows take the four-row ones.
    Row(u8, u8),
    /// Never: such products take the GEMM kernels.
    Off,
}
