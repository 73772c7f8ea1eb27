//! Where a node keeps the weights it is sent: the weight cache on disk (content-addressed, so
//! a second submission or a restart moves nothing), and a models folder of files the node may
//! map instead of receiving them. Without a cache, weights live as long as their model.
//!
//! Every weight travels named by the BLAKE3 hash of its bytes (a `pb::WeightRange`): a node
//! answers "do you have it?" from the name alone, and checks what arrives against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use vkml_protocol::pb;

use super::DistError;
use crate::cache::{self, BlobId, CacheError, WeightCache};

/// Bytes read from a stream at a time while a weight arrives.
const CHUNK: usize = 1 << 20;

pub struct WeightStore {
    cache: Option<WeightCache>,
    models: Option<PathBuf>,
    /// Weights found in the models folder, kept while the node lives (slices of mappings,
    /// which cost no heap).
    held: Mutex<BTreeMap<BlobId, Bytes>>,
    /// The models folder's files mapped so far: one mapping per file, however many weights.
    files: Mutex<BTreeMap<PathBuf, Bytes>>,
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
            files: Mutex::new(BTreeMap::new()),
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
        // The lock is released before the models folder is looked at (which takes it).
        let held = self.held.lock().expect("weights lock").get(&id).cloned();
        let found = held
            .or_else(|| self.cache.as_ref().and_then(|c| c.get(&id)))
            .or_else(|| self.in_models_folder(r, id));
        found.filter(|b| b.len() as u64 == r.length)
    }

    /// Each of `ranges` this node has already, on a heavy thread (a lookup may hash a file).
    /// With `mine`, the bytes found count as this node's own taken from its cache (they are
    /// not when this node passes them on to another).
    pub async fn find_all(
        self: &Arc<Self>,
        ranges: &[pb::WeightRange],
        mine: bool,
    ) -> Result<Vec<Option<Bytes>>, DistError> {
        let (me, wanted) = (self.clone(), ranges.to_vec());
        let found =
            crate::priority::heavy(move || wanted.iter().map(|r| me.lookup(r)).collect::<Vec<_>>())
                .await
                .map_err(super::panicked)?;
        if mine {
            let bytes: u64 = found.iter().flatten().map(|b| b.len() as u64).sum();
            self.cached.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(found)
    }

    /// Fills the gaps of `found` (one entry per range, from [`WeightStore::find_all`]) with
    /// the bytes `recv` carries, in order, each checked and kept as [`WeightStore::receive`]
    /// does. `from` names the sender in errors.
    pub async fn receive_missing(
        self: &Arc<Self>,
        ranges: &[pb::WeightRange],
        found: Vec<Option<Bytes>>,
        recv: &mut quinn::RecvStream,
        from: &str,
        mut progress: impl FnMut(u64),
    ) -> Result<Vec<Bytes>, DistError> {
        let mut out = Vec::with_capacity(found.len());
        for (r, f) in ranges.iter().zip(found) {
            let b = match f {
                Some(b) => b,
                None => self
                    .receive(r, recv, &mut progress)
                    .await
                    .map_err(|e| match e {
                        DistError::Peer(p) => DistError::Peer(format!("{p} (from {from})")),
                        other => other,
                    })?,
            };
            out.push(b);
        }
        Ok(out)
    }

    fn in_models_folder(&self, r: &pb::WeightRange, id: BlobId) -> Option<Bytes> {
        let dir = self.models.as_ref()?;
        crate::onnx::check_location(&r.location).ok()?;
        let path = dir.join(&r.location);
        let mapped = self.files.lock().expect("weights lock").get(&path).cloned();
        let data = match mapped {
            Some(d) => d,
            None => {
                let (d, _) = crate::onnx::read_file(&path, crate::onnx::COPY_BELOW).ok()?;
                let mut files = self.files.lock().expect("weights lock");
                files.insert(path.clone(), d.clone());
                d
            }
        };
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
    /// keeps them in the cache (without one, the caller's copy is the only one: it goes
    /// when the model does). `progress` is told of every chunk. The
    /// writing, hashing and syncing happen on a heavy thread, never on the runtime's: a
    /// node taking in gigabytes still answers its peers' probes at once.
    pub async fn receive(
        self: &Arc<Self>,
        r: &pb::WeightRange,
        recv: &mut quinn::RecvStream,
        mut progress: impl FnMut(u64),
    ) -> Result<Bytes, DistError> {
        let id = blob_id(r)?;
        let what = format!("the weight at {} offset {}", r.location, r.offset);
        let mut sink = match &self.cache {
            Some(c) => Sink::Cache(Box::new(
                c.begin(id, r.length).map_err(|e| named(&what, e))?,
            )),
            None => Sink::Memory(Vec::new()),
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        let (me, length) = (self.clone(), r.length);
        let writer = crate::priority::blocking(move || -> Result<Bytes, CacheError> {
            while let Some(chunk) = rx.blocking_recv() {
                sink.write(&chunk)?;
            }
            me.finish(sink, id, length)
        });
        let mut left = r.length;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            let mut buf = vec![0u8; n];
            recv.read_exact(&mut buf)
                .await
                .map_err(|e| DistError::Peer(format!("receiving weights: {e}")))?;
            if tx.send(buf).await.is_err() {
                // The writer failed: its error says why.
                break;
            }
            left -= n as u64;
            progress(n as u64);
        }
        drop(tx);
        let data = writer
            .await
            .map_err(super::join_err)?
            .map_err(|e| named(&what, e))?;
        self.received.fetch_add(r.length, Ordering::Relaxed);
        Ok(data)
    }

    /// Ends a weight received: kept in the cache, or handed over when there is none.
    fn finish(&self, sink: Sink, id: BlobId, length: u64) -> Result<Bytes, CacheError> {
        match (sink, &self.cache) {
            (Sink::Cache(w), Some(c)) => c.finish(*w),
            (Sink::Memory(all), _) => {
                let got = cache::hash(&all);
                if got != id || all.len() as u64 != length {
                    return Err(CacheError::Mismatch {
                        expected: id,
                        got,
                        length,
                        written: all.len() as u64,
                    });
                }
                Ok(crate::tensor::aligned_bytes(&all))
            }
            (Sink::Cache(_), None) => unreachable!("a cache sink without a cache"),
        }
    }

    /// The folder of the cache, for messages.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache.as_ref().map(WeightCache::dir)
    }
}

/// Where a weight's bytes go as they arrive.
enum Sink {
    Cache(Box<cache::Incoming>),
    Memory(Vec<u8>),
}

impl Sink {
    fn write(&mut self, chunk: &[u8]) -> Result<(), CacheError> {
        match self {
            Sink::Cache(w) => w.write(chunk),
            Sink::Memory(all) => {
                all.extend_from_slice(chunk);
                Ok(())
            }
        }
    }
}

fn named(what: &str, e: CacheError) -> DistError {
    DistError::Weights(format!("{what}: {e}"))
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
