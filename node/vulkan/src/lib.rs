//! VKML's Vulkan layer: the only home of `unsafe` in VKML (besides the model file's mapping,
//! see the node crate's onnx/mmap.rs). It knows nothing of ops: it runs the kernels of the
//! `vkml-shaders` crate over buffers it allocates, as recorded lists of [`Step`]s.
//!
//! - [`Vulkan`] loads the loader at run time and opens every usable GPU as a [`Gpu`];
//! - [`Gpu::create_buffer`] gives [`GpuBuffer`]s, addressed by shaders through their device
//!   address (no descriptor sets anywhere: see docs/SHADERS.md);
//! - [`Gpu::record`] turns a list of [`Step`]s into a [`CommandList`], recorded once and
//!   replayed by [`Gpu::submit`] as often as wanted, with no allocation, recording or
//!   descriptor update per run;
//! - completion is one timeline semaphore per GPU: [`Gpu::submit`] returns the value that
//!   signals the list's completion, [`Gpu::wait`] / [`Gpu::wait_spin`] wait for it;
//! - [`Gpu::import_host`] maps a [`HostBlock`] into a GPU, so that two GPUs of a process share
//!   it and pass values by their copy engines alone ([`BridgeProbe`] times one such transfer);
//! - [`Gpu::arm`] queues a list recorded by [`Gpu::record_gated`] behind a gate before its
//!   inputs exist, and [`Armed::fire`] opens the gate: the submission's latency leaves the
//!   run's critical path. Anything else submitted meanwhile disarms it (gate.rs).
//!
//! Lifetimes are kept by reference counts rather than by the caller's discipline: a buffer and
//! a command list keep their `Gpu` alive, a command list keeps alive every buffer its steps
//! touch, and dropping a command list waits for its last submission first.

mod bridge;
mod buffer;
mod coop;
mod error;
mod gate;
mod gpu;
mod info;
mod instance;
mod pipeline;
mod record;
mod submit;

pub use bridge::BridgeProbe;
pub use buffer::{GpuBuffer, HostBlock, MemoryUse};
pub use error::VulkanError;
pub use gate::Armed;
pub use gpu::Gpu;
pub use info::GpuInfo;
pub use instance::{QueueFamily, Vulkan, VulkanOptions, validation_messages};
pub use record::{CommandList, Step};
pub use vkml_shaders::{Kernel, Shader, ShaderNeeds};
