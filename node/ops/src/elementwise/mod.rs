//! Elementwise ops.
//!
//! - `num`: scalar arithmetic for every numeric type (integer division, Mod, shifts, NaN rules);
//! - `broadcast`: the CPU loops (fast paths for equal shapes and scalars, a collapsed strided
//!   walk otherwise, rayon past 64K elements) and the axis collapsing the GPU parameters share;
//! - `unary`: the one-input ops, table-driven (and Clip), with `fast_f32`'s vectorised f32
//!   loops for the common ones; `binary`: two-input ops (arithmetic, bitwise, logic,
//!   comparisons); `variadic`: Min Max Sum Mean; `select`: Where, Dropout;
//! - `fused`: FusedElementwise, a chain of float elementwise ops in one kernel (graph/fuse.rs);
//!   `activation`: the activation a fused op (FusedConv) applies to its output in place;
//! - `tests` (CPU against hand-derived and naive references) and `gpu_tests` (shaders against
//!   the CPU kernels), on the crate's op test kit (`testkit`).

pub(crate) mod activation;
mod binary;
pub(crate) mod broadcast;
mod fast_f32;
pub mod fused;
mod select;
mod unary;
mod variadic;

#[cfg(test)]
mod fast_f32_tests;
#[cfg(test)]
mod fused_tests;
#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
mod gpu_tests_more;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_more;

use super::Registry;
use binary::Binary;
use unary::{Clip, OPS as UNARY_OPS, Unary};

pub use crate::numeric::real::Real;
pub use broadcast::collapse;

const BINARY_OPS: [&str; 19] = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Mod",
    "Pow",
    "PRelu",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "And",
    "Or",
    "Xor",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
];

pub fn register(r: &mut Registry) {
    for op in BINARY_OPS {
        r.add(op, Binary::build);
    }
    for (op, _) in UNARY_OPS {
        r.add(op, Unary::build);
    }
    for op in ["Min", "Max", "Sum", "Mean"] {
        r.add(op, variadic::Variadic::build);
    }
    r.add("Clip", Clip::build);
    r.add("Where", select::Where::build);
    r.add("Dropout", select::Dropout::build);
    r.add(fused::OP_TYPE, fused::Fused::build);
}
