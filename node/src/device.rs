//! The devices of one machine. The Vulkan GPUs are the `vkml-vulkan` crate, re-exported here;
//! the CPU backend is the ops' own CPU kernels (`vkml-ops`), run by the executor.

pub use vkml_vulkan as vulkan;
