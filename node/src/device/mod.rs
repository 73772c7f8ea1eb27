//! The devices of one machine: the CPU backend and the Vulkan GPUs.

pub mod cpu;
pub mod vulkan;
