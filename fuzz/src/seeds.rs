//! Seed models: folders holding `model.onnx` and `test_data_set_0/input_<i>.pb` (the layout of
//! ONNX's backend tests and of tests/fixtures). The backend tests give one node of nearly every
//! operator with valid attributes, the best start a mutation can have.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost::Message;
use vkml::Tensor;

use crate::proto::ModelProto;

/// Models above this size are left out: a case should take milliseconds.
const MAX_SEED_BYTES: u64 = 1 << 20;

pub struct Seed {
    pub model: ModelProto,
    /// The seed's inputs where every one of them is a plain tensor; otherwise inputs are made
    /// from the declared types.
    pub inputs: Option<Vec<Tensor>>,
    /// The folder external data files are found in.
    pub dir: PathBuf,
}

/// Seeds by name (their path under the root they were found in), in a stable order.
pub type Seeds = BTreeMap<String, Seed>;

/// The names of the seed folders under `roots` (searched two levels deep), without reading the
/// models: what the driver needs to draw cases.
pub fn names(roots: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for root in roots {
        visit(root, 0, &mut |dir| {
            if let Some(name) = seed_name(root, dir) {
                out.push(name);
            }
        });
    }
    out.sort();
    out.dedup();
    out
}

/// Every seed under `roots` that decodes, keyed by name.
pub fn load(roots: &[PathBuf]) -> Seeds {
    let mut out = Seeds::new();
    for root in roots {
        visit(root, 0, &mut |dir| {
            let Some(name) = seed_name(root, dir) else {
                return;
            };
            if let Some(seed) = read(dir) {
                out.entry(name).or_insert(seed);
            }
        });
    }
    out
}

fn seed_name(root: &Path, dir: &Path) -> Option<String> {
    let model = dir.join("model.onnx");
    let len = std::fs::metadata(&model).ok()?.len();
    if len > MAX_SEED_BYTES {
        return None;
    }
    let rel = dir.strip_prefix(root).ok()?;
    let base = root.file_name()?.to_string_lossy();
    let name = format!("{base}/{}", rel.display());
    // A case is one line of space-separated fields.
    (!name.contains(char::is_whitespace)).then_some(name)
}

fn visit(dir: &Path, depth: usize, f: &mut dyn FnMut(&Path)) {
    if dir.join("model.onnx").is_file() {
        f(dir);
        return;
    }
    if depth >= 2 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        visit(&d, depth + 1, f);
    }
}

fn read(dir: &Path) -> Option<Seed> {
    let bytes = std::fs::read(dir.join("model.onnx")).ok()?;
    let model = ModelProto::decode(bytes.as_slice()).ok()?;
    let data = dir.join("test_data_set_0");
    let mut inputs = Some(Vec::new());
    for i in 0.. {
        let path = data.join(format!("input_{i}.pb"));
        if !path.is_file() {
            break;
        }
        match (vkml::io::read_pb(&path), inputs.as_mut()) {
            (Ok((_, t)), Some(list)) => list.push(t),
            _ => inputs = None,
        }
    }
    Some(Seed {
        model,
        inputs,
        dir: dir.to_path_buf(),
    })
}
