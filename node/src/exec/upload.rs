//! Device memory filled from the host when a layout or context is made: the weights (through
//! a bounded staging buffer) and the dispatches' zeroed counters.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::device::vulkan::{Gpu, GpuBuffer, MemoryUse, Step};
use crate::error::Result;
use crate::graph::{Specialized, ValueId};
use crate::ops::BufRef;

use super::arena;
use super::gpu::{GpuOps, Loc, Region, dev_err};
use super::shared::{Sharing, Uploaded};

/// Puts the weights in `list` (their `locs` say their sizes) in GPU memory: those the model's
/// other plans share, in their copies where `shared` claimed some, the others of them into one
/// new buffer (returned as fresh, with its values, for the plans after this one); the rest
/// (constants folded for this plan) into a buffer of the layout's own. Sets each one's region
/// and offset.
pub(super) fn place_weights(
    gpu: &Arc<Gpu>,
    spec: &Specialized,
    list: &[ValueId],
    locs: &mut BTreeMap<ValueId, Loc>,
    shared: Option<(&Sharing, usize)>,
) -> Result<(GpuBuffer, Vec<Arc<GpuBuffer>>, Option<Uploaded>)> {
    let mut buffers: Vec<Arc<GpuBuffer>> = Vec::new();
    let (mut own, mut fresh) = (Vec::new(), Vec::new());
    for &v in list {
        let Some((sharing, d)) = shared.filter(|(s, _)| s.values.contains(&v)) else {
            own.push(v);
            continue;
        };
        let Some((buf, offset)) = sharing.copy(d, v) else {
            fresh.push(v);
            continue;
        };
        let i = match buffers.iter().position(|b| Arc::ptr_eq(b, buf)) {
            Some(i) => i,
            None => {
                buffers.push(buf.clone());
                buffers.len() - 1
            }
        };
        let l = locs.get_mut(&v).expect("listed");
        l.region = Region::Shared(i);
        l.offset = *offset;
    }
    let weights = fill_weights(gpu, spec, &own, locs, "weights")?;
    let mut made = None;
    if !fresh.is_empty() {
        let buf = Arc::new(fill_weights(gpu, spec, &fresh, locs, "shared weights")?);
        let at: Vec<(ValueId, u64)> = fresh.iter().map(|v| (*v, locs[v].offset)).collect();
        buffers.push(buf.clone());
        for v in &fresh {
            locs.get_mut(v).expect("listed").region = Region::Shared(buffers.len() - 1);
        }
        made = Some((buf, at));
    }
    Ok((weights, buffers, made))
}

/// One device-local buffer holding `list`, filled through a staging copy; sets their offsets.
fn fill_weights(
    gpu: &Arc<Gpu>,
    spec: &Specialized,
    list: &[ValueId],
    locs: &mut BTreeMap<ValueId, Loc>,
    name: &str,
) -> Result<GpuBuffer> {
    let mut size = 0;
    for v in list {
        let l = locs.get_mut(v).expect("listed");
        l.offset = size;
        size += l.bytes.div_ceil(arena::ALIGN).max(1) * arena::ALIGN;
    }
    let buffer = gpu
        .create_buffer(size.max(4), MemoryUse::Device, name)
        .map_err(dev_err)?;
    if size > 0 {
        let parts: Vec<(u64, &[u8])> = list
            .iter()
            .map(|v| {
                let t = spec.consts[*v].as_ref().expect("a weight");
                (locs[v].offset, &t.bytes()[..])
            })
            .collect();
        // The host's copy goes as soon as the GPU has it: a mapped model's pages are
        // dropped round by round, so peak RSS is the staging buffer, not the model.
        upload_weights(gpu, &buffer, &parts, WEIGHT_STAGING, &|b| {
            crate::onnx::release_pages(b)
        })?;
    }
    Ok(buffer)
}

/// The counters (`BufRef::Counters`) of every dispatch of `on`, zeroed: kernels leave them
/// zero, so a context zeroes them once, not every run.
pub(super) fn zeroed_counters(gpu: &Arc<Gpu>, on: &GpuOps<'_>) -> Result<GpuBuffer> {
    let words: usize = on
        .kernels
        .iter()
        .flatten()
        .flat_map(|k| &k.dispatches)
        .flat_map(|d| d.buffers())
        .map(|b| match b {
            BufRef::Counters(n) => *n,
            _ => 0,
        })
        .sum();
    let bytes = 4 * words.max(1) as u64;
    let buffer = gpu
        .create_buffer(bytes, MemoryUse::Device, "counters")
        .map_err(dev_err)?;
    if words > 0 {
        let zeros = vec![0u8; bytes as usize];
        upload_weights(gpu, &buffer, &[(0, &zeros)], WEIGHT_STAGING, &|_| {})?;
    }
    Ok(buffer)
}

/// Host memory the weight upload may use at once, whatever the model's size: the weights
/// stream from the model's mapping through a staging buffer this big, so a large model does not
/// cost its size twice in host memory.
const WEIGHT_STAGING: u64 = 16 << 20;

/// Copies each `(offset, bytes)` into `weights` at `offset`, in rounds of at most `staging`
/// bytes through one reused staging buffer (a weight larger than that is split over rounds).
/// Copies `parts` (destination offset, bytes) into `weights` through a staging buffer of at
/// most `staging` bytes, calling `done` on each piece once the GPU has it.
fn upload_weights(
    gpu: &Arc<Gpu>,
    weights: &GpuBuffer,
    parts: &[(u64, &[u8])],
    staging: u64,
    done: &dyn Fn(&[u8]),
) -> Result<()> {
    let total: u64 = parts.iter().map(|(_, b)| b.len() as u64).sum();
    let size = total.clamp(4, staging.max(4));
    let staging = gpu
        .create_buffer(size, MemoryUse::Upload, "weight staging")
        .map_err(dev_err)?;
    // Pieces of weights, each (destination offset, bytes), packed into staging-sized rounds.
    let mut pieces: Vec<(u64, &[u8])> = Vec::new();
    for &(offset, bytes) in parts {
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + size as usize).min(bytes.len());
            pieces.push((offset + start as u64, &bytes[start..end]));
            start = end;
        }
    }
    // (staging offset, dst offset, bytes, source)
    let mut round: Vec<(u64, u64, u64, &[u8])> = Vec::new();
    let mut used = 0u64;
    let flush = |round: &mut Vec<(u64, u64, u64, &[u8])>| -> Result<()> {
        if round.is_empty() {
            return Ok(());
        }
        let steps: Vec<Step<'_>> = round
            .iter()
            .map(|&(src_offset, dst_offset, bytes, _)| Step::Copy {
                src: &staging,
                src_offset,
                dst: weights,
                dst_offset,
                bytes,
            })
            .collect();
        let list = gpu.record(&steps).map_err(dev_err)?;
        let value = gpu.submit(&list).map_err(dev_err)?;
        gpu.wait(value, std::time::Duration::from_secs(600))
            .map_err(dev_err)?;
        for (_, _, _, src) in round.drain(..) {
            done(src);
        }
        Ok(())
    };
    for (dst, bytes) in pieces {
        let len = bytes.len() as u64;
        // Staging offsets stay 4-aligned: vkCmdCopyBuffer has no alignment rule, but writes
        // of whole words are cheaper through write-combined memory.
        let at = used.next_multiple_of(4);
        if at + len > size {
            flush(&mut round)?;
            used = 0;
        }
        let at = used.next_multiple_of(4);
        staging.write(at, bytes).map_err(dev_err)?;
        round.push((at, dst, len, bytes));
        used = at + len;
    }
    flush(&mut round)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkml_testkit::test_gpu;

    /// Weights of odd sizes through a staging buffer smaller than some of them: every byte
    /// lands at its offset, and the gaps between weights stay untouched.
    #[test]
    fn weights_stream_through_a_small_staging_buffer() {
        let Some(gpu) = test_gpu() else { return };
        let gpu = gpu.arc();
        let a: Vec<u8> = (0..37u8).collect();
        let b: Vec<u8> = (0..200).map(|i| (i * 7 % 251) as u8).collect();
        let c: Vec<u8> = vec![0xab; 5];
        let parts: Vec<(u64, &[u8])> = vec![(0, &a), (64, &b), (512, &c)];
        let weights = gpu.create_buffer(640, MemoryUse::Device, "w").unwrap();
        let back = gpu.create_buffer(640, MemoryUse::Readback, "back").unwrap();
        let zero = vec![0u8; 640];
        upload_weights(&gpu, &weights, &[(0, &zero)], 1 << 20, &|_| {}).unwrap();
        for staging in [16, 40, 64, 1 << 20] {
            let seen = std::sync::Mutex::new(0usize);
            upload_weights(&gpu, &weights, &parts, staging, &|b| {
                *seen.lock().unwrap() += b.len()
            })
            .unwrap();
            assert_eq!(
                *seen.lock().unwrap(),
                37 + 200 + 5,
                "every byte reported once"
            );
            let list = gpu
                .record(&[Step::Copy {
                    src: &weights,
                    src_offset: 0,
                    dst: &back,
                    dst_offset: 0,
                    bytes: 640,
                }])
                .unwrap();
            let v = gpu.submit(&list).unwrap();
            assert!(gpu.wait(v, std::time::Duration::from_secs(60)).unwrap());
            let mut got = vec![0u8; 640];
            back.read(0, &mut got).unwrap();
            let mut want = vec![0u8; 640];
            want[..37].copy_from_slice(&a);
            want[64..264].copy_from_slice(&b);
            want[512..517].copy_from_slice(&c);
            assert_eq!(got, want, "staging {staging}");
        }
    }
}
