//! This node's devices as the cluster sees them, and the conversions between the wire record
//! and the planner's `DeviceInventory`.

use vkml_planner::{DeviceInventory, DeviceKind};
use vkml_protocol::pb;

use crate::device::vulkan::VulkanOptions;
use crate::exec::Device;
use crate::session::DeviceSelection;

/// The devices `selection` names on this machine (Vulkan opened with `vulkan`), as the runtime
/// uses them, and as the cluster sees them (budgets capped at `limit`), in the same order:
/// with the figures `measure` gives for them (`exec::probe::figures`), or estimated ones where
/// it gives none.
pub fn local_devices(
    selection: DeviceSelection,
    limit: Option<u64>,
    vulkan: &VulkanOptions,
    measure: impl FnOnce(&[Device]) -> Vec<Option<crate::exec::probe::Figures>>,
) -> Result<(Vec<Device>, Vec<pb::Device>), crate::Error> {
    let devices = crate::session::select_devices(selection, vulkan)?;
    let vendors: Vec<String> = devices
        .iter()
        .map(|d| match d {
            Device::Gpu(g) => g.info().vendor.clone(),
            _ => "cpu".to_string(),
        })
        .collect();
    let figures = measure(&devices);
    let snapshot = crate::exec::inventory_measured(&devices, limit, &figures);
    let wire = snapshot
        .nodes
        .into_values()
        .flatten()
        .zip(vendors)
        .map(|(d, vendor)| to_wire(&d, vendor))
        .collect();
    Ok((devices, wire))
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
        reserved: 0,
        bytes_per_us: d.bytes_per_us,
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
        bytes_per_us: d.bytes_per_us,
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
            bytes_per_us: 11,
            features: 5,
        };
        let w = to_wire(&d, "AMD".into());
        assert_eq!(w.vendor, "AMD");
        assert_eq!(w.kind, pb::DeviceKind::Gpu as i32);
        assert_eq!(to_planner(&w), d);
    }

    #[test]
    fn cpu_selection_gives_one_cpu_capped_by_the_limit() {
        let (_, devs) = local_devices(
            DeviceSelection::Cpu,
            Some(12345),
            &VulkanOptions::default(),
            |_| Vec::new(),
        )
        .unwrap();
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].name, "cpu");
        assert_eq!(devs[0].memory_budget, 12345);
    }
}
