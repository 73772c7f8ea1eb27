//! Sliding windows, shared by Conv, ConvTranspose and the pools: their geometry (kernel,
//! strides, dilations, pads, auto_pad) and the parallel walk over output chunks.

pub mod geometry;
pub mod par;
pub(crate) mod phases;
