//! Generation speed of a language model folder (benches/llm/llama.py makes Llama-shaped ones):
//! for each prompt length, prefill tokens/s and decode tokens/s of greedy generation through
//! `vkml::generate` on one `Session`, after one untimed generation of the same lengths (which
//! plans, records and compiles). Prints one JSON object per prompt length; the median of the
//! timed runs.
//!
//!     cargo bench --bench generation -- DIR [--device vulkan:0] [--prompt 128,2048] [--decode 64] [--runs 3] [--profile] [--device-memory-limit BYTES]
//!
//! `--device-memory-limit` caps every device's budget, as `vkml-node run` does: with
//! `--device vulkan` on a machine with several GPUs, it splits the model over them.
//!
//! `VKML_*` variables set the tuning as for `vkml-node` (e.g. `VKML_GEMV=off`). `--profile`
//! loads the model once per prompt length with op profiling on (GPU ops timed by timestamps
//! between dispatches, which slows the runs down: its tokens/s are not the figures to quote)
//! and prints, after each JSON line, the time of the prompt's run and of a decode step by op
//! type, and of a decode step by GPU kernel.
//!
//! The prompt is `prompt` ids drawn from a fixed sequence; generation ignores end-of-sequence
//! tokens, so every run makes `decode` tokens.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use vkml::generate::{GenerateOptions, Generation, LlmIo, ModelFolder, generate};
use vkml::{DeviceSelection, Session, SessionOptions, Tuning};

struct Args {
    dir: PathBuf,
    device: DeviceSelection,
    prompts: Vec<usize>,
    decode: usize,
    runs: usize,
    profile: bool,
    limit: Option<u64>,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut args = Args {
        dir: PathBuf::new(),
        device: DeviceSelection::Auto,
        prompts: vec![128],
        decode: 64,
        runs: 3,
        profile: false,
        limit: None,
    };
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--device" => args.device = value()?.parse()?,
            "--prompt" => {
                args.prompts = value()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--prompt: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--decode" => args.decode = value()?.parse().map_err(|e| format!("--decode: {e}"))?,
            "--runs" => args.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--profile" => args.profile = true,
            "--device-memory-limit" => {
                let v = value()?;
                let bytes: f64 = v
                    .parse()
                    .map_err(|e| format!("--device-memory-limit: {e}"))?;
                args.limit = Some(bytes as u64);
            }
            _ if a.starts_with('-') => return Err(format!("unknown option {a}")),
            _ => args.dir = PathBuf::from(a),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err(
            "usage: generation DIR [--device D] [--prompt N,M] [--decode N] [--runs N] [--profile]"
                .into(),
        );
    }
    Ok(args)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `VKML_*` settings of the environment, as `vkml-node` reads them (for A/B runs).
fn tuning() -> Tuning {
    let (tuning, warnings) = Tuning::from_vars(std::env::vars());
    for w in warnings {
        eprintln!("warning: {w}");
    }
    tuning
}

/// The folder's model as `vkml-node generate` loads it (Optimum's growing caches rewritten to
/// stay in place: generate/window.rs), with its roles and the seconds loading took.
fn load(folder: &ModelFolder, args: &Args) -> (Session, LlmIo, f64) {
    let t = Instant::now();
    let (session, io) = folder
        .load_session(SessionOptions {
            devices: args.device,
            device_memory_limit: args.limit,
            profile: args.profile,
            tuning: tuning(),
        })
        .unwrap_or_else(|e| panic!("{e}"));
    (session, io, t.elapsed().as_secs_f64())
}

/// A prompt's run and a decode step, their op times by op type, largest first. The decode
/// plan's ops are those that ran more often than the prompt's (once per generation).
fn print_profile(session: &Session, generations: usize) {
    let times = session.profile();
    for (what, decode) in [("the prompt", false), ("a decode step", true)] {
        let mut by_type: BTreeMap<(String, bool), (f64, usize)> = BTreeMap::new();
        for t in times.iter().filter(|t| (t.runs > generations) == decode) {
            let e = by_type.entry((t.op_type.clone(), t.gpu)).or_default();
            e.0 += t.median_us;
            e.1 += 1;
        }
        let total: f64 = by_type.values().map(|v| v.0).sum();
        let mut rows: Vec<_> = by_type.into_iter().collect();
        rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
        println!("{what} by op type (sum of per-node medians {total:.0} us):");
        for ((op, gpu), (us, nodes)) in rows {
            let on = if gpu { "gpu" } else { "cpu" };
            println!(
                "  {op:<36} {on}  {nodes:>4} nodes  {us:>9.1} us  {:>5.1}%",
                100.0 * us / total.max(f64::MIN_POSITIVE)
            );
        }
    }
    print_node_classes(&times, generations);
    // The plan run most often is the decode step's.
    if let Some(kernels) = session
        .kernel_profile()
        .into_iter()
        .max_by_key(|k| k.first().map_or(0, |t| t.runs))
    {
        println!("a decode step by GPU kernel:");
        for k in kernels {
            println!(
                "  {:<36} {:>5} dispatches  {:>9.1} us",
                k.kernel, k.dispatches, k.median_us
            );
        }
    }
}

/// A decode step's nodes by name with their numbers folded (the same projection of every
/// layer together), largest first: where within an op type the time goes.
fn print_node_classes(times: &[vkml::NodeTime], generations: usize) {
    let mut classes: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for t in times.iter().filter(|t| t.runs > generations) {
        let mut name: String = t.node.chars().filter(|c| !c.is_ascii_digit()).collect();
        name.push_str(&format!(" ({})", t.op_type));
        let e = classes.entry(name).or_default();
        e.0 += t.median_us;
        e.1 += 1;
    }
    let mut rows: Vec<_> = classes.into_iter().collect();
    rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!("a decode step by node, numbers folded (largest 16):");
    for (name, (us, nodes)) in rows.into_iter().take(16) {
        let each = us / nodes as f64;
        println!("  {name:<60} {nodes:>4} nodes  {us:>9.1} us  {each:>7.1} us each");
    }
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // RUST_LOG=vkml::exec=trace,vkml::generate=trace shows where a step's time goes (a GPU
    // chunk submitted, completed, its results read back; the step's start and end).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let folder = ModelFolder::open(&args.dir).unwrap_or_else(|e| panic!("{e}"));
    // Profiled, each prompt length gets a session of its own, so that each table covers
    // that length's plans alone.
    let mut loaded = (!args.profile).then(|| load(&folder, &args));
    let vocab = 1000u32;
    for &prompt in &args.prompts {
        if loaded.is_none() {
            loaded = Some(load(&folder, &args));
        }
        let (session, io, load_s) = loaded
            .as_ref()
            .map(|(s, io, t)| (s, io, *t))
            .expect("loaded");
        let ids: Vec<u32> = (0..prompt as u32).map(|i| 3 + (i * 7919) % vocab).collect();
        let options = GenerateOptions {
            max_new_tokens: args.decode,
            sampling: Default::default(),
            eos: Vec::new(),
            max_seq_len: Some(prompt + args.decode),
        };
        let run = || -> Generation {
            generate(session, io, &ids, &options, |_| true).unwrap_or_else(|e| panic!("{e}"))
        };
        let t = Instant::now();
        run();
        let warm_s = t.elapsed().as_secs_f64();
        let runs: Vec<Generation> = (0..args.runs).map(|_| run()).collect();
        let prefill = median(runs.iter().map(|g| g.prompt_tokens_per_s()).collect());
        let decode = median(runs.iter().map(|g| g.decode_tokens_per_s()).collect());
        println!(
            "{}",
            serde_json::json!({
                "model": args.dir.display().to_string(),
                "prompt": prompt,
                "decode_tokens": args.decode,
                "prefill_tokens_per_s": prefill,
                "decode_tokens_per_s": decode,
                "load_s": load_s,
                "first_generation_s": warm_s,
                "runs": args.runs,
                "profiled": args.profile,
            })
        );
        if args.profile {
            print_profile(session, args.runs + 1);
            // The next prompt length loads its own session.
            loaded = None;
        }
    }
}
