//! A case: which target, which seed, and the bytes every choice is drawn from. Cases travel to
//! workers as one text line and are saved to the corpus and findings as small text files.

use std::path::Path;

use arbitrary::Unstructured;
use prost::Message;
use vkml::Tensor;

use crate::mutate::{self, Pools, SideFile};
use crate::seeds::Seed;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Target {
    /// Mutated models and inputs, loaded and run by a session.
    Models,
    /// .npy and .pb files through the tensor readers.
    Tensors,
    /// Frames sent after the handshake to a node, by a client holding the key.
    Frames,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Models => "models",
            Target::Tensors => "tensors",
            Target::Frames => "frames",
        }
    }

    fn parse(s: &str) -> Option<Target> {
        [Target::Models, Target::Tensors, Target::Frames]
            .into_iter()
            .find(|t| t.name() == s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub target: Target,
    /// The seed model's name; "-" for targets without seeds.
    pub seed: String,
    pub data: Vec<u8>,
}

impl Case {
    /// `<target> <seed> <hex data>`: one line, no spaces inside a field (seed names have
    /// none; see seeds::names).
    pub fn to_line(&self) -> String {
        format!("{} {} {}", self.target.name(), self.seed, hex(&self.data))
    }

    pub fn from_line(line: &str) -> Option<Case> {
        let mut parts = line.split_whitespace();
        let target = Target::parse(parts.next()?)?;
        let seed = parts.next()?.to_string();
        let data = unhex(parts.next().unwrap_or(""))?;
        Some(Case { target, seed, data })
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_line() + "\n")
    }

    pub fn load(path: &Path) -> std::io::Result<Case> {
        let text = std::fs::read_to_string(path)?;
        Case::from_line(text.trim()).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is not a case file", path.display()),
            )
        })
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A mutated model ready to run.
pub struct BuiltModel {
    pub model: Vec<u8>,
    pub files: Vec<SideFile>,
    pub inputs: Vec<(String, Tensor)>,
    /// The op the mutations touched last, for the driver's record of outcomes.
    pub focus: String,
}

/// The model of a case: the seed mutated by the case's bytes. Bytes that run out end the
/// mutations early (arbitrary then answers with the smallest choices), never the case.
pub fn build_model(seed: &Seed, pools: &Pools, data: &[u8]) -> BuiltModel {
    let mut u = Unstructured::new(data);
    let (model, files, raw, focus) = match mutate::mutate(&mut u, seed.model.clone(), pools) {
        Ok(m) => (m.model, m.files, m.raw, m.focus),
        Err(_) => (seed.model.clone(), Vec::new(), None, String::new()),
    };
    let inputs = crate::inputs::make(&mut u, model.graph.as_ref(), seed.inputs.as_deref())
        .unwrap_or_default();
    BuiltModel {
        model: raw.unwrap_or_else(|| model.encode_to_vec()),
        files,
        inputs,
        focus,
    }
}

/// Writes a built model, its side files and its inputs (as .pb files, in order) into `dir`.
pub fn write_model(built: &BuiltModel, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("model.onnx"), &built.model)?;
    for f in &built.files {
        match f {
            SideFile::Bytes { name, data } => std::fs::write(dir.join(name), data)?,
            SideFile::Fifo { name } => {
                let path = dir.join(name);
                if !path.exists() {
                    rustix::fs::mknodat(
                        rustix::fs::CWD,
                        &path,
                        rustix::fs::FileType::Fifo,
                        rustix::fs::Mode::from_raw_mode(0o600),
                        0,
                    )?;
                }
            }
        }
    }
    let data = dir.join("test_data_set_0");
    std::fs::create_dir_all(&data)?;
    for (i, (name, t)) in built.inputs.iter().enumerate() {
        vkml::io::write_pb(&data.join(format!("input_{i}.pb")), name, t)
            .map_err(std::io::Error::other)?;
    }
    Ok(())
}
