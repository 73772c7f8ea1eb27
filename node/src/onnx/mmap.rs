//! Read-only memory mappings of model and external-data files, as shared `Bytes`, and giving
//! their pages back once the weights live on a GPU.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use bytes::Bytes;
use memmap2::{Mmap, UncheckedAdvice};

use super::LoadError;

struct Shared(Arc<Mmap>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Every live mapping, so that a slice of one can be traced back to it.
fn maps() -> &'static Mutex<Vec<Weak<Mmap>>> {
    static MAPS: Mutex<Vec<Weak<Mmap>>> = Mutex::new(Vec::new());
    &MAPS
}

/// Files up to this size are read into memory rather than mapped. Reading a mapping whose
/// file was truncated meanwhile kills the process (SIGBUS), and nothing in a safe API can
/// prevent that; a copy is immune, and for a small file costs little. Larger files are mapped
/// (their weights then never sit in the heap), and their length and modification time are
/// checked before each run ([`FileStamp::check`]), so a file changed between runs is refused
/// with an error rather than read.
pub const COPY_BELOW: u64 = 64 << 20;

/// What a mapped file looked like when it was mapped.
#[derive(Debug, Clone, PartialEq)]
pub struct FileStamp {
    pub path: PathBuf,
    pub len: u64,
    pub modified: Option<SystemTime>,
}

impl FileStamp {
    fn of(path: &Path, meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            path: path.to_path_buf(),
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }

    /// An error when the file's length or modification time changed since it was mapped:
    /// reading the mapping then may crash the process or read other bytes.
    pub fn check(&self) -> Result<(), LoadError> {
        let now = std::fs::metadata(&self.path).map(|m| FileStamp::of(&self.path, &m));
        let changed = match now {
            Ok(now) if now == *self => return Ok(()),
            Ok(now) if now.len != self.len => {
                format!("its length was {} bytes and is now {}", self.len, now.len)
            }
            Ok(_) => "it was modified".to_string(),
            Err(e) => format!("it cannot be read any more ({e})"),
        };
        Err(LoadError::Changed {
            path: self.path.clone(),
            changed,
        })
    }
}

/// Maps a whole file, whatever its size.
#[cfg(test)]
pub(crate) fn map_file(path: &Path) -> io::Result<Bytes> {
    read_file(path, 0).map(|(b, _)| b)
}

/// A whole file as shared `Bytes`, without blocking on anything but a regular file: copied
/// into memory when it has at most `copy_below` bytes, else mapped, and then returned with
/// its stamp. Every slice of a mapping (an initializer's weights) keeps it alive and costs no
/// copy.
pub(crate) fn read_file(path: &Path, copy_below: u64) -> io::Result<(Bytes, Option<FileStamp>)> {
    let mut file = crate::files::open_regular(path)?;
    let meta = file.metadata()?;
    if meta.len() == 0 {
        // Nothing to map; an empty file is still a valid (if useless) answer here.
        return Ok((Bytes::new(), None));
    }
    if meta.len() <= copy_below {
        let mut data = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut data)?;
        // At the alignment a mapping has, so that initializers sit as they would there.
        return Ok((crate::tensor::aligned_bytes(&data), None));
    }
    // SAFETY: the mapping is read-only and never handed out as `&mut`. Soundness also needs
    // the file not to change underneath it while mapped: only files larger than COPY_BELOW are
    // mapped, and their stamp is checked before every run (a change between runs is refused;
    // one during a run is the documented limit of mapping, see `onnx::load`). This is the one
    // place outside device/vulkan that needs `unsafe`: memmap2 has no safe constructor, and
    // mapping is what keeps multi-gigabyte weights out of the heap.
    let map = Arc::new(unsafe { Mmap::map(&file)? });
    let mut all = maps().lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(&map));
    Ok((
        Bytes::from_owner(Shared(map)),
        Some(FileStamp::of(path, &meta)),
    ))
}

/// Drops the resident pages under `bytes` when it is a slice of a file mapping (weights
/// already copied to a GPU): the host keeps no second copy of a model, and a later read (a
/// CPU op using the same weight) pages them back in from the file. Anything else is left
/// alone.
pub(crate) fn release_pages(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let page = page_size();
    let (start, end) = (
        bytes.as_ptr() as usize,
        bytes.as_ptr() as usize + bytes.len(),
    );
    let all = maps().lock().unwrap_or_else(|p| p.into_inner());
    for map in all.iter().filter_map(Weak::upgrade) {
        let base = map.as_ptr() as usize;
        if start < base || end > base + map.len() {
            continue;
        }
        // Whole pages inside the slice only: a page shared with other data stays.
        let first = (start - base).div_ceil(page) * page;
        let last = (end - base) / page * page;
        if first < last {
            // SAFETY: MADV_DONTNEED on a private, read-only file mapping discards the
            // resident copies of these pages; the next access reads them again from the file,
            // so every `&[u8]` into the mapping keeps reading the same bytes (the file must
            // not change while mapped, which mapping it already requires). No reference is
            // invalidated and nothing is written.
            let r = unsafe {
                map.unchecked_advise_range(UncheckedAdvice::DontNeed, first, last - first)
            };
            if let Err(e) = r {
                tracing::debug!("cannot release weight pages: {e}");
            }
        }
        return;
    }
}

fn page_size() -> usize {
    // Every page size Linux uses is a multiple of 4 KiB; advising whole 64 KiB blocks is
    // right on all of them without asking the OS.
    64 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_pages_still_read_the_same_bytes() {
        let dir = std::env::temp_dir().join(format!("vkml-mmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.bin");
        let data: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let b = map_file(&path).unwrap();
        let slice = b.slice(1000..(900 << 10));
        release_pages(&slice);
        assert_eq!(&slice[..], &data[1000..(900 << 10)]);
        // Heap bytes are not a mapping: nothing happens.
        release_pages(&vec![1u8; 1 << 20]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
