//! VKML: a Vulkan ONNX inference runtime.
//!
//! The layers, each depending only on those above it:
//! - [`tensor`], [`model`], [`ops`] (the `vkml-ops` crate): plain values (host tensors, the
//!   decoded model) and the op registry: shape rules, CPU kernels (the CPU backend),
//!   GPU kernel descriptions;
//! - [`onnx`], [`io`]: reading model files (.onnx, external data) and tensor files (.npy, .pb);
//! - [`graph`]: the IR: typed values, shape inference, constant folding;
//! - [`device`]: the Vulkan GPUs (the `vkml-vulkan` crate, the only home of `unsafe` but for
//!   the model file's mapping, `onnx/mmap.rs`);
//! - [`exec`]: plans turned into chunks, dependency counters and buffers;
//! - [`session`]: the API: load once, run many times from many threads, with a [`Tuning`];
//! - [`cluster`]: nodes joined into a cluster: membership, inventories, the peer protocol;
//! - [`distributed`]: models across the cluster.

// The one exception, with its reasons, is the model file's memory mapping (onnx/mmap.rs).
#![deny(unsafe_code)]

pub mod cache;
pub mod cluster;
mod control;
pub mod device;
pub mod distributed;
pub mod error;
pub mod exec;
pub mod files;
pub mod generate;
pub mod graph;
pub mod io;
pub mod lower;
pub mod onnx;
pub mod priority;
pub mod session;
pub mod tuning;

pub use vkml_ops as ops;
pub use vkml_ops::{lowp, model, tensor};

pub use error::Error;
pub use exec::{KernelTime, NodeTime};
pub use graph::Fusion;
pub use session::{DeviceSelection, Session, SessionOptions};
pub use tensor::{DType, Tensor};
pub use tuning::Tuning;

/// The README's Rust examples, compiled (and type-checked) by `cargo test --doc`.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
