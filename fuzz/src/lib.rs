//! Fuzzing VKML on stable Rust: structure-aware generators for models, inputs, tensor files,
//! external-data layouts, frames after the handshake and participants' fragments, run in
//! worker processes that a driver watches for panics, aborts and hangs.
//!
//! - [`case`]: a case (target, seed, bytes) and the model it builds;
//! - [`mutate`], [`inputs`], [`values`], [`edge`], [`tensor_files`], [`protowire`]: the
//!   generators, every choice drawn from the case's bytes;
//! - [`exec`]: running a case in the worker; [`frames`]: the node a frames case talks to;
//! - [`worker`], [`driver`]: the processes.
//!
//! `vkml-fuzz --help` runs it; `cargo test -p vkml-fuzz` runs a bounded campaign per target
//! and every saved regression; `cargo bench -p vkml-fuzz` the long one (BENCHMARKS.md).
#![deny(unsafe_code)]

pub mod case;
pub mod driver;
pub mod edge;
pub mod exec;
pub mod frames;
pub mod inputs;
pub mod mutate;
pub mod protowire;
pub mod seeds;
pub mod tensor_files;
pub mod values;
pub mod worker;

/// The ONNX schema's types (node/proto/onnx.proto), owned and mutable.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}
