//! `vkml-node generate MODEL_DIR --prompt TEXT`: text generation with a language model export,
//! on this machine or (with --to) on a cluster.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use vkml::generate::{
    GenerateOptions, Generation, ModelFolder, Sampling, StepModel, TextGenerator, generate,
};
use vkml::{DeviceSelection, SessionOptions};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The model folder: model.onnx (or its only .onnx file), tokenizer.json, and optionally
    /// generation_config.json / config.json / genai_config.json (end-of-sequence tokens).
    pub model_dir: PathBuf,
    /// The text to continue.
    #[arg(long, required_unless_present = "prompt_ids")]
    pub prompt: Option<String>,
    /// The prompt as token ids (comma-separated) instead of text.
    #[arg(long, value_delimiter = ',', conflicts_with = "prompt")]
    pub prompt_ids: Option<Vec<u32>>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy (the most likely token every step).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling: draw from the most likely tokens whose probabilities sum to P.
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    pub top_p: f32,
    /// Seed of the sampler (the same seed, prompt and model give the same text).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prompt plus generation at most this many tokens. A model whose past and present caches
    /// share one buffer (GenAI's form, or Optimum's as the loop rewrites it) allocates its
    /// caches at this length once (default: the prompt plus --max-tokens).
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    /// Keep generating past the end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object (prompt ids, generated ids, text, rates) instead of streaming.
    #[arg(long)]
    pub json: bool,
    /// auto (every GPU and the CPU), cpu, vulkan, or vulkan:N. Ignored with --to.
    #[arg(long, default_value = "auto")]
    pub device: DeviceSelection,
    /// Generate on the cluster this member (host:port) belongs to.
    #[arg(long, value_name = "ADDR")]
    pub to: Option<String>,
    /// The cluster secret (with --to).
    #[arg(long, value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,
    /// Talk to an --insecure (loopback) cluster.
    #[arg(long)]
    pub insecure: bool,
}

pub fn generate_cmd(args: GenerateArgs) -> Result<()> {
    let folder = ModelFolder::open(&args.model_dir)?;
    let options = GenerateOptions {
        max_new_tokens: args.max_tokens,
        sampling: Sampling {
            temperature: args.temperature,
            top_p: args.top_p,
            seed: args.seed,
        },
        eos: if args.ignore_eos {
            Vec::new()
        } else {
            folder.eos.clone()
        },
        max_seq_len: args.max_seq_len,
    };
    if !(args.top_p > 0.0 && args.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1], got {}", args.top_p);
    }
    let Some(to) = args.to.clone() else {
        let (session, io) = folder
            .load_session(SessionOptions {
                devices: args.device,
                ..Default::default()
            })
            .with_context(|| format!("cannot load {}", folder.model.display()))?;
        return run(&session, TextGenerator { folder, io }, &args, &options);
    };
    let secret = super::secret_for_tool(args.cluster_key.as_deref(), args.insecure, "generate")?;
    let cluster = vkml::distributed::client::ClusterClient::connect(&to, &secret)
        .with_context(|| format!("cannot reach {to}"))?;
    let (model, io) = folder
        .load_on(&cluster, |_| {})
        .with_context(|| format!("cannot load {} on the cluster", folder.model.display()))?;
    let result = run(&model, TextGenerator { folder, io }, &args, &options);
    let unloaded = model.unload();
    cluster.close();
    result?;
    unloaded.context("cannot unload the model")?;
    Ok(())
}

fn run<M: StepModel>(
    model: &M,
    text: TextGenerator,
    args: &GenerateArgs,
    options: &GenerateOptions,
) -> Result<()> {
    let prompt_ids = match (&args.prompt_ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(p)) => text.folder.encode(p)?,
        (None, None) => bail!("give --prompt TEXT or --prompt-ids IDS"),
    };
    if args.json {
        let out = generate(model, &text.io, &prompt_ids, options, |_| true)?;
        let json = serde_json::json!({
            "prompt_ids": prompt_ids,
            "ids": out.tokens,
            "text": text.folder.decode(&out.tokens)?,
            "stopped_at_eos": out.stopped_at_eos,
            "prompt_tokens_per_s": out.prompt_tokens_per_s(),
            "decode_tokens_per_s": out.decode_tokens_per_s(),
        });
        println!("{json}");
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    if let Some(p) = &args.prompt {
        write!(stdout, "{p}")?;
        stdout.flush()?;
    }
    let out = match &args.prompt_ids {
        Some(_) => generate(model, &text.io, &prompt_ids, options, |t| {
            let piece = text.folder.decode(&[t]).unwrap_or_default();
            let _ = write!(stdout, "{piece}").and_then(|_| stdout.flush());
            true
        })?,
        None => text.generate(
            model,
            args.prompt.as_deref().unwrap_or(""),
            options,
            |piece| {
                let _ = write!(stdout, "{piece}").and_then(|_| stdout.flush());
            },
        )?,
    };
    writeln!(stdout)?;
    report(&out);
    Ok(())
}

fn report(out: &Generation) {
    eprintln!(
        "prompt: {} tokens in {:.1} ms ({:.1} tokens/s); generated: {} tokens, {:.1} tokens/s{}",
        out.prompt_tokens,
        out.prefill.as_secs_f64() * 1e3,
        out.prompt_tokens_per_s(),
        out.tokens.len(),
        out.decode_tokens_per_s(),
        if out.stopped_at_eos {
            " (stopped at the end-of-sequence token)"
        } else {
            ""
        }
    );
}
