//! A transfer between two GPUs through host memory both import, recorded once and timed on
//! demand: what the executor's bridge (the node crate's exec/bridge.rs) does per cut edge, for
//! the planner's measured rate and for `benches/transfer.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer::{HostBlock, MemoryUse};
use super::error::VulkanError;
use super::gpu::Gpu;
use super::record::{CommandList, Step};

/// `bytes` of `src`'s device memory copied into a host block, then from there into `dst`'s
/// device memory (both may be one GPU). The lists keep their buffers and the block alive.
pub struct BridgeProbe {
    src: Arc<Gpu>,
    dst: Arc<Gpu>,
    out: CommandList,
    inn: CommandList,
}

impl BridgeProbe {
    /// Needs [`super::GpuInfo::host_import_alignment`] on both GPUs.
    pub fn new(src: &Gpu, dst: &Gpu, bytes: u64) -> Result<BridgeProbe, VulkanError> {
        let align = [src, dst]
            .iter()
            .filter_map(|g| g.info().host_import_alignment)
            .max()
            .unwrap_or(4096);
        let block = HostBlock::new(bytes, align)?;
        let a = src.create_buffer(bytes, MemoryUse::Device, "bridge probe")?;
        let b = dst.create_buffer(bytes, MemoryUse::Device, "bridge probe")?;
        let on_src = src.import_host(&block, "bridge probe")?;
        let on_dst = dst.import_host(&block, "bridge probe")?;
        let copy = |src, dst| Step::Copy {
            src,
            src_offset: 0,
            dst,
            dst_offset: 0,
            bytes,
        };
        Ok(BridgeProbe {
            out: src.record(&[copy(&a, &on_src)])?,
            inn: dst.record(&[copy(&on_dst, &b)])?,
            src: src.arc(),
            dst: dst.arc(),
        })
    }

    /// One transfer, from the first submission to the second's completion.
    pub fn run(&self, timeout: Duration) -> Result<Duration, VulkanError> {
        let t = Instant::now();
        for (g, list) in [(&self.src, &self.out), (&self.dst, &self.inn)] {
            let v = g.submit(list)?;
            if !g.wait(v, timeout)? {
                return Err(VulkanError::Invalid(format!(
                    "a bridge copy did not finish in {timeout:?}"
                )));
            }
        }
        Ok(t.elapsed())
    }
}
