//! A loaded model, run from Python: load and run release the GIL, so Python threads calling
//! one session run concurrently, as the runtime allows.

use std::path::Path;
use std::str::FromStr;

use pyo3::IntoPyObject;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use vkml::{DeviceSelection, SessionOptions};

use crate::arrays;
use crate::errors::{InvalidInput, to_py};

pub const VULKAN: &str = "VulkanExecutionProvider";
pub const CPU: &str = "CPUExecutionProvider";

/// The `VKML_*` settings of the process's environment, as the binary takes them
/// (README.md lists them), each value it does not understand named in a Python warning (the default
/// is kept for it). The bindings are an edge of the runtime, as the binary is: the library
/// itself reads no environment.
pub fn tuning(py: Python<'_>) -> PyResult<vkml::tuning::Tuning> {
    tuning_with(py, Vec::new())
}

/// As [`tuning`], with `settings` (a session's `vkml.*` config entries as `VKML_*` names)
/// over the environment's; a name that is no setting is refused.
pub fn tuning_with(
    py: Python<'_>,
    settings: Vec<(String, String)>,
) -> PyResult<vkml::tuning::Tuning> {
    let known = |name: &str| vkml::tuning::VARIABLES.iter().any(|(n, _)| *n == name);
    if let Some((name, _)) = settings.iter().find(|(name, _)| !known(name)) {
        let entries: Vec<String> = vkml::tuning::VARIABLES
            .iter()
            .map(|(n, _)| format!("vkml.{}", n["VKML_".len()..].to_lowercase()))
            .collect();
        return Err(InvalidInput::new_err(format!(
            "the session config entry vkml.{} is no VKML setting; they are: {}",
            name.get("VKML_".len()..).unwrap_or(name).to_lowercase(),
            entries.join(", ")
        )));
    }
    let (tuning, warnings) = vkml::tuning::Tuning::from_vars(std::env::vars().chain(settings));
    for w in warnings {
        let message = std::ffi::CString::new(w).unwrap_or_default();
        PyErr::warn(
            py,
            &py.get_type::<pyo3::exceptions::PyUserWarning>(),
            &message,
            1,
        )?;
    }
    Ok(tuning)
}

/// Whether a Vulkan device opens in this process.
pub fn vulkan_available() -> bool {
    vkml::session::vulkan(&Default::default()).is_ok_and(|v| !v.gpus().is_empty())
}

/// A declared dimension: a size, or a symbolic name ("batch", "?" when unnamed).
#[derive(IntoPyObject, Clone)]
pub enum Dim {
    Fixed(usize),
    Sym(String),
}

/// (name, shape or None where the rank is unknown, onnxruntime's type name).
pub type Arg = (String, Option<Vec<Dim>>, String);

pub fn args(defs: Vec<vkml::model::ValueDef>) -> Vec<Arg> {
    defs.into_iter()
        .map(|d| {
            let shape = d.dims.map(|dims| {
                dims.into_iter()
                    .map(|dim| match dim {
                        vkml::model::Dim::Fixed(n) => Dim::Fixed(n),
                        vkml::model::Dim::Sym(s) => Dim::Sym(s),
                    })
                    .collect()
            });
            (d.name, shape, arrays::type_name(d.dtype))
        })
        .collect()
}

/// The positions among `outputs` of the outputs `names` asks for (all for None).
pub fn wanted(outputs: &[String], names: Option<&[String]>) -> PyResult<Vec<usize>> {
    match names {
        None => Ok((0..outputs.len()).collect()),
        Some(names) => names
            .iter()
            .map(|n| {
                outputs.iter().position(|o| o == n).ok_or_else(|| {
                    InvalidInput::new_err(format!(
                        "the model has no output named '{n}' (its outputs: {})",
                        outputs.join(", ")
                    ))
                })
            })
            .collect(),
    }
}

/// A model loaded on `device` ("auto", "cpu", "vulkan" or "vulkan:N").
#[pyclass(frozen, module = "vkml._vkml")]
pub struct Session {
    inner: vkml::Session,
    /// Graph output names, in order.
    outputs: Vec<String>,
}

impl Session {
    /// The runtime's session (an io binding runs it).
    pub fn runtime(&self) -> &vkml::Session {
        &self.inner
    }

    /// Graph output names, in order.
    pub fn output_names(&self) -> &[String] {
        &self.outputs
    }
}

#[pymethods]
impl Session {
    /// `settings`: `VKML_*` names and values over the environment's (a session's `vkml.*`
    /// config entries).
    #[new]
    #[pyo3(signature = (model, device, settings=Vec::new()))]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        device: &str,
        settings: Vec<(String, String)>,
    ) -> PyResult<Session> {
        let devices = DeviceSelection::from_str(device).map_err(InvalidInput::new_err)?;
        let options = SessionOptions {
            devices,
            tuning: tuning_with(py, settings)?,
            ..Default::default()
        };
        let inner = if let Ok(bytes) = model.cast::<PyBytes>() {
            let data = bytes::Bytes::copy_from_slice(bytes.as_bytes());
            py.detach(|| vkml::Session::load_bytes(Path::new("model.onnx"), data, options))
        } else if model.is_instance_of::<PyString>() {
            let path: String = model.extract()?;
            py.detach(|| vkml::Session::load(&path, options))
        } else {
            return Err(InvalidInput::new_err(
                "the model is given as a path (str) or as the file's bytes",
            ));
        }
        .map_err(to_py)?;
        let outputs = inner.outputs().into_iter().map(|d| d.name).collect();
        Ok(Session { inner, outputs })
    }

    /// The inputs a run takes: (name, shape, type).
    fn inputs(&self) -> Vec<Arg> {
        args(self.inner.inputs())
    }

    /// The outputs a run gives, in order: (name, shape, type).
    fn outputs(&self) -> Vec<Arg> {
        args(self.inner.outputs())
    }

    /// Seconds each of `runs` runs of the Rust API takes on `feeds`, one after the other
    /// with the GIL released, the host idle (spinning) `gap_us` microseconds before each
    /// (benches/python/bench_overhead.py: what the Python call adds, and how a run's time
    /// depends on the pause before it).
    #[pyo3(signature = (feeds, runs, gap_us = 0.0))]
    fn _time_runs(
        &self,
        py: Python<'_>,
        feeds: &Bound<'_, PyAny>,
        runs: usize,
        gap_us: f64,
    ) -> PyResult<Vec<f64>> {
        let feeds = arrays::Feeds::new(feeds, arrays::Lend::Share)?;
        let inputs = feeds.inputs();
        let gap = std::time::Duration::from_secs_f64(gap_us.max(0.0) * 1e-6);
        py.detach(|| {
            (0..runs)
                .map(|_| {
                    let idle = std::time::Instant::now();
                    while idle.elapsed() < gap {
                        std::hint::spin_loop();
                    }
                    let start = std::time::Instant::now();
                    self.inner.run(&inputs)?;
                    Ok(start.elapsed().as_secs_f64())
                })
                .collect::<vkml::error::Result<Vec<f64>>>()
        })
        .map_err(to_py)
    }

    /// Runs once on `feeds` (name -> numpy array) and returns the outputs named in `names`
    /// (all of them, in the model's order, for None) as numpy arrays.
    #[pyo3(signature = (names, feeds))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        names: Option<Vec<String>>,
        feeds: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let wanted = wanted(&self.outputs, names.as_deref())?;
        let feeds = arrays::Feeds::new(feeds, arrays::Lend::Share)?;
        let outs = py
            .detach(|| self.inner.run(&feeds.inputs()))
            .map_err(to_py)?;
        wanted
            .into_iter()
            .map(|i| arrays::to_numpy(py, &outs[i].1))
            .collect()
    }
}
