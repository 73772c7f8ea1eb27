//! Where a node keeps the weights it is sent: the weight cache on disk (content-addressed, so
//! a second submission or a restart moves nothing), a models folder of files the node may map
//! instead of receiving them, or, without a cache, memory.
//!
//! Every weight travels named by the BLAKE3 hash of its bytes (a `pb::WeightRange`): a node
//! answers "do you have it?" from the name alone, and checks what arrives against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use vkml_protocol::pb;

use super::DistError;
use crate::cache::{self, BlobId, CacheError, WeightCache};

/// Bytes read from a stream at a time while a weight arrives.
const CHUNK: usize = 1 << 20;

pub struct WeightStore {
    cache: Option<WeightCache>,
    models: Option<PathBuf>,
    /// Weights found in the models folder, and, without a cache, those received: kept while
    /// the node lives (a models folder's are mappings, which cost no heap).
    held: Mutex<BTreeMap<BlobId, Bytes>>,
    received: AtomicU64,
    cached: AtomicU64,
}

impl WeightStore {
    /// `cache`: where received weights are kept (none: in memory, for this life only);
    /// `models`: a folder whose files, when a model names them by their location and their
    /// bytes hash to what it says, are mapped instead of received.
    pub fn new(cache: Option<WeightCache>, models: Option<PathBuf>) -> WeightStore {
        WeightStore {
            cache,
            models,
            held: Mutex::new(BTreeMap::new()),
            received: AtomicU64::new(0),
            cached: AtomicU64::new(0),
        }
    }

    /// Weight bytes received, and weight bytes found here instead, since the node started.
    pub fn counters(&self) -> (u64, u64) {
        (
            self.received.load(Ordering::Relaxed),
            self.cached.load(Ordering::Relaxed),
        )
    }

    /// The weight, when this node has it already (cache, models folder, memory). Blocking:
    /// it may hash a file.
    pub fn lookup(&self, r: &pb::WeightRange) -> Option<Bytes> {
        let id = blob_id(r).ok()?;
        let found = self
            .held
            .lock()
            .expect("weights lock")
            .get(&id)
            .cloned()
            .or_else(|| self.cache.as_ref().and_then(|c| c.get(&id)))
            .or_else(|| self.in_models_folder(r, id));
        let found = found.filter(|b| b.len() as u64 == r.length)?;
        self.cached.fetch_add(r.length, Ordering::Relaxed);
        Some(found)
    }

    fn in_models_folder(&self, r: &pb::WeightRange, id: BlobId) -> Option<Bytes> {
        let dir = self.models.as_ref()?;
        crate::onnx::check_location(&r.location).ok()?;
        let path = dir.join(&r.location);
        let (data, _) = crate::onnx::read_file(&path, crate::onnx::COPY_BELOW).ok()?;
        let end = r.offset.checked_add(r.length)?;
        if end > data.len() as u64 {
            return None;
        }
        let slice = data.slice(r.offset as usize..end as usize);
        if cache::hash(&slice) != id {
            tracing::debug!(
                "{} holds other bytes at {}..{end} than the model's {}",
                path.display(),
                r.offset,
                r.location
            );
            return None;
        }
        self.held
            .lock()
            .expect("weights lock")
            .insert(id, slice.clone());
        Some(slice)
    }

    /// Receives the weight's `length` bytes from `recv`, checks them against its hash, and
    /// keeps them (in the cache, else in memory). `progress` is told of every chunk.
    pub async fn receive(
        &self,
        r: &pb::WeightRange,
        recv: &mut quinn::RecvStream,
        mut progress: impl FnMut(u64),
    ) -> Result<Bytes, DistError> {
        let id = blob_id(r)?;
        let named = |e: CacheError| {
            DistError::Weights(format!(
                "the weight at {} offset {}: {e}",
                r.location, r.offset
            ))
        };
        let mut buf = vec![0u8; CHUNK];
        let mut left = r.length;
        let data = match &self.cache {
            Some(c) => {
                let mut w = c.begin(id, r.length).map_err(named)?;
                while left > 0 {
                    let n = read_some(left, recv, &mut buf).await?;
                    w.write(&buf[..n]).map_err(named)?;
                    left -= n as u64;
                    progress(n as u64);
                }
                c.finish(w).map_err(named)?
            }
            None => {
                let mut all = Vec::new();
                while left > 0 {
                    let n = read_some(left, recv, &mut buf).await?;
                    all.extend_from_slice(&buf[..n]);
                    left -= n as u64;
                    progress(n as u64);
                }
                let got = cache::hash(&all);
                if got != id {
                    return Err(named(CacheError::Mismatch {
                        expected: id,
                        got,
                        length: r.length,
                        written: all.len() as u64,
                    }));
                }
                let b = crate::tensor::aligned_bytes(&all);
                self.held
                    .lock()
                    .expect("weights lock")
                    .insert(id, b.clone());
                b
            }
        };
        self.received.fetch_add(r.length, Ordering::Relaxed);
        Ok(data)
    }

    /// The folder of the cache, for messages.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache.as_ref().map(WeightCache::dir)
    }
}

/// Reads the next chunk of at most `left` bytes (all of them: a weight's bytes are exact).
async fn read_some(
    left: u64,
    recv: &mut quinn::RecvStream,
    buf: &mut [u8],
) -> Result<usize, DistError> {
    let n = left.min(buf.len() as u64) as usize;
    recv.read_exact(&mut buf[..n])
        .await
        .map_err(|e| DistError::Peer(format!("receiving weights: {e}")))?;
    Ok(n)
}

pub fn blob_id(r: &pb::WeightRange) -> Result<BlobId, DistError> {
    let b: [u8; 32] = r.hash[..].try_into().map_err(|_| {
        DistError::Protocol(format!(
            "the weight at {} offset {} is named by {} bytes, not a 32-byte hash",
            r.location,
            r.offset,
            r.hash.len()
        ))
    })?;
    Ok(BlobId::from_bytes(b))
}
