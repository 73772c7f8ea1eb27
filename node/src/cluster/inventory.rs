//! This node's devices as the cluster sees them, and the conversions between the wire record
//! and the planner's `DeviceInventory`.

use vkml_planner::{DeviceInventory, DeviceKind};
use vkml_protocol::pb;

use crate::exec::Device;
use crate::session::DeviceSelection;

/// The devices `selection` names on this machine, with budgets capped at `limit`: the same
/// records (rates, overheads, features) the local planner uses.
pub fn local_devices(selection: DeviceSelection, limit: Option<u64>) -> Vec<pb::Device> {
    let gpus = || -> Vec<Device> {
        match crate::session::vulkan() {
            Ok(v) => v.gpus().iter().cloned().map(Device::Gpu).collect(),
            Err(e) => {
                tracing::info!("serving the CPU only: {e}");
                Vec::new()
            }
        }
    };
    let mut devices: Vec<Device> = match selection {
        DeviceSelection::Cpu => Vec::new(),
        DeviceSelection::Auto | DeviceSelection::Vulkan => gpus(),
        DeviceSelection::VulkanIndex(i) => gpus().into_iter().skip(i).take(1).collect(),
    };
    if matches!(selection, DeviceSelection::Auto | DeviceSelection::Cpu) {
        devices.push(Device::Cpu);
    }
    let vendors: Vec<String> = devices
        .iter()
        .map(|d| match d {
            Device::Gpu(g) => g.info().vendor.clone(),
            _ => "cpu".to_string(),
        })
        .collect();
    let snapshot = crate::exec::inventory(&devices, limit);
    snapshot
        .nodes
        .into_values()
        .flatten()
        .zip(vendors)
        .map(|(d, vendor)| to_wire(&d, vendor))
        .collect()
}

pub fn to_wire(d: &DeviceInventory, vendor: String) -> pb::Device {
    pb::Device {
        name: d.name.clone(),
        kind: match d.kind {
            DeviceKind::Cpu => pb::DeviceKind::Cpu,
            DeviceKind::Gpu => pb::DeviceKind::Gpu,
        } as i32,
        vendor,
        memory_budget: d.memory_budget,
        flops_per_us: d.flops_per_us,
        op_overhead_ns: d.op_overhead_ns,
        features: d.features,
    }
}

/// A peer's record as the planner takes it. Unknown kinds (from a newer peer) read as CPU,
/// the kind every op can run on.
pub fn to_planner(d: &pb::Device) -> DeviceInventory {
    DeviceInventory {
        name: d.name.clone(),
        kind: if d.kind() == pb::DeviceKind::Gpu {
            DeviceKind::Gpu
        } else {
            DeviceKind::Cpu
        },
        memory_budget: d.memory_budget,
        flops_per_us: d.flops_per_us,
        op_overhead_ns: d.op_overhead_ns,
        features: d.features,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_and_planner_records_agree() {
        let d = DeviceInventory {
            name: "vulkan:1".into(),
            kind: DeviceKind::Gpu,
            memory_budget: 1 << 30,
            flops_per_us: 7,
            op_overhead_ns: 9,
            features: 5,
        };
        let w = to_wire(&d, "AMD".into());
        assert_eq!(w.vendor, "AMD");
        assert_eq!(w.kind, pb::DeviceKind::Gpu as i32);
        assert_eq!(to_planner(&w), d);
    }

    #[test]
    fn cpu_selection_gives_one_cpu_capped_by_the_limit() {
        let devs = local_devices(DeviceSelection::Cpu, Some(12345));
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].name, "cpu");
        assert_eq!(devs[0].memory_budget, 12345);
    }
}
