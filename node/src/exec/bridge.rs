//! Values passed between two GPUs of this process without the CPU touching them.
//!
//! The plain path reads a cut edge's value back to the host after its chunk (a GPU copy into
//! readback memory, then a copy by the CPU into a tensor), and writes it into the next GPU's
//! import buffer before that GPU's chunk (a second copy by the CPU). Where every GPU involved
//! can import host memory (VK_EXT_external_memory_host: NVIDIA, AMD, Intel and lavapipe all
//! can), each execution context instead gets one block of host memory that all its GPUs import:
//! the producing GPU copies the value into it by DMA at the end of its chunk, and the reading
//! GPU copies it out by DMA at the start of its chunk. The counters order the two as they
//! order everything else (the reading chunk is submitted once the producing one completed).
//!
//! True peer-to-peer copies are not offered by Vulkan between separate devices: device groups
//! hold one GPU each even on NVLink-connected H200s, and opaque memory handles import only on
//! the device that exported them (same deviceUUID). So the bytes still cross host memory, but
//! only the copy engines move them (BENCHMARKS.md, the two-GPU run).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use vkml_planner::{LinkCosts, Plan};

use super::Device;
use super::gpu::dev_err;
use super::topology::Topology;
use crate::device::vulkan::{BridgeProbe, Gpu, GpuBuffer, HostBlock, VulkanError};
use crate::error::Result;
use crate::graph::{Graph, ValueId};

/// Which values cross between this process's GPUs through shared host memory, and where.
#[derive(Debug, Default)]
pub struct Bridge {
    /// Offset of each bridged value in the block.
    pub offsets: BTreeMap<ValueId, u64>,
    size: u64,
    /// The largest host-import alignment of the GPUs involved.
    align: u64,
    /// The devices (indices) that import the block.
    pub gpus: Vec<usize>,
}

impl Bridge {
    /// The values of `plan` to bridge: those made on one of this node's GPUs and read only by
    /// its other GPUs (not by a CPU, another node, or the caller), where all of those GPUs can
    /// import host memory. `enabled: false` bridges nothing (the host path, for measuring).
    pub fn new(
        graph: &Graph,
        plan: &Plan,
        topo: &Topology,
        devices: &[Device],
        enabled: bool,
    ) -> Bridge {
        let mut bridge = Bridge::default();
        if !enabled {
            return bridge;
        }
        let align = |d: usize| match devices.get(d) {
            Some(Device::Gpu(g)) => g.info().host_import_alignment,
            _ => None,
        };
        let dev = |c: usize| plan.chunks[c].device.index;
        let mut readers: BTreeMap<ValueId, (usize, Vec<usize>)> = BTreeMap::new();
        let mut refused: Vec<ValueId> = Vec::new();
        for t in &plan.transfers {
            let local = topo.is_local(t.from_chunk) && topo.is_local(t.to_chunk) && !t.cross_host;
            if !local || align(dev(t.from_chunk)).is_none() || align(dev(t.to_chunk)).is_none() {
                refused.push(t.value);
                continue;
            }
            let entry = readers
                .entry(t.value)
                .or_insert_with(|| (dev(t.from_chunk), Vec::new()));
            if dev(t.to_chunk) == entry.0 {
                refused.push(t.value);
            }
            entry.1.push(dev(t.to_chunk));
        }
        let outputs: Vec<ValueId> = graph.outputs.iter().map(|(v, _)| *v).collect();
        for (v, (from, to)) in readers {
            if refused.contains(&v) || outputs.contains(&v) {
                continue;
            }
            let bytes = plan
                .transfers
                .iter()
                .find(|t| t.value == v)
                .map_or(0, |t| t.bytes);
            bridge.offsets.insert(v, bridge.size);
            bridge.size += bytes.div_ceil(super::arena::ALIGN).max(1) * super::arena::ALIGN;
            for d in std::iter::once(from).chain(to) {
                if !bridge.gpus.contains(&d) {
                    bridge.gpus.push(d);
                    bridge.align = bridge.align.max(align(d).unwrap_or(1));
                }
            }
        }
        bridge.gpus.sort_unstable();
        bridge
    }

    /// One context's block, imported into each of its GPUs: (device, buffer). Empty when
    /// nothing is bridged.
    pub fn import(&self, devices: &[Device]) -> Result<BTreeMap<usize, GpuBuffer>> {
        let mut out = BTreeMap::new();
        if self.offsets.is_empty() {
            return Ok(out);
        }
        let block: Arc<HostBlock> = HostBlock::new(self.size, self.align).map_err(dev_err)?;
        for &d in &self.gpus {
            if let Some(Device::Gpu(g)) = devices.get(d) {
                out.insert(d, g.import_host(&block, "bridge").map_err(dev_err)?);
            }
        }
        Ok(out)
    }
}

/// The planner's costs for one machine's plan over `devices`: the defaults, with the rate
/// between two GPUs measured on this machine's first pair that bridges (once per process and
/// pair), so that a split between GPUs is weighed by what the bridge moves here.
pub fn local_links(devices: &[Device]) -> LinkCosts {
    let mut links = LinkCosts::default();
    let gpus: Vec<&Arc<Gpu>> = devices
        .iter()
        .filter_map(|d| match d {
            Device::Gpu(g) if g.info().host_import_alignment.is_some() => Some(g),
            _ => None,
        })
        .collect();
    let [a, b, ..] = gpus[..] else {
        return links;
    };
    type Rates = Mutex<BTreeMap<(usize, usize), Option<u64>>>;
    static MEASURED: OnceLock<Rates> = OnceLock::new();
    let key = (a.info().index, b.info().index);
    let rate = *MEASURED
        .get_or_init(Rates::default)
        .lock()
        .expect("measured rates")
        .entry(key)
        .or_insert_with(|| match bytes_per_us(a, b) {
            Ok(r) => {
                tracing::info!(
                    "vulkan:{} to vulkan:{}: {} MB/s through host memory",
                    key.0,
                    key.1,
                    r
                );
                Some(r)
            }
            Err(e) => {
                tracing::warn!("cannot measure the bridge between two GPUs: {e}");
                None
            }
        });
    if let Some(r) = rate {
        links.local_gpu_bytes_per_us = r;
    }
    links
}

/// What the bridge moves from `a`'s device memory to `b`'s, in bytes per microsecond: the
/// best of three 16 MiB transfers after one untimed (a few milliseconds in all).
fn bytes_per_us(a: &Gpu, b: &Gpu) -> std::result::Result<u64, VulkanError> {
    const BYTES: u64 = 16 << 20;
    let probe = BridgeProbe::new(a, b, BYTES)?;
    let mut best = Duration::MAX;
    for _ in 0..4 {
        best = best.min(probe.run(Duration::from_secs(30))?);
    }
    Ok((BYTES as u128 / best.as_micros().max(1)) as u64)
}
