//! The API: load a model once, run it many times from many threads.
//! (Signatures fixed; bodies being written.)

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::Result;
use crate::model::ValueDef;
use crate::tensor::Tensor;

/// Which devices a session may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSelection {
    /// Every Vulkan GPU and the CPU.
    #[default]
    Auto,
    /// The CPU backend alone.
    Cpu,
    /// Every Vulkan GPU, and no CPU fallback.
    Vulkan,
    /// One Vulkan GPU, by its index in `vkml-node devices`.
    VulkanIndex(usize),
}

#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub devices: DeviceSelection,
    /// Caps every device's memory budget (bytes), to force a model to split across devices.
    pub device_memory_limit: Option<u64>,
}

/// Where the ops of one plan ran: op count per device name, and the edges between devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSummary {
    pub ops_per_device: BTreeMap<String, usize>,
    pub transfers: usize,
    pub chunks: usize,
}

pub struct Session {
    _private: (),
}

impl Session {
    pub fn load(_path: impl AsRef<Path>, _options: SessionOptions) -> Result<Session> {
        todo!()
    }
    /// Inputs the caller must feed, as declared by the model.
    pub fn inputs(&self) -> &[ValueDef] {
        todo!()
    }
    pub fn outputs(&self) -> &[ValueDef] {
        todo!()
    }
    /// Runs once. Outputs come back in the graph's output order.
    pub fn run(&self, _inputs: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>> {
        todo!()
    }
    /// The placement used for inputs of these shapes (planning them if needed).
    pub fn plan_summary(&self, _inputs: &[(&str, Tensor)]) -> Result<PlanSummary> {
        todo!()
    }
}
