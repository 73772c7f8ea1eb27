//! Text generation from Python: a language model's folder (model.onnx and tokenizer.json)
//! loaded locally or on a cluster, driven by the runtime's own loop (node/src/generate), its
//! caches kept where the model runs.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use vkml::distributed::client::RemoteModel;
use vkml::generate::{GenerateError, GenerateOptions, ModelFolder, Sampling, TextGenerator};
use vkml::{DeviceSelection, Session, SessionOptions};

use crate::errors::{ClusterError, InvalidInput, InvalidModel, to_py};

pub fn gen_err(e: GenerateError) -> PyErr {
    match e {
        GenerateError::Run(e) => to_py(e),
        GenerateError::Remote(vkml::distributed::DistError::Runtime(e)) => to_py(e),
        GenerateError::Remote(e) => ClusterError::new_err(e.to_string()),
        GenerateError::Model(_) | GenerateError::File { .. } | GenerateError::Tokenizer(_) => {
            InvalidModel::new_err(e.to_string())
        }
        GenerateError::EmptyPrompt | GenerateError::TooLong { .. } => {
            InvalidInput::new_err(e.to_string())
        }
    }
}

/// Where the model runs.
pub enum Host {
    Local(Box<Session>),
    Cluster(Arc<RemoteModel>),
}

/// A language model ready to generate.
#[pyclass(frozen, module = "vkml._vkml")]
pub struct Generator {
    text: TextGenerator,
    host: Host,
}

impl Generator {
    pub fn on_cluster(folder: ModelFolder, model: RemoteModel, io: vkml::generate::LlmIo) -> Self {
        Generator {
            text: TextGenerator { folder, io },
            host: Host::Cluster(Arc::new(model)),
        }
    }
}

#[pymethods]
impl Generator {
    /// Loads the folder's model on `device` ("auto", "cpu", "vulkan" or "vulkan:N").
    #[new]
    fn new(py: Python<'_>, dir: PathBuf, device: &str) -> PyResult<Generator> {
        let devices = DeviceSelection::from_str(device).map_err(InvalidInput::new_err)?;
        let options = SessionOptions {
            devices,
            tuning: crate::session::tuning(py)?,
            ..Default::default()
        };
        py.detach(|| {
            let folder = ModelFolder::open(&dir).map_err(gen_err)?;
            let (session, io) = folder.load_session(options).map_err(gen_err)?;
            Ok(Generator {
                text: TextGenerator { folder, io },
                host: Host::Local(Box::new(session)),
            })
        })
    }

    /// Generates after `prompt` (text, or token ids) up to `max_new_tokens`, greedily unless
    /// `temperature` > 0 (then nucleus sampling with `top_p`, seeded). `on_text` sees each new
    /// piece of text as it is made (text prompts only). Returns a dict: tokens, text,
    /// prompt_tokens, prompt_tokens_per_s, decode_tokens_per_s, stopped_at_eos.
    #[pyo3(signature = (prompt, max_new_tokens=128, temperature=0.0, top_p=1.0, seed=0, on_text=None, ignore_eos=false))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: &Bound<'py, PyAny>,
        max_new_tokens: usize,
        temperature: f32,
        top_p: f32,
        seed: u64,
        on_text: Option<Py<PyAny>>,
        ignore_eos: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(InvalidInput::new_err(format!(
                "top_p is {top_p}: give a value in (0, 1]"
            )));
        }
        let options = GenerateOptions {
            max_new_tokens,
            sampling: Sampling {
                temperature,
                top_p,
                seed,
            },
            eos: if ignore_eos {
                Vec::new()
            } else {
                self.text.folder.eos.clone()
            },
            max_seq_len: None,
        };
        let text_prompt: Option<String> = if prompt.is_instance_of::<PyString>() {
            Some(prompt.extract()?)
        } else {
            None
        };
        let ids: Vec<u32> = match &text_prompt {
            Some(_) => Vec::new(),
            None => prompt.extract().map_err(|_| {
                InvalidInput::new_err("the prompt is text (str) or token ids (a list of int)")
            })?,
        };
        let generation = py.detach(|| {
            let show = |piece: &str| {
                if let Some(cb) = &on_text {
                    Python::attach(|py| {
                        if let Err(e) = cb.call1(py, (piece,)) {
                            e.print(py);
                        }
                    });
                }
            };
            match (&self.host, &text_prompt) {
                (Host::Local(s), Some(t)) => self.text.generate(s.as_ref(), t, &options, show),
                (Host::Cluster(m), Some(t)) => self.text.generate(m.as_ref(), t, &options, show),
                (Host::Local(s), None) => {
                    vkml::generate::generate(s.as_ref(), &self.text.io, &ids, &options, |_| true)
                }
                (Host::Cluster(m), None) => {
                    vkml::generate::generate(m.as_ref(), &self.text.io, &ids, &options, |_| true)
                }
            }
            .map_err(gen_err)
        })?;
        let text = self
            .text
            .folder
            .decode(&generation.tokens)
            .map_err(gen_err)?;
        let out = PyDict::new(py);
        out.set_item("tokens", &generation.tokens)?;
        out.set_item("text", text)?;
        out.set_item("prompt_tokens", generation.prompt_tokens)?;
        out.set_item("prompt_tokens_per_s", generation.prompt_tokens_per_s())?;
        out.set_item("decode_tokens_per_s", generation.decode_tokens_per_s())?;
        out.set_item("stopped_at_eos", generation.stopped_at_eos)?;
        Ok(out)
    }
}
