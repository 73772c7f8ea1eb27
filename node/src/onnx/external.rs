//! External data: tensors whose bytes live in another file beside the model. Each file is
//! memory-mapped once per load and sliced per tensor, at any offset (aligned or not).
//!
//! The paths come from the model file, which may come from anyone, so they must not reach
//! outside the model's folder: absolute paths and `..` components are refused before touching
//! the file system, and a symbolic link that resolves outside the folder is refused after.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use super::LoadError;
use super::mmap::{COPY_BELOW, FileStamp, read_file};
use super::proto::TensorProto;

/// The model's folder and the external files mapped so far.
pub(crate) struct ExternalFiles {
    dir: Option<PathBuf>,
    maps: RefCell<HashMap<PathBuf, Bytes>>,
    /// Files up to this size are copied rather than mapped (see `mmap::COPY_BELOW`).
    copy_below: u64,
    /// The mapped ones, to be checked before each run.
    stamps: RefCell<Vec<FileStamp>>,
    /// Instead of files: each tensor's bytes by (location, offset), as a node that received
    /// a model's weights apart from its `.onnx` bytes holds them.
    resolved: Option<Resolved>,
}

/// Weights by (location as the model spells it, offset), and which tensors took them.
pub(crate) struct Resolved {
    pub(crate) weights: BTreeMap<(String, u64), Bytes>,
    pub(crate) used: RefCell<Vec<(String, (String, u64))>>,
    /// Whether a graph initializer whose bytes are not in `weights` is deferred (typed, its
    /// bytes to come) rather than an error.
    pub(crate) defer: bool,
}

/// Where one tensor's bytes are, as its external_data entries say.
pub(crate) struct Location {
    pub(crate) file: PathBuf,
    pub(crate) offset: u64,
    pub(crate) length: Option<u64>,
}

impl ExternalFiles {
    pub(crate) fn new(dir: Option<&Path>) -> ExternalFiles {
        ExternalFiles::copying_below(dir, COPY_BELOW)
    }

    pub(crate) fn copying_below(dir: Option<&Path>, copy_below: u64) -> ExternalFiles {
        ExternalFiles {
            dir: dir.map(Path::to_path_buf),
            maps: RefCell::new(HashMap::new()),
            copy_below,
            stamps: RefCell::new(Vec::new()),
            resolved: None,
        }
    }

    /// Tensors take their bytes from `weights` rather than from files; when `defer`, the
    /// graph's initializers missing there are deferred (see [`ExternalFiles::deferred`]).
    pub(crate) fn resolved(weights: BTreeMap<(String, u64), Bytes>, defer: bool) -> ExternalFiles {
        ExternalFiles {
            dir: None,
            maps: RefCell::new(HashMap::new()),
            copy_below: COPY_BELOW,
            stamps: RefCell::new(Vec::new()),
            resolved: Some(Resolved {
                weights,
                used: RefCell::new(Vec::new()),
                defer,
            }),
        }
    }

    /// Where the bytes of graph initializer `t` are, when they are external, not at hand,
    /// and may come later (resolved weights with `defer`): the location as the model spells
    /// it (checked to stay inside the model's folder) and the offset.
    pub(crate) fn deferred(
        &self,
        t: &TensorProto,
        label: &str,
    ) -> Result<Option<(String, u64)>, LoadError> {
        let Some(r) = self.resolved.as_ref().filter(|r| r.defer) else {
            return Ok(None);
        };
        if t.data_location != super::proto::tensor_proto::DataLocation::External as i32 {
            return Ok(None);
        }
        let loc = parse_entries(t, label)?;
        check_relative(&loc.file).map_err(|problem| LoadError::ExternalData {
            tensor: label.to_string(),
            file: loc.file.clone(),
            offset: loc.offset,
            length: loc.length,
            problem,
        })?;
        let key = (loc.file.to_string_lossy().into_owned(), loc.offset);
        Ok((!r.weights.contains_key(&key)).then_some(key))
    }

    /// Which tensor took which weight, when resolved.
    pub(crate) fn used(self) -> Vec<(String, (String, u64))> {
        self.resolved.map(|r| r.used.take()).unwrap_or_default()
    }

    /// The files mapped so far, as they were when mapped.
    pub(crate) fn stamps(&self) -> Vec<FileStamp> {
        self.stamps.borrow().clone()
    }

    /// The tensor's bytes. `nbytes` is what its type and shape need; `what` says so in words.
    pub(crate) fn read(
        &self,
        t: &TensorProto,
        label: &str,
        nbytes: usize,
        what: &str,
    ) -> Result<Bytes, LoadError> {
        let loc = parse_entries(t, label)?;
        let fail = |problem: String| LoadError::ExternalData {
            tensor: label.to_string(),
            file: loc.file.clone(),
            offset: loc.offset,
            length: loc.length,
            problem,
        };
        if let Some(r) = &self.resolved {
            check_relative(&loc.file).map_err(fail)?;
            let key = (loc.file.to_string_lossy().into_owned(), loc.offset);
            let Some(data) = r.weights.get(&key) else {
                return Err(fail("its bytes were not sent with the model".into()));
            };
            if data.len() != nbytes || loc.length.is_some_and(|l| l != nbytes as u64) {
                return Err(fail(format!(
                    "the range holds {} bytes, but {what}",
                    data.len()
                )));
            }
            r.used.borrow_mut().push((label.to_string(), key));
            return Ok(data.clone());
        }
        let Some(dir) = &self.dir else {
            return Err(fail(
                "external data is relative to the model's folder, and this tensor was not read \
                 from a file"
                    .into(),
            ));
        };
        let real = match resolve_inside(dir, &loc.file) {
            Ok(real) => real,
            Err(Outside::Named(problem)) => return Err(fail(problem)),
            Err(Outside::At(path, problem)) => {
                return Err(LoadError::ExternalData {
                    tensor: label.to_string(),
                    file: path,
                    offset: loc.offset,
                    length: loc.length,
                    problem,
                });
            }
        };
        let path = dir.join(&loc.file);
        let fail_at = |problem: String| LoadError::ExternalData {
            tensor: label.to_string(),
            file: path.clone(),
            offset: loc.offset,
            length: loc.length,
            problem,
        };

        let data = self
            .map(&real)
            .map_err(|e| fail_at(format!("cannot read it: {e}")))?;
        let size = data.len() as u64;
        if loc.offset > size {
            return Err(fail_at(format!(
                "the offset lies beyond the end of the file ({size} bytes)"
            )));
        }
        let length = loc.length.unwrap_or(size - loc.offset);
        let end = loc.offset.checked_add(length).filter(|&e| e <= size);
        let Some(end) = end else {
            return Err(fail_at(format!(
                "the range runs past the end of the file ({size} bytes)"
            )));
        };
        if length != nbytes as u64 {
            return Err(fail_at(format!(
                "the range holds {length} bytes, but {what}"
            )));
        }
        // Both ends are within `size`, which is a usize (the mapping's length).
        Ok(data.slice(loc.offset as usize..end as usize))
    }

    fn map(&self, real: &Path) -> std::io::Result<Bytes> {
        if let Some(b) = self.maps.borrow().get(real) {
            return Ok(b.clone());
        }
        let (b, stamp) = read_file(real, self.copy_below)?;
        self.stamps.borrow_mut().extend(stamp);
        self.maps.borrow_mut().insert(real.to_path_buf(), b.clone());
        Ok(b)
    }
}

pub(crate) fn parse_entries(t: &TensorProto, label: &str) -> Result<Location, LoadError> {
    let mut file = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &t.external_data {
        let number = |v: &str| -> Result<u64, LoadError> {
            v.trim().parse::<u64>().map_err(|_| LoadError::BadTensor {
                tensor: label.to_string(),
                message: format!(
                    "external_data '{}' is '{v}', not a non-negative integer",
                    e.key
                ),
            })
        };
        match e.key.as_str() {
            "location" => file = Some(PathBuf::from(&e.value)),
            "offset" => offset = number(&e.value)?,
            "length" => length = Some(number(&e.value)?),
            // "checksum" and anything newer: not needed to read the bytes.
            _ => {}
        }
    }
    match file {
        Some(file) if !file.as_os_str().is_empty() => Ok(Location {
            file,
            offset,
            length,
        }),
        _ => Err(LoadError::BadTensor {
            tensor: label.to_string(),
            message: "data_location is EXTERNAL but external_data has no 'location'".into(),
        }),
    }
}

/// Why an external-data location was refused: from its text alone, or at the path it names.
pub(crate) enum Outside {
    Named(String),
    At(PathBuf, String),
}

/// Where `file` (an external-data location) lies under `dir`, symbolic links resolved, refusing
/// what could leave the folder: from the text (absolute, `..`) before touching the file system,
/// and where the links lead after.
pub(crate) fn resolve_inside(dir: &Path, file: &Path) -> Result<PathBuf, Outside> {
    check_relative(file).map_err(Outside::Named)?;
    let path = dir.join(file);
    let real = path
        .canonicalize()
        .map_err(|e| Outside::At(path.clone(), format!("cannot open it: {e}")))?;
    let real_dir = dir.canonicalize().map_err(|e| {
        let why = format!("cannot resolve the model's folder {}: {e}", dir.display());
        Outside::At(path.clone(), why)
    })?;
    if !real.starts_with(&real_dir) {
        let why = format!(
            "it resolves to {}, outside the model's folder {} (through a symbolic link); \
             external data must stay inside the model's folder",
            real.display(),
            real_dir.display()
        );
        return Err(Outside::At(path, why));
    }
    Ok(real)
}

/// Refuses, from the text alone, paths that could leave the model's folder.
pub(crate) fn check_relative(file: &Path) -> Result<(), String> {
    for c in file.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => {
                return Err(
                    "absolute paths are not allowed; external data must be given \
                            relative to the model's folder"
                        .into(),
                );
            }
            Component::ParentDir => {
                return Err(
                    "'..' is not allowed in the path; external data must stay inside \
                            the model's folder"
                        .into(),
                );
            }
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(())
}
