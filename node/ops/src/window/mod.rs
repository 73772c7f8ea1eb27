//! Sliding windows, shared by Conv, ConvTranspose and the pools: their geometry (kernel,
//! strides, dilations, pads, auto_pad), the padded stride-phase copy of a plane that depthwise
//! convolution and max pooling read their taps from, and the parallel walk over output chunks
//! (with the zeroing and joining of large outputs on rayon that Concat uses too).

pub mod geometry;
pub mod par;
pub(crate) mod phases;
