//! f32 kernels on AVX2 + FMA (through pulp's runtime detection, no `unsafe` here), reached
//! through the hooks of `numeric::Float` where the CPU has them: the direct convolution of small
//! 1-D and 2-D shapes, and the interior of 2x2 stride-2 max pools.

pub mod direct;
#[cfg(all(test, target_arch = "x86_64"))]
mod direct_tests;
pub mod pairs;
