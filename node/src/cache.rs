//! Weights that stay put: a content-addressed store on disk.
//!
//! A participant keeps the weight bytes it received under the BLAKE3 hash of their content, one
//! file per blob named by the hash, so a second submission of the same model, or a submission
//! after the node restarted, finds them here instead of receiving them again: "do you have
//! it?" is one question per blob. The store is bounded (`--cache-size`): the least recently
//! used blobs go first, and a blob larger than the whole bound is not kept. Blobs are written
//! to a temporary file and renamed, so a crash never leaves a half-written blob under its
//! name, and every read checks the content against its name, so a damaged file is a miss, not
//! wrong weights.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;

/// The content hash that names a blob.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobId([u8; 32]);

impl BlobId {
    pub fn of(data: &[u8]) -> BlobId {
        hash(data)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn from_bytes(b: [u8; 32]) -> BlobId {
        BlobId(b)
    }

    /// The 64 hex digits its file is named by.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn parse(name: &str) -> Option<BlobId> {
        if name.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(BlobId(out))
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobId({})", &self.hex()[..16])
    }
}

/// Each message carries its I/O error itself (`cause`, not a `source`), so that an error
/// chain printed whole does not say it twice.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(
        "cannot use {} as the weight cache: {cause}; give --cache-dir a writable folder, \
         or --cache-size 0 to keep no cache",
        dir.display()
    )]
    Unusable { dir: PathBuf, cause: std::io::Error },
    #[error("cannot write {} into the weight cache: {cause} (is the disk full?)", path.display())]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(
        "a weight of {length} bytes does not fit the weight cache at {}, which holds at most \
         {limit} bytes: raise --cache-size, or give --cache-size 0 to keep no cache",
        dir.display()
    )]
    TooLarge {
        dir: PathBuf,
        length: u64,
        limit: u64,
    },
    #[error(
        "the weight received is not the one announced: {written} of {length} bytes arrived, \
         hashing to {got:?} instead of {expected:?} (did the file change while it was sent?)"
    )]
    Mismatch {
        expected: BlobId,
        got: BlobId,
        length: u64,
        written: u64,
    },
}

/// A blob on its way in: see [`WeightCache::begin`].
pub struct Incoming {
    id: BlobId,
    length: u64,
    temp: PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
    hasher: blake3::Hasher,
    written: u64,
}

impl Incoming {
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), CacheError> {
        self.written += chunk.len() as u64;
        if self.written > self.length {
            // Keep counting, write nothing more: `finish` reports the overrun.
            return Ok(());
        }
        self.hasher.update(chunk);
        let file = self.file.as_mut().expect("an open blob");
        file.write_all(chunk).map_err(|cause| CacheError::Write {
            path: self.temp.clone(),
            cause,
        })
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Finished blobs were renamed; anything else is a leftover.
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The hash of a blob's content; multi-threaded for large ones (a model's part can be
/// gigabytes), and the pages read are handed back when it is a mapping.
pub fn hash(data: &[u8]) -> BlobId {
    let mut h = blake3::Hasher::new();
    if data.len() >= 1 << 20 {
        h.update_rayon(data);
    } else {
        h.update(data);
    }
    crate::onnx::release_pages(data);
    BlobId(*h.finalize().as_bytes())
}

struct Entry {
    bytes: u64,
    /// Order of last use: older first out.
    used: u64,
}

#[derive(Default)]
struct Index {
    entries: BTreeMap<BlobId, Entry>,
    total: u64,
    clock: u64,
}

/// What the cache did since it was opened.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub hit_bytes: u64,
    pub stored: u64,
    pub stored_bytes: u64,
    pub evicted: u64,
}

pub struct WeightCache {
    dir: PathBuf,
    limit: u64,
    index: Mutex<(Index, CacheStats)>,
}

const TEMP_PREFIX: &str = ".partial-";

/// Blobs up to this size are read into memory; larger ones are mapped. Unlike a model file,
/// a blob is never changed in place (eviction unlinks it, which leaves a mapping intact), so
/// mapping is safe at any size; the small ones are copied only to spare the process a
/// mapping per bias vector.
const COPY_BELOW: u64 = 1 << 20;

impl WeightCache {
    /// Opens (creating it if needed) the cache in `dir`, bounded to `limit` bytes. Blobs found
    /// there are kept, oldest by modification time first out; leftovers of interrupted writes
    /// are removed. An unusable folder (not creatable, not writable) is an error naming it.
    pub fn open(dir: &Path, limit: u64) -> Result<WeightCache, CacheError> {
        let unusable = |cause| CacheError::Unusable {
            dir: dir.to_path_buf(),
            cause,
        };
        std::fs::create_dir_all(dir).map_err(unusable)?;
        // Writable? Find out now rather than at the first blob.
        let probe = dir.join(format!("{TEMP_PREFIX}probe-{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(unusable)?;
        let _ = std::fs::remove_file(&probe);
        let mut found: Vec<(SystemTime, BlobId, u64)> = Vec::new();
        for e in std::fs::read_dir(dir).map_err(unusable)? {
            let Ok(e) = e else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(TEMP_PREFIX) {
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            let (Some(id), Ok(meta)) = (BlobId::parse(&name), e.metadata()) else {
                continue;
            };
            if meta.is_file() {
                let when = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((when, id, meta.len()));
            }
        }
        found.sort();
        let mut index = Index::default();
        for (_, id, bytes) in found {
            index.clock += 1;
            index.total += bytes;
            let used = index.clock;
            index.entries.insert(id, Entry { bytes, used });
        }
        let cache = WeightCache {
            dir: dir.to_path_buf(),
            limit,
            index: Mutex::new((index, CacheStats::default())),
        };
        // A smaller bound than last time.
        cache.evict_for(0);
        Ok(cache)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes held now.
    pub fn size(&self) -> u64 {
        self.index.lock().expect("cache lock").0.total
    }

    pub fn stats(&self) -> CacheStats {
        self.index.lock().expect("cache lock").1
    }

    /// Whether blob `id` is here (without reading it).
    pub fn contains(&self, id: &BlobId) -> bool {
        self.index
            .lock()
            .expect("cache lock")
            .0
            .entries
            .contains_key(id)
    }

    /// Blob `id`, when it is here and its content still has that hash: mapped when large, so
    /// a part of a model costs no heap. A damaged or vanished file is forgotten and counts as
    /// a miss.
    pub fn get(&self, id: &BlobId) -> Option<Bytes> {
        if !self.contains(id) {
            return None;
        }
        let path = self.path(id);
        let data = crate::onnx::read_file(&path, COPY_BELOW)
            .ok()
            .map(|(d, _)| d)
            .filter(|d| hash(d) == *id);
        let mut guard = self.index.lock().expect("cache lock");
        let (index, stats) = &mut *guard;
        let Some(data) = data else {
            if let Some(e) = index.entries.remove(id) {
                index.total -= e.bytes;
            }
            drop(guard);
            let _ = std::fs::remove_file(&path);
            return None;
        };
        index.clock += 1;
        let clock = index.clock;
        if let Some(e) = index.entries.get_mut(id) {
            e.used = clock;
        }
        stats.hits += 1;
        stats.hit_bytes += data.len() as u64;
        drop(guard);
        // The order of use survives a restart through the files' modification times.
        if let Ok(f) = std::fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(data)
    }

    /// Keeps `data` under its hash, making room by evicting the least recently used blobs.
    /// Returns the hash. A blob larger than the whole bound is not kept (and is no error).
    pub fn put(&self, data: &[u8]) -> Result<BlobId, CacheError> {
        let id = BlobId::of(data);
        if data.len() as u64 > self.limit || self.contains(&id) {
            return Ok(id);
        }
        let mut w = self.begin(id, data.len() as u64)?;
        w.write(data)?;
        self.finish(w).map(|_| id)
    }

    /// Starts receiving blob `id` of `length` bytes: room is made for it now, and its bytes
    /// go to a temporary file as they arrive ([`Incoming::write`]), so a blob of any size
    /// costs no memory. A blob larger than the whole bound is an error saying so.
    pub fn begin(&self, id: BlobId, length: u64) -> Result<Incoming, CacheError> {
        if length > self.limit {
            return Err(CacheError::TooLarge {
                dir: self.dir.clone(),
                length,
                limit: self.limit,
            });
        }
        self.evict_for(length);
        let temp = self
            .dir
            .join(format!("{TEMP_PREFIX}{}-{}", std::process::id(), id.hex()));
        let file = std::fs::File::create(&temp).map_err(|cause| CacheError::Write {
            path: temp.clone(),
            cause,
        })?;
        Ok(Incoming {
            id,
            length,
            temp,
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            hasher: blake3::Hasher::new(),
            written: 0,
        })
    }

    /// Ends a blob begun with [`WeightCache::begin`]: its length and hash are checked, and it
    /// is kept under its name and returned (mapped when large). On any error the temporary
    /// file is gone and nothing is kept.
    pub fn finish(&self, mut w: Incoming) -> Result<Bytes, CacheError> {
        let path = self.path(&w.id);
        let got = BlobId(*w.hasher.finalize().as_bytes());
        if w.written != w.length || got != w.id {
            return Err(CacheError::Mismatch {
                expected: w.id,
                got,
                length: w.length,
                written: w.written,
            });
        }
        let file = w.file.take().expect("an open blob");
        let done = file
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_data())
            .and_then(|()| std::fs::rename(&w.temp, &path));
        if let Err(cause) = done {
            let _ = std::fs::remove_file(&w.temp);
            return Err(CacheError::Write { path, cause });
        }
        let data = crate::onnx::read_file(&path, COPY_BELOW)
            .map(|(d, _)| d)
            .map_err(|cause| CacheError::Write {
                path: path.clone(),
                cause,
            })?;
        let mut guard = self.index.lock().expect("cache lock");
        let (index, stats) = &mut *guard;
        index.clock += 1;
        let used = index.clock;
        if index
            .entries
            .insert(
                w.id,
                Entry {
                    bytes: w.length,
                    used,
                },
            )
            .is_none()
        {
            index.total += w.length;
        }
        stats.stored += 1;
        stats.stored_bytes += w.length;
        Ok(data)
    }

    /// Evicts least recently used blobs until `incoming` more bytes fit the bound.
    fn evict_for(&self, incoming: u64) {
        let mut doomed = Vec::new();
        {
            let mut guard = self.index.lock().expect("cache lock");
            let (index, stats) = &mut *guard;
            while index.total + incoming > self.limit {
                let Some((&id, _)) = index.entries.iter().min_by_key(|(id, e)| (e.used, **id))
                else {
                    break;
                };
                let e = index.entries.remove(&id).expect("listed");
                index.total -= e.bytes;
                stats.evicted += 1;
                doomed.push(id);
            }
        }
        for id in doomed {
            let _ = std::fs::remove_file(self.path(&id));
        }
    }

    fn path(&self, id: &BlobId) -> PathBuf {
        self.dir.join(id.hex())
    }
}

/// The default cache folder: `$XDG_CACHE_HOME/vkml/weights`, else `~/.cache/vkml/weights`
/// (the binary resolves it; the library takes the folder as a value).
pub fn default_dir(xdg_cache_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    vkml_cache_home(xdg_cache_home, home).map(|c| c.join("weights"))
}

/// VKML's folder of caches: `$XDG_CACHE_HOME/vkml` (an absolute one), else `~/.cache/vkml`.
pub fn vkml_cache_home(xdg_cache_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    xdg_cache_home
        .filter(|p| p.is_absolute())
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".cache")))
        .map(|c| c.join("vkml"))
}

#[cfg(test)]
mod tests;
