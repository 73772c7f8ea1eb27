//! Text generation with a decoder-only language model exported to ONNX (Optimum's torch
//! export, ONNX Runtime GenAI's model builder): the prompt is run once (prefill), then one
//! token at a time, each step's `present` caches fed back as the next step's `past` inputs
//! ([`io::LlmIo`] finds which is which). The same loop drives a local [`Session`] and a model
//! on a cluster ([`RemoteModel`]), through [`StepModel`].
//!
//! A [`Session`] keeps a sequence's caches in a [`BoundState`]: on the GPU, in place, when the
//! model's past and present share one buffer (GenAI's `past_present_share_buffer` form, or
//! Optimum's growing caches as [`window`] rewrites them) and the plan is one GPU chunk; else
//! on the host, fed back step by step. On a cluster each node keeps the caches of the layers
//! it runs, the same way; see docs/LLM.md.

pub mod io;
mod last_logits;
pub mod sample;
#[cfg(test)]
mod tests;
mod text;
pub mod window;

use std::time::{Duration, Instant};

use half::slice::HalfFloatSliceExt;

use crate::distributed::DistError;
use crate::distributed::client::{RemoteModel, RemoteSequence};
use crate::session::{BoundState, Session};
use crate::tensor::{DType, Tensor};

pub use io::{CacheHints, CachePair, LlmIo, SharedCache};
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

/// `model` (the bytes of an .onnx file) as the loop runs it, or None when that is as it is:
/// growing caches made to stay in place ([`window`]), and the logits of the last position
/// only (last_logits.rs: a prompt's run otherwise makes and reads back a row of logits per
/// token). Each rewrite applies where the export allows it; the reasons one does not are
/// logged. `place_rows` false keeps growing caches as they are (a model whose masks hide keys
/// by position: a sliding window).
pub fn prepare(
    model: bytes::Bytes,
    place_rows: bool,
) -> Result<Option<bytes::Bytes>, GenerateError> {
    use prost::Message;
    let mut m = crate::onnx::proto::ModelProto::decode(model)
        .map_err(|e| GenerateError::Model(format!("the model cannot be decoded: {e}")))?;
    let Some(graph) = m.graph.as_mut() else {
        return Ok(None);
    };
    type Rewrite = fn(&mut crate::onnx::proto::GraphProto) -> Result<(), String>;
    let rewrites: [(&str, Rewrite, Result<(), &str>); 2] = [
        (
            "caches left growing",
            window::rewrite,
            if place_rows {
                Ok(())
            } else {
                Err("the model attends over a sliding window")
            },
        ),
        ("logits of every position", last_logits::rewrite, Ok(())),
    ];
    let mut changed = false;
    for (what, rewrite, allowed) in rewrites {
        if let Err(why) = allowed {
            tracing::debug!("{what}: {why}");
            continue;
        }
        let before = graph.clone();
        match rewrite(graph) {
            Ok(()) => changed = true,
            Err(why) => {
                tracing::debug!("{what}: {why}");
                *graph = before;
            }
        }
    }
    Ok(changed.then(|| bytes::Bytes::from(m.encode_to_vec())))
}

/// A model that runs one step of a sequence whose caches it keeps between steps.
pub trait StepModel: Send + Sync {
    /// What one sequence keeps between steps: its caches.
    type State: Send;

    /// A sequence whose caches (`pairs`: present output, past input) start as `initial`.
    fn begin(
        &self,
        pairs: &[(&str, &str)],
        initial: Vec<Tensor>,
    ) -> Result<Self::State, GenerateError>;

    /// Runs one step: `feeds` are the inputs other than the caches; the outputs other than
    /// the caches come back, and the presents become the next step's pasts.
    fn step(
        &self,
        state: &mut Self::State,
        feeds: &[(&str, Tensor)],
    ) -> Result<Vec<(String, Tensor)>, GenerateError>;
}

/// A session keeps a sequence's caches where its plan runs: in place in a GPU buffer when the
/// model's past and present share one (session/bound.rs), else on the host.
impl StepModel for Session {
    type State = BoundState;

    fn begin(
        &self,
        pairs: &[(&str, &str)],
        initial: Vec<Tensor>,
    ) -> Result<BoundState, GenerateError> {
        Ok(self.bind(pairs, initial)?)
    }

    fn step(
        &self,
        state: &mut BoundState,
        feeds: &[(&str, Tensor)],
    ) -> Result<Vec<(String, Tensor)>, GenerateError> {
        Ok(self.run_bound(state, feeds)?)
    }
}

/// On a cluster each node keeps the caches of the layers it runs (docs/CLUSTER.md,
/// "Sequences"): a step sends the token and brings back the logits.
impl StepModel for RemoteModel {
    type State = RemoteSequence;

    fn begin(
        &self,
        pairs: &[(&str, &str)],
        initial: Vec<Tensor>,
    ) -> Result<RemoteSequence, GenerateError> {
        Ok(self.begin_sequence(pairs, initial)?)
    }

    fn step(
        &self,
        state: &mut RemoteSequence,
        feeds: &[(&str, Tensor)],
    ) -> Result<Vec<(String, Tensor)>, GenerateError> {
        Ok(state.step(feeds)?)
    }
}

/// One sequence being generated: its tokens so far and its caches.
pub struct Sequence<'m, M: StepModel + ?Sized> {
    model: &'m M,
    io: &'m LlmIo,
    state: M::State,
    len: usize,
    /// The most tokens it may hold.
    max_len: Option<usize>,
    /// A shared cache's length (its buffer's rows); 0 for a growing one.
    rows: usize,
    /// With a write index (window.rs): the rows the first feed took, at the buffer's end.
    end_rows: usize,
}

impl<'m, M: StepModel + ?Sized> Sequence<'m, M> {
    /// An empty sequence. `max_len` bounds prompt plus generation; a cache that past and
    /// present share (GenAI's `past_present_share_buffer`) is allocated at that length once,
    /// so it needs one (or the model's fixed cache length).
    pub fn new(
        model: &'m M,
        io: &'m LlmIo,
        max_len: Option<usize>,
    ) -> Result<Sequence<'m, M>, GenerateError> {
        let (rows, max_len) = match io.shared_cache {
            SharedCache::No => (0, max_len),
            SharedCache::Fixed(n) => (n, Some(max_len.map_or(n, |m| m.min(n)))),
            SharedCache::Yes => {
                let n = max_len.ok_or_else(|| {
                    GenerateError::Model(
                        "the model's past and present caches share one buffer, allocated once: \
                         give the sequence's greatest length (--max-seq-len)"
                            .into(),
                    )
                })?;
                (n, Some(n))
            }
        };
        let initial = io
            .caches
            .iter()
            .map(|c| Tensor::zeros(c.dtype, vec![1, c.heads, rows, c.head_size]))
            .collect();
        let pairs: Vec<(&str, &str)> = io
            .caches
            .iter()
            .map(|c| (c.present.as_str(), c.past.as_str()))
            .collect();
        Ok(Sequence {
            model,
            io,
            state: model.begin(&pairs, initial)?,
            len: 0,
            max_len,
            rows,
            end_rows: 0,
        })
    }

    /// Tokens in the caches.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sequence's caches state (for a [`Session`], where they are).
    pub fn state(&self) -> &M::State {
        &self.state
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
        // Placed rows (window.rs): after the first feed, tokens go one at a time, which is
        // where a query's causal mask spans the whole buffer.
        if self.io.write_index.is_some() && start > 0 && ids.len() > 1 {
            let mut last = Vec::new();
            for &id in ids {
                last = self.feed(&[id])?;
            }
            return Ok(last);
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
        let write_at = io.write_index.as_ref().map(|name| {
            if start == 0 {
                self.end_rows = ids.len();
            }
            let at = if start == 0 {
                self.rows - ids.len()
            } else {
                start - self.end_rows
            };
            (name, at)
        });
        if let Some((name, dtype)) = &io.attention_mask {
            // A shared cache's mask spans the whole buffer: ones over the rows in use, the
            // tokens so far in order, or placed as window.rs says.
            let width = match io.shared_cache {
                SharedCache::No => total,
                _ => self.rows,
            };
            let in_use = |j: usize| match write_at {
                None => j < total,
                Some(_) => j < total - self.end_rows || j >= self.rows - self.end_rows,
            };
            let mask = (0..width).map(|j| i64::from(in_use(j))).collect();
            feeds.push((name, ints(*dtype, vec![1, width], mask)));
        }
        if let Some((name, at)) = write_at {
            feeds.push((name, Tensor::from_vec(vec![1], vec![at as i64])));
        }
        if let Some((name, dtype)) = &io.position_ids {
            let pos = (start as i64..total as i64).collect();
            feeds.push((name, ints(*dtype, vec![1, ids.len()], pos)));
        }
        tracing::trace!("step of {} token(s) after {start}: starts", ids.len());
        let mut outputs = self.model.step(&mut self.state, &feeds)?;
        tracing::trace!("step: outputs here");
        let i = outputs
            .iter()
            .position(|(n, _)| *n == io.logits)
            .ok_or_else(|| {
                GenerateError::Model(format!("the run returned no output '{}'", io.logits))
            })?;
        let logits = outputs.swap_remove(i).1;
        self.len = total;
        let last = last_row(&logits, ids.len());
        tracing::trace!("step: last row of the logits taken");
        last
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
    // Only the last row is converted: a prompt's logits are prompt x vocab values.
    let width = vocab * logits.dtype().size();
    let row = logits.bytes().slice((rows - 1) * width..rows * width);
    let last = Tensor::from_bytes(logits.dtype(), vec![vocab], row).map_err(crate::Error::from)?;
    Ok(match logits.dtype() {
        // A Llama vocabulary is 128k values a token: the slice conversion (F16C where the
        // CPU has it) rather than one value at a time.
        DType::F16 => {
            let halves = last.view::<half::f16>().map_err(crate::Error::from)?;
            let mut out = vec![0f32; halves.len()];
            halves.convert_to_f32_slice(&mut out);
            out
        }
        DType::F32 => last.view::<f32>().map_err(crate::Error::from)?.into_owned(),
        _ => last
            .to_f64_vec()
            .map_err(crate::Error::from)?
            .into_iter()
            .map(|v| v as f32)
            .collect(),
    })
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Tokens that end the generation (not emitted). Empty: none.
    pub eos: Vec<u32>,
    /// Prompt plus generation at most this long; for a cache that past and present share, its
    /// length (default: the prompt plus `max_new_tokens`).
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
    // A cache allocated once is as long as this generation can get.
    let max_len = match io.shared_cache {
        SharedCache::Yes => Some(
            options
                .max_seq_len
                .unwrap_or(prompt.len() + options.max_new_tokens),
        ),
        _ => options.max_seq_len,
    };
    let mut seq = Sequence::new(model, io, max_len)?;
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
