//! Text generation with a decoder-only language model exported to ONNX (Optimum's torch
//! export, ONNX Runtime GenAI's model builder): the prompt is run once (prefill), then one
//! token at a time, each step's `present` caches fed back as the next step's `past` inputs
//! ([`io::LlmIo`] finds which is which). The same loop drives a local [`Session`] and a model
//! on a cluster ([`RemoteModel`]), through [`StepModel`].
//!
//! Today a step's caches come back to the caller and go out again with the next step (on a
//! cluster, through the submitting node): correct, but every step moves the whole cache.
//! Keeping each layer's cache on the device (and node) that produced it is the next step of
//! this module; see docs/LLM.md.

pub mod io;
pub mod sample;
#[cfg(test)]
mod tests;
mod text;

use std::time::{Duration, Instant};

use crate::distributed::DistError;
use crate::distributed::client::RemoteModel;
use crate::session::Session;
use crate::tensor::{DType, Tensor};

pub use io::{CacheHints, CachePair, LlmIo};
pub use sample::{Sampler, Sampling};
pub use text::{ModelFolder, TextGenerator};

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The model's inputs or outputs are not those of a language model this loop can drive.
    #[error("{0}")]
    Model(String),
    #[error(transparent)]
    Run(#[from] crate::Error),
    #[error(transparent)]
    Remote(#[from] DistError),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("the prompt is empty: give at least one token")]
    EmptyPrompt,
    #[error("the sequence would be {wanted} tokens, over the limit of {limit} (--max-seq-len)")]
    TooLong { wanted: usize, limit: usize },
}

/// A model that runs one step: named inputs in, named outputs back.
pub trait StepModel: Send + Sync {
    fn run_step(&self, feeds: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>, GenerateError>;
}

impl StepModel for Session {
    fn run_step(&self, feeds: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>, GenerateError> {
        Ok(self.run(feeds)?)
    }
}

impl StepModel for RemoteModel {
    fn run_step(&self, feeds: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>, GenerateError> {
        Ok(self.run(feeds)?.outputs)
    }
}

/// One sequence being generated: its tokens so far and its caches.
pub struct Sequence<'m, M: StepModel + ?Sized> {
    model: &'m M,
    io: &'m LlmIo,
    caches: Vec<Tensor>,
    len: usize,
    max_len: Option<usize>,
}

impl<'m, M: StepModel + ?Sized> Sequence<'m, M> {
    /// An empty sequence: caches of length 0. `max_len` bounds prompt plus generation.
    pub fn new(model: &'m M, io: &'m LlmIo, max_len: Option<usize>) -> Sequence<'m, M> {
        let caches = io
            .caches
            .iter()
            .map(|c| Tensor::zeros(c.dtype, vec![1, c.heads, 0, c.head_size]))
            .collect();
        Sequence {
            model,
            io,
            caches,
            len: 0,
            max_len,
        }
    }

    /// Tokens in the caches.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Runs `ids` after the tokens so far; returns the logits of the last one.
    pub fn feed(&mut self, ids: &[u32]) -> Result<Vec<f32>, GenerateError> {
        if ids.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let (start, total) = (self.len, self.len + ids.len());
        if let Some(limit) = self.max_len.filter(|&l| total > l) {
            return Err(GenerateError::TooLong {
                wanted: total,
                limit,
            });
        }
        let io = self.io;
        let ints = |dtype: DType, shape: Vec<usize>, v: Vec<i64>| match dtype {
            DType::I32 => Tensor::from_vec(shape, v.into_iter().map(|x| x as i32).collect()),
            _ => Tensor::from_vec(shape, v),
        };
        let tokens: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
        let mut feeds = vec![(
            io.input_ids.as_str(),
            ints(io.ids_dtype, vec![1, ids.len()], tokens),
        )];
        if let Some((name, dtype)) = &io.attention_mask {
            feeds.push((name, ints(*dtype, vec![1, total], vec![1; total])));
        }
        if let Some((name, dtype)) = &io.position_ids {
            let pos = (start as i64..total as i64).collect();
            feeds.push((name, ints(*dtype, vec![1, ids.len()], pos)));
        }
        for (c, t) in io.caches.iter().zip(std::mem::take(&mut self.caches)) {
            feeds.push((&c.past, t));
        }
        let mut outputs = self.model.run_step(&feeds)?;
        let mut take = |name: &str| {
            let i = outputs.iter().position(|(n, _)| n == name).ok_or_else(|| {
                GenerateError::Model(format!("the run returned no output '{name}'"))
            })?;
            Ok::<Tensor, GenerateError>(outputs.swap_remove(i).1)
        };
        let logits = take(&io.logits)?;
        let mut caches = Vec::with_capacity(io.caches.len());
        for c in &io.caches {
            let t = take(&c.present)?;
            if t.shape() != [1, c.heads, total, c.head_size] {
                return Err(GenerateError::Model(format!(
                    "output '{}' has shape {:?}; [1, {}, {total}, {}] expected: the model's \
                     cache does not grow by the tokens fed",
                    c.present,
                    t.shape(),
                    c.heads,
                    c.head_size
                )));
            }
            caches.push(t);
        }
        self.caches = caches;
        self.len = total;
        last_row(&logits, ids.len())
    }
}

/// The logits of the last position of `[1, n, vocab]` (or `[1, vocab]`), as f32.
fn last_row(logits: &Tensor, n: usize) -> Result<Vec<f32>, GenerateError> {
    let shape = logits.shape();
    let vocab = *shape.last().unwrap_or(&0);
    let rows = logits.numel().checked_div(vocab).unwrap_or(0);
    if vocab == 0 || !(rows == n || rows == 1) {
        return Err(GenerateError::Model(format!(
            "logits of shape {shape:?} for {n} token(s): [1, {n}, vocab] expected"
        )));
    }
    let all = logits.to_f64_vec().map_err(crate::Error::from)?;
    Ok(all[(rows - 1) * vocab..]
        .iter()
        .map(|&v| v as f32)
        .collect())
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Tokens that end the generation (not emitted). Empty: none.
    pub eos: Vec<u32>,
    /// Prompt plus generation at most this long.
    pub max_seq_len: Option<usize>,
}

/// A generation's tokens and timings.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub prompt_tokens: usize,
    pub prefill: Duration,
    /// The steps after the prefill (the first token comes from the prefill).
    pub decode: Duration,
    pub stopped_at_eos: bool,
}

impl Generation {
    pub fn prompt_tokens_per_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    /// Tokens made by decode steps per second (all but the first).
    pub fn decode_tokens_per_s(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// Generates up to `max_new_tokens` after `prompt`, calling `on_token` with each as it is
/// made; `on_token` returning false stops early.
pub fn generate<M: StepModel + ?Sized>(
    model: &M,
    io: &LlmIo,
    prompt: &[u32],
    options: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Generation, GenerateError> {
    let mut seq = Sequence::new(model, io, options.max_seq_len);
    let mut sampler = Sampler::new(options.sampling);
    let mut out = Generation {
        tokens: Vec::new(),
        prompt_tokens: prompt.len(),
        prefill: Duration::ZERO,
        decode: Duration::ZERO,
        stopped_at_eos: false,
    };
    if options.max_new_tokens == 0 {
        return Ok(out);
    }
    let t = Instant::now();
    let mut logits = seq.feed(prompt)?;
    out.prefill = t.elapsed();
    let t = Instant::now();
    loop {
        let token = sampler.next(&logits);
        if options.eos.contains(&token) {
            out.stopped_at_eos = true;
            break;
        }
        out.tokens.push(token);
        if !on_token(token) || out.tokens.len() == options.max_new_tokens {
            break;
        }
        logits = seq.feed(&[token])?;
    }
    out.decode = t.elapsed();
    Ok(out)
}
