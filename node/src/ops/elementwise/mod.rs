//! Elementwise ops: Add, Sub, Mul, Div with numpy broadcasting; Relu, Sigmoid, Tanh.
//!
//! - `broadcast`: the CPU loops (fast paths for equal shapes and scalars, a collapsed strided
//!   walk otherwise, rayon past 64K elements) and the axis collapsing the GPU parameters share;
//! - `binary`, `unary`: the op types, their shape rules and GPU descriptions.

mod binary;
mod broadcast;
mod unary;

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(in crate::ops) mod testutil;

use super::Registry;
use binary::{BinKind, Binary};
use unary::{UnKind, Unary};

pub use broadcast::collapse;
pub use unary::Real;

pub fn register(r: &mut Registry) {
    r.add("Add", |s| Binary::build(s, BinKind::Add));
    r.add("Sub", |s| Binary::build(s, BinKind::Sub));
    r.add("Mul", |s| Binary::build(s, BinKind::Mul));
    r.add("Div", |s| Binary::build(s, BinKind::Div));
    r.add("Relu", |s| Unary::build(s, UnKind::Relu));
    r.add("Sigmoid", |s| Unary::build(s, UnKind::Sigmoid));
    r.add("Tanh", |s| Unary::build(s, UnKind::Tanh));
}
