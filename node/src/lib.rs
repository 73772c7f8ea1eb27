//! VKML: a Vulkan ONNX inference runtime.
//!
//! The layers, each depending only on those above it:
//! - [`tensor`], [`model`]: plain values (host tensors, the decoded model);
//! - [`onnx`], [`io`]: reading model files (.onnx, external data) and tensor files (.npy, .pb);
//! - [`ops`]: the op registry: shape rules, CPU reference kernels, GPU kernel descriptions;
//! - [`graph`]: the IR: typed values, shape inference, constant folding;
//! - [`device`]: the CPU backend and the Vulkan backend (the only home of `unsafe`);
//! - [`exec`]: plans turned into chunks, dependency counters and buffers;
//! - [`session`]: the API: load once, run many times from many threads;
//! - [`cluster`]: nodes joined into a cluster: membership, inventories, the peer protocol.

pub mod cluster;
pub mod device;
pub mod distributed;
pub mod error;
pub mod exec;
pub mod graph;
pub mod io;
pub mod model;
pub mod onnx;
pub mod ops;
pub mod session;
pub mod tensor;

pub use error::Error;
pub use exec::NodeTime;
pub use session::{DeviceSelection, Session, SessionOptions};
pub use tensor::{DType, Tensor};
