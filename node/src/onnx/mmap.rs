//! Read-only memory mappings of model and external-data files, as shared `Bytes`, and giving
//! their pages back once the weights live on a GPU.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use memmap2::{Mmap, UncheckedAdvice};

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

/// Maps a whole file. The returned `Bytes` owns the mapping, so every slice of it (an
/// initializer's weights) keeps the mapping alive and costs no copy.
pub(crate) fn map_file(path: &Path) -> io::Result<Bytes> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() == 0 {
        // Nothing to map; an empty file is still a valid (if useless) answer here.
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only and never handed out as `&mut`. Soundness also needs
    // the file not to change underneath it while mapped; like every mmap-based loader we
    // require model files to stay untouched while loaded (documented on `onnx::load`). This
    // is the one place outside device/vulkan that needs `unsafe`: memmap2 has no safe
    // constructor, and mapping is what keeps multi-gigabyte weights out of the heap.
    let map = Arc::new(unsafe { Mmap::map(&file)? });
    let mut all = maps().lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(&map));
    Ok(Bytes::from_owner(Shared(map)))
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
