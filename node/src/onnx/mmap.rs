//! Read-only memory mappings of model and external-data files, as shared `Bytes`.

use std::fs::File;
use std::io;
use std::path::Path;

use bytes::Bytes;
use memmap2::Mmap;

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
    let map = unsafe { Mmap::map(&file)? };
    Ok(Bytes::from_owner(map))
}
