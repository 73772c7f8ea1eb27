//! Receive buffers of whole tensors, handed back when the taker drops a tensor. The same edges
//! arrive on every run of a model, and a fresh buffer is paid for in page faults: 65,536 of
//! them for 256 MiB, about 100 ms of a 350 ms transfer on the 2-core VM (perf: the first touch
//! of each page, not the copy, dominated the receiver). A reused buffer has its pages already.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::super::lock;
use super::STRIPE_THRESHOLD;

/// Smaller buffers come from the allocator's arenas, already touched: not worth keeping.
const MIN_BYTES: usize = STRIPE_THRESHOLD;
/// What idle buffers may hold at most, together and in number.
const MAX_BYTES: usize = 1 << 30;
const MAX_BUFFERS: usize = 8;
/// An idle buffer not reused for this long goes back to the system.
pub(super) const IDLE: Duration = Duration::from_secs(30);

#[derive(Default)]
pub(super) struct BufferPool {
    free: Mutex<Vec<(BytesMut, Instant)>>,
}

impl BufferPool {
    /// An empty buffer with room for `len` bytes, and at most twice that (a small tensor does
    /// not pin a large buffer).
    pub(super) fn take(&self, len: usize) -> Option<BytesMut> {
        if len < MIN_BYTES {
            return None;
        }
        let mut free = lock(&self.free);
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, (b, _))| b.capacity() >= len && b.capacity() / 2 <= len)
            .min_by_key(|(_, (b, _))| b.capacity())
            .map(|(i, _)| i)?;
        Some(free.swap_remove(best).0)
    }

    /// Keeps `buf` for reuse, within the bounds (the oldest idle buffers go first).
    pub(super) fn give(&self, mut buf: BytesMut) {
        if buf.capacity() < MIN_BYTES || buf.capacity() > MAX_BYTES {
            return;
        }
        buf.clear();
        let mut free = lock(&self.free);
        free.push((buf, Instant::now()));
        free.sort_by_key(|(_, at)| std::cmp::Reverse(*at));
        let mut held = 0;
        let mut keep = 0;
        for (b, _) in free.iter() {
            if keep == MAX_BUFFERS || held + b.capacity() > MAX_BYTES {
                break;
            }
            held += b.capacity();
            keep += 1;
        }
        free.truncate(keep);
    }

    /// Drops buffers idle for `idle`.
    pub(super) fn sweep(&self, idle: Duration) {
        lock(&self.free).retain(|(_, at)| at.elapsed() < idle);
    }

    #[cfg(test)]
    pub(super) fn held(&self) -> (usize, usize) {
        let free = lock(&self.free);
        (free.len(), free.iter().map(|(b, _)| b.capacity()).sum())
    }
}

/// The bytes of a whole tensor whose buffer goes back to the pool when the last `Bytes` of it
/// is dropped.
struct Pooled {
    buf: BytesMut,
    pool: Weak<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

/// `buf` as `Bytes`, its storage returned to `pool` afterwards when large enough to matter.
pub(super) fn freeze(buf: BytesMut, pool: &Arc<BufferPool>) -> Bytes {
    if buf.capacity() < MIN_BYTES {
        return buf.freeze();
    }
    Bytes::from_owner(Pooled {
        buf,
        pool: Arc::downgrade(pool),
    })
}
