//! A model's external data as a `submit` client offers it: every tensor stored outside the
//! `.onnx` file found, checked (inside the model's folder, a regular file, long enough) and
//! named by the hash of its bytes, before anything is sent. The files are mapped and read
//! once to hash them; the pages read are handed back as it goes, so a client's memory does not
//! grow with the model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use vkml_protocol::pb;

use super::DistError;
use crate::cache;
use crate::onnx::{self, ExternalTensor};

/// A model's external weights: how they are named on the wire, and their bytes (slices of
/// the files' mappings), in the same order.
#[derive(Default)]
pub struct SideWeights {
    pub ranges: Vec<pb::WeightRange>,
    pub bytes: Vec<Bytes>,
}

fn bad(message: String) -> DistError {
    DistError::Weights(message)
}

/// The external data of the model at `path` (whose bytes are `model`). `progress` hears of
/// the bytes hashed.
pub fn prepare(
    path: &Path,
    model: &Bytes,
    mut progress: impl FnMut(&pb::LoadProgress),
) -> Result<SideWeights, DistError> {
    let tensors = onnx::external_tensors(model).map_err(|e| DistError::Runtime(e.into()))?;
    if tensors.is_empty() {
        return Ok(SideWeights::default());
    }
    let dir = onnx::model_dir(path);
    let mut files: BTreeMap<String, (PathBuf, Bytes)> = BTreeMap::new();
    let mut seen: BTreeMap<(String, u64), usize> = BTreeMap::new();
    let mut out = SideWeights::default();
    for t in &tensors {
        if seen.contains_key(&(t.location.clone(), t.offset)) {
            continue;
        }
        if !files.contains_key(&t.location) {
            let opened = open(&dir, t)?;
            files.insert(t.location.clone(), opened);
        }
        let (file, data) = &files[&t.location];
        let size = data.len() as u64;
        let length = match t.length {
            Some(l) => l,
            None => size.checked_sub(t.offset).unwrap_or(u64::MAX),
        };
        let end = t.offset.checked_add(length).filter(|&e| e <= size);
        let Some(end) = end else {
            return Err(bad(format!(
                "{} has {size} bytes, but tensor '{}' is stored at bytes {}..{}: the file is \
                 truncated, or is not the one this model was saved with",
                file.display(),
                t.label,
                t.offset,
                t.offset.saturating_add(length)
            )));
        };
        seen.insert((t.location.clone(), t.offset), out.ranges.len());
        out.ranges.push(pb::WeightRange {
            location: t.location.clone(),
            offset: t.offset,
            length,
            hash: Bytes::new(),
        });
        out.bytes.push(data.slice(t.offset as usize..end as usize));
    }
    let total: u64 = out.ranges.iter().map(|r| r.length).sum();
    let mut done = 0;
    for (r, b) in out.ranges.iter_mut().zip(&out.bytes) {
        r.hash = Bytes::copy_from_slice(cache::hash(b).as_bytes());
        done += r.length;
        progress(&pb::LoadProgress {
            stage: "hashing weights".into(),
            done_bytes: done,
            total_bytes: total,
            node: String::new(),
        });
    }
    Ok(out)
}

/// Maps one external-data file, refusing what could leave the model's folder.
fn open(dir: &Path, t: &ExternalTensor) -> Result<(PathBuf, Bytes), DistError> {
    let real = onnx::resolve_location(dir, &t.location).map_err(|(path, why)| {
        let file = path.map_or_else(|| t.location.clone(), |p| p.display().to_string());
        bad(format!("tensor '{}': external data {file}: {why}", t.label))
    })?;
    let path = dir.join(&t.location);
    let (data, _) = onnx::read_file(&real, onnx::COPY_BELOW)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    Ok((path, data))
}
