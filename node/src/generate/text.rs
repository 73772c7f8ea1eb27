//! A model folder as exporters write it (model.onnx beside tokenizer.json and a config that
//! names the end-of-sequence tokens), and generation from text to text.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokenizers::Tokenizer;

use crate::distributed::client::{ClusterClient, RemoteModel};
use crate::session::{Session, SessionOptions};
use vkml_protocol::pb::LoadProgress;

use super::{CacheHints, GenerateError, GenerateOptions, Generation, LlmIo, StepModel, generate};

/// The files of a model folder.
pub struct ModelFolder {
    pub model: PathBuf,
    pub tokenizer: Tokenizer,
    /// From generation_config.json, config.json or genai_config.json, the first that names
    /// them.
    pub eos: Vec<u32>,
    /// Cache sizes from genai_config.json or config.json, for [`LlmIo::detect_with`].
    pub hints: CacheHints,
    /// config.json gives the model a sliding attention window: its masks hide keys by
    /// position, so the rows of a growing cache cannot be placed out of order (window.rs).
    pub sliding_window: bool,
}

fn file_err(path: &Path, message: impl ToString) -> GenerateError {
    GenerateError::File {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

impl ModelFolder {
    /// Reads `dir`: `model.onnx` (or the folder's only .onnx file) and `tokenizer.json`.
    pub fn open(dir: &Path) -> Result<ModelFolder, GenerateError> {
        let model = find_model(dir)?;
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(file_err(
                dir,
                "no tokenizer.json here: export the model with its tokenizer (Hugging Face's \
                 tokenizer.json format)",
            ));
        }
        let tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| file_err(&tok_path, e))?;
        Ok(ModelFolder {
            model,
            tokenizer,
            eos: eos_tokens(dir)?,
            hints: cache_hints(dir)?,
            sliding_window: sliding_window(dir),
        })
    }

    /// The model's bytes as the loop runs it ([`super::prepare`]: growing caches made to
    /// stay in place, the logits of the last position only, where the export allows), else
    /// as the file has them.
    pub fn model_bytes(&self) -> Result<Bytes, GenerateError> {
        Ok(self.prepared()?.0)
    }

    /// The model's bytes as the loop runs it, and whether [`super::prepare`] rewrote them
    /// (else they are the file's, mapped when large).
    fn prepared(&self) -> Result<(Bytes, bool), GenerateError> {
        let (data, _) = crate::onnx::read_file(&self.model, crate::onnx::COPY_BELOW)
            .map_err(|e| file_err(&self.model, e))?;
        Ok(match super::prepare(data.clone(), !self.sliding_window)? {
            Some(rewritten) => (rewritten, true),
            None => (data, false),
        })
    }

    /// A session of the folder's model ([`ModelFolder::model_bytes`]) and its roles.
    pub fn load_session(&self, options: SessionOptions) -> Result<(Session, LlmIo), GenerateError> {
        let session = match self.prepared()? {
            (data, true) => Session::load_bytes(&self.model, data, options)?,
            // Loaded from its file, which the session maps and checks before each run.
            (_, false) => Session::load(&self.model, options)?,
        };
        let io = LlmIo::detect_with(&session.inputs(), &session.outputs(), &self.hints)?;
        Ok((session, io))
    }

    /// The folder's model ([`ModelFolder::model_bytes`]) loaded on a cluster, and its roles.
    pub fn load_on(
        &self,
        cluster: &ClusterClient,
        progress: impl FnMut(&LoadProgress),
    ) -> Result<(RemoteModel, LlmIo), GenerateError> {
        let (data, true) = self.prepared()? else {
            let def = crate::onnx::load(&self.model).map_err(|e| file_err(&self.model, e))?;
            let io = LlmIo::detect_with(&def.graph.inputs, &def.graph.outputs, &self.hints)?;
            drop(def);
            return Ok((cluster.load(&self.model, progress)?, io));
        };
        let dir = crate::onnx::model_dir(&self.model);
        let def = crate::onnx::load_from_bytes(data.clone(), Some(&dir))
            .map_err(|e| file_err(&self.model, e))?;
        let io = LlmIo::detect_with(&def.graph.inputs, &def.graph.outputs, &self.hints)?;
        drop(def);
        Ok((cluster.load_bytes(&self.model, data, progress)?, io))
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, GenerateError> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| GenerateError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, GenerateError> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| GenerateError::Tokenizer(e.to_string()))
    }
}

fn find_model(dir: &Path) -> Result<PathBuf, GenerateError> {
    let preferred = dir.join("model.onnx");
    if preferred.is_file() {
        return Ok(preferred);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| file_err(dir, e))?;
    let onnx: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    match onnx.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(file_err(dir, "no .onnx model in this folder")),
        _ => Err(file_err(
            dir,
            "several .onnx files and no model.onnx: name the one to run model.onnx",
        )),
    }
}

/// Whether config.json sets a sliding attention window that is in use (Mistral's and
/// Qwen2's `sliding_window`, unless `use_sliding_window` is false).
fn sliding_window(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("config.json")) else {
        return false;
    };
    let Ok(c) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    c["sliding_window"].as_u64().is_some() && c["use_sliding_window"].as_bool() != Some(false)
}

/// `eos_token_id` (a number or a list) of the first config file that has one.
fn eos_tokens(dir: &Path) -> Result<Vec<u32>, GenerateError> {
    let sources: [(&str, &[&str]); 3] = [
        ("generation_config.json", &["eos_token_id"]),
        ("config.json", &["eos_token_id"]),
        ("genai_config.json", &["model", "eos_token_id"]),
    ];
    for (file, path) in sources {
        let p = dir.join(file);
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| file_err(&p, e))?;
        let value = path.iter().try_fold(&json, |v, k| v.get(k));
        let ids: Vec<u32> = match value {
            Some(serde_json::Value::Number(n)) => {
                n.as_u64().into_iter().map(|n| n as u32).collect()
            }
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64().map(|n| n as u32))
                .collect(),
            _ => continue,
        };
        if !ids.is_empty() {
            return Ok(ids);
        }
    }
    Ok(Vec::new())
}

/// Key/value heads and head size: genai_config.json's decoder, else config.json's
/// `num_key_value_heads` (or `num_attention_heads`) and `head_dim` (or hidden size / heads).
fn cache_hints(dir: &Path) -> Result<CacheHints, GenerateError> {
    let read = |file: &str| -> Result<Option<serde_json::Value>, GenerateError> {
        let p = dir.join(file);
        match std::fs::read_to_string(&p) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| file_err(&p, e)),
            Err(_) => Ok(None),
        }
    };
    let num =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_u64()).map(|n| n as usize);
    if let Some(g) = read("genai_config.json")? {
        let d = &g["model"]["decoder"];
        return Ok(CacheHints {
            heads: num(d, "num_key_value_heads"),
            head_size: num(d, "head_size"),
            shared: g["search"]["past_present_share_buffer"].as_bool() == Some(true),
        });
    }
    let Some(c) = read("config.json")? else {
        return Ok(CacheHints::default());
    };
    let q_heads = num(&c, "num_attention_heads");
    let head_size = num(&c, "head_dim").or_else(|| Some(num(&c, "hidden_size")? / q_heads?));
    Ok(CacheHints {
        heads: num(&c, "num_key_value_heads").or(q_heads),
        head_size,
        shared: false,
    })
}

/// Text in, text out, over any [`StepModel`].
pub struct TextGenerator {
    pub folder: ModelFolder,
    pub io: LlmIo,
}

impl TextGenerator {
    /// Generates after `prompt`, calling `on_text` with each new piece of text as it is made
    /// (the decoded text grows; only the new end is passed).
    pub fn generate<M: StepModel + ?Sized>(
        &self,
        model: &M,
        prompt: &str,
        options: &GenerateOptions,
        mut on_text: impl FnMut(&str),
    ) -> Result<Generation, GenerateError> {
        let ids = self.folder.encode(prompt)?;
        let mut made: Vec<u32> = Vec::new();
        let mut shown = 0;
        let mut failed = None;
        let out = generate(model, &self.io, &ids, options, |t| {
            made.push(t);
            match self.folder.decode(&made) {
                // A token may end inside a character: wait until the text is whole.
                Ok(text) if !text.ends_with('\u{fffd}') && text.len() >= shown => {
                    if let Some(new) = text.get(shown..) {
                        on_text(new);
                        shown = text.len();
                    }
                    true
                }
                Ok(_) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        // The end may stop inside a character, held back above: pass what is left.
        let text = self.folder.decode(&made)?;
        if let Some(rest) = text.get(shown..).filter(|r| !r.is_empty()) {
            on_text(rest);
        }
        Ok(out)
    }
}
