//! A run's outputs as a set of .npy files: one unique file name per output, and all of them
//! written or none.

use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::TensorFileError;
use crate::files::Staged;
use crate::tensor::{DType, Tensor};

/// An output name as a file name: anything but letters, digits, '.', '_' and '-' is '_'.
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // "", "." and ".." name no file of their own.
    if s.chars().all(|c| c == '.') {
        format!("_{s}")
    } else {
        s
    }
}

/// The file stem of each output, in order, unique and the same for the same names every time:
/// a name that is already a valid file name keeps it; the others become [`sanitize`]d, and
/// one whose sanitized name is taken (`y/0` and `y:0` are both `y_0`) gets the first free
/// `_2`, `_3`... after it, in output order.
pub fn file_stems(names: &[&str]) -> Vec<String> {
    let exact: Vec<bool> = names.iter().map(|n| sanitize(n) == *n).collect();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut stems: Vec<Option<String>> = vec![None; names.len()];
    // Valid names first, so that a later valid name is never displaced by a renamed one.
    for (i, n) in names.iter().enumerate() {
        if exact[i] && taken.insert(n.to_string()) {
            stems[i] = Some(n.to_string());
        }
    }
    for (i, n) in names.iter().enumerate() {
        if stems[i].is_some() {
            continue;
        }
        let base = sanitize(n);
        let mut stem = base.clone();
        let mut k = 2;
        // Every valid name is taken already, so a renamed output never takes one.
        while taken.contains(&stem) {
            stem = format!("{base}_{k}");
            k += 1;
        }
        taken.insert(stem.clone());
        stems[i] = Some(stem);
    }
    stems
        .into_iter()
        .map(|s| s.expect("every output named"))
        .collect()
}

/// Writes each output as `dir/<stem>.npy` ([`file_stems`]; a string tensor, which .npy holds
/// only as a pickle, as `dir/<stem>.pb`, a TensorProto), creating `dir`: every file goes
/// to a temporary file first, and only when all are complete are they renamed into place, so
/// a failure (a full disk, an unwritable folder) leaves no truncated file and no partial set.
/// Returns each output's path, in order.
pub fn write_outputs(
    dir: &Path,
    outputs: &[(String, Tensor)],
) -> Result<Vec<PathBuf>, TensorFileError> {
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TensorFileError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(werr(dir))?;
    let names: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
    let paths: Vec<PathBuf> = file_stems(&names)
        .iter()
        .zip(outputs)
        .map(|(s, (_, t))| match t.dtype() {
            DType::String => dir.join(format!("{s}.pb")),
            _ => dir.join(format!("{s}.npy")),
        })
        .collect();
    let mut staged = Vec::with_capacity(outputs.len());
    for ((name, t), path) in outputs.iter().zip(&paths) {
        let mut s = Staged::new(path).map_err(werr(path))?;
        let mut w = BufWriter::new(s.file());
        match t.dtype() {
            DType::String => super::pb::write_pb_to(&mut w, name, t),
            _ => super::npy::write_npy_to(&mut w, t),
        }
        .and_then(|()| w.flush())
        .map_err(werr(path))?;
        drop(w);
        staged.push((s, path));
    }
    // A rename fails when a folder is in the way: found before the first rename, so that the
    // set is still all or nothing.
    for (_, path) in &staged {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            let e =
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a folder is in the way");
            return Err(werr(path)(e));
        }
    }
    // Dropping the rest on an error removes their temporary files.
    for (s, path) in staged {
        s.commit().map_err(werr(path))?;
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_unique_and_deterministic() {
        assert_eq!(file_stems(&["y/0", "y:0"]), ["y_0", "y_0_2"]);
        // A valid name keeps itself even when a renamed one came first.
        assert_eq!(file_stems(&["y/0", "y_0"]), ["y_0_2", "y_0"]);
        assert_eq!(
            file_stems(&["a:b", "a_b_2", "a.b"]),
            ["a_b", "a_b_2", "a.b"]
        );
        assert_eq!(
            file_stems(&["a:b", "a;b", "a_b_2"]),
            ["a_b", "a_b_3", "a_b_2"]
        );
        assert_eq!(file_stems(&["", ".", ".."]), ["_", "_.", "_.."]);
        assert_eq!(file_stems(&["y", "y"]), ["y", "y_2"]);
    }
}
