//! Running one case in the worker, and naming its outcome. A case that returns at all is not a
//! finding: an error is the right answer to most mutated models. What the outcome's name is
//! for is the driver's corpus: a case reaching an outcome no case reached before is kept.

use std::path::{Path, PathBuf};

use arbitrary::Unstructured;
use vkml::{DeviceSelection, Session, SessionOptions, Tensor, Tuning};

use crate::case::{self, Case, Target};
use crate::mutate::Pools;
use crate::seeds::Seeds;

/// How the worker runs model cases.
#[derive(Clone, Debug)]
pub struct ModelSettings {
    pub devices: DeviceSelection,
    /// Every device's budget: a model may allocate no more, however its sizes are computed.
    pub device_memory_limit: u64,
}

pub struct Runner {
    seeds: Seeds,
    pools: Pools,
    scratch: PathBuf,
    settings: ModelSettings,
    frames: Option<crate::frames::Target>,
}

impl Runner {
    pub fn new(seed_roots: &[PathBuf], scratch: PathBuf, settings: ModelSettings) -> Runner {
        let seeds = crate::seeds::load(seed_roots);
        let pools = Pools::new(&seeds);
        Runner {
            seeds,
            pools,
            scratch,
            settings,
            frames: None,
        }
    }

    pub fn seeds(&self) -> &Seeds {
        &self.seeds
    }

    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// Runs a case; the name of its outcome.
    pub fn run(&mut self, case: &Case) -> String {
        match case.target {
            Target::Models => self.run_model(case),
            Target::Tensors => self.run_tensor_file(case),
            Target::Frames => {
                let target = self
                    .frames
                    .get_or_insert_with(|| crate::frames::Target::start().expect("a node to fuzz"));
                target.run(&case.data)
            }
        }
    }

    fn run_model(&self, case: &Case) -> String {
        let Some(seed) = self.seeds.get(&case.seed) else {
            return "no such seed".into();
        };
        let built = case::build_model(seed, &self.pools, &case.data);
        let dir = self.fresh_scratch();
        if let Err(e) = case::write_model(&built, &dir) {
            return format!("cannot write the case: {e}");
        }
        let outcome = run_session(&dir.join("model.onnx"), &built.inputs, &self.settings);
        format!(
            "{}|{}",
            built.focus,
            outcome.replace(&*dir.to_string_lossy(), "CASE")
        )
    }

    fn run_tensor_file(&self, case: &Case) -> String {
        let mut u = Unstructured::new(&case.data);
        let Ok((name, bytes)) = crate::tensor_files::make(&mut u) else {
            return "no file".into();
        };
        let dir = self.fresh_scratch();
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, bytes) {
            return format!("cannot write the case: {e}");
        }
        match vkml::io::read_tensor_file(&path) {
            Ok(t) => format!("{name}|ok {}", t.dtype()),
            Err(e) => {
                let message = e.to_string().replace(&*dir.to_string_lossy(), "CASE");
                format!("{name}|{}", class(&message))
            }
        }
    }

    fn fresh_scratch(&self) -> PathBuf {
        let _ = std::fs::remove_dir_all(&self.scratch);
        let _ = std::fs::create_dir_all(&self.scratch);
        self.scratch.clone()
    }
}

/// Loads and runs a model file with the given inputs: "ok", or the class of the error.
pub fn run_session(model: &Path, inputs: &[(String, Tensor)], settings: &ModelSettings) -> String {
    match check_session(model, inputs, settings) {
        Ok(n) => format!("ok {n}"),
        Err((stage, message)) => format!("{stage}: {}", class(&message)),
    }
}

/// Loads and runs a model file with the given inputs: the number of outputs, or the stage that
/// failed ("load" or "run") and the whole error message.
pub fn check_session(
    model: &Path,
    inputs: &[(String, Tensor)],
    settings: &ModelSettings,
) -> Result<usize, (&'static str, String)> {
    let options = SessionOptions {
        devices: settings.devices,
        device_memory_limit: Some(settings.device_memory_limit),
        // One value may be no larger than a device either: the worker's address space is
        // capped a few budgets above, and the library's default, the device's own budget,
        // is the host's memory.
        tuning: Tuning {
            max_value_bytes: Some(settings.device_memory_limit),
            ..Default::default()
        },
        ..Default::default()
    };
    let session = Session::load(model, options).map_err(|e| ("load", e.to_string()))?;
    let refs: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let outputs = session.run(&refs).map_err(|e| ("run", e.to_string()))?;
    Ok(outputs.len())
}

/// An error message with what varies between cases (numbers, quoted names, paths) blanked, cut
/// to its first words: errors of one kind share a class.
pub fn class(message: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in message.lines().next().unwrap_or("").chars() {
        match c {
            '\'' | '"' | '`' => {
                quoted = !quoted;
                if quoted {
                    out.push('_');
                }
            }
            _ if quoted => {}
            '0'..='9' if out.ends_with('#') => {}
            '0'..='9' => out.push('#'),
            '/' => out.push('/'),
            _ => out.push(c),
        }
        if out.len() >= 60 {
            break;
        }
    }
    out
}
