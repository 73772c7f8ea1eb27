//! The integer cost model: how long an op takes on a device and a value takes to move.

use crate::types::{DeviceInventory, DeviceKind, OpCost};

/// What moving bytes between devices costs. Integers only, so every machine computes the
/// same plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkCosts {
    /// Between two devices of one machine (through host memory), fixed cost per edge: a chunk
    /// boundary means one more submit and wait.
    pub local_latency_ns: u64,
    pub local_bytes_per_us: u64,
    /// Between two GPUs of one machine: their copy engines move the bytes through host memory
    /// both import, with no copy by the CPU (the node's exec/bridge.rs).
    pub local_gpu_bytes_per_us: u64,
    /// Between machines (a QUIC stream).
    pub remote_latency_ns: u64,
    pub remote_bytes_per_us: u64,
    /// Caller's input into a GPU (an upload).
    pub upload_latency_ns: u64,
    /// Per GPU chunk and run: one submission and its completion observed (about 20 us on an
    /// H100, measured by benches/gpu.sh as the one-op run).
    pub gpu_run_ns: u64,
    /// What a cross-host transfer costs each end's host besides the wait: framing, encryption
    /// and a copy, paid on the cores that also compute (the loopback benches measure 20-40 us
    /// of CPU a cut edge a side). A pipeline's stages pay it per run, so it counts in their
    /// busy time where the wait does not.
    pub remote_cpu_ns: u64,
    pub remote_cpu_bytes_per_us: u64,
}

impl Default for LinkCosts {
    fn default() -> Self {
        LinkCosts {
            local_latency_ns: 30_000,
            local_bytes_per_us: 8_000,
            // Measured on an H200: 24-26 GB/s from 64 MiB up (node/vulkan/benches/transfer.rs,
            // BENCHMARKS.md), where the host's copies managed 1.2.
            local_gpu_bytes_per_us: 24_000,
            remote_latency_ns: 200_000,
            remote_bytes_per_us: 1_000,
            upload_latency_ns: 10_000,
            gpu_run_ns: 20_000,
            remote_cpu_ns: 30_000,
            remote_cpu_bytes_per_us: 2_000,
        }
    }
}

/// The per-op overhead at and above which a device is a fallback: it takes an op only when
/// no other device can run it (the CPU beside a GPU that lacks some kernels).
pub const FALLBACK_OVERHEAD_NS: u64 = 1 << 40;

/// Nanoseconds to run `op` on `dev`.
pub fn compute_ns(op: &OpCost, dev: &DeviceInventory) -> u64 {
    if op.view {
        // A view computes nothing wherever it is, but a fallback device still takes it only
        // when nothing else can: free there, a view between the caller and a GPU (a model's
        // input reshaped) would leave the GPU for the fallback to save an upload.
        return if dev.op_overhead_ns >= FALLBACK_OVERHEAD_NS {
            dev.op_overhead_ns
        } else {
            0
        };
    }
    let rate = dev.flops_per_us.max(1);
    dev.op_overhead_ns
        .saturating_add(op.flops.saturating_mul(1000) / rate)
}

/// Nanoseconds to move `bytes` over a link of this latency and rate.
pub fn move_ns(bytes: u64, latency_ns: u64, bytes_per_us: u64) -> u64 {
    latency_ns.saturating_add(bytes.saturating_mul(1000) / bytes_per_us.max(1))
}

pub fn is_gpu(dev: &DeviceInventory) -> bool {
    dev.kind == DeviceKind::Gpu
}

/// Nanoseconds to move `bytes` between two devices of one machine: through the GPUs' copy
/// engines when both are GPUs, else through the host.
pub fn local_move_ns(links: &LinkCosts, bytes: u64, both_gpus: bool) -> u64 {
    let rate = if both_gpus {
        links.local_gpu_bytes_per_us
    } else {
        links.local_bytes_per_us
    };
    move_ns(bytes, links.local_latency_ns, rate)
}
