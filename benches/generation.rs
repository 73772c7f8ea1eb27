//! Generation speed of a language model folder (benches/llm/llama.py makes Llama-shaped ones):
//! for each prompt length, prefill tokens/s and decode tokens/s of greedy generation through
//! `vkml::generate` on one `Session`, after one untimed generation of the same lengths (which
//! plans, records and compiles). Prints one JSON object per prompt length; the median of the
//! timed runs.
//!
//!     cargo bench --bench generation -- DIR [--device vulkan:0] [--prompt 128,2048] [--decode 64] [--runs 3]
//!
//! The prompt is `prompt` ids drawn from a fixed sequence; generation ignores end-of-sequence
//! tokens, so every run makes `decode` tokens.

use std::path::PathBuf;
use std::time::Instant;

use vkml::generate::{GenerateOptions, Generation, LlmIo, ModelFolder, generate};
use vkml::{DeviceSelection, Session, SessionOptions};

struct Args {
    dir: PathBuf,
    device: DeviceSelection,
    prompts: Vec<usize>,
    decode: usize,
    runs: usize,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut args = Args {
        dir: PathBuf::new(),
        device: DeviceSelection::Auto,
        prompts: vec![128],
        decode: 64,
        runs: 3,
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
            _ if a.starts_with('-') => return Err(format!("unknown option {a}")),
            _ => args.dir = PathBuf::from(a),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err(
            "usage: generation DIR [--device D] [--prompt N,M] [--decode N] [--runs N]".into(),
        );
    }
    Ok(args)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let folder = ModelFolder::open(&args.dir).unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let session = Session::load(
        &folder.model,
        SessionOptions {
            devices: args.device,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let load_s = t.elapsed().as_secs_f64();
    let io = LlmIo::detect_with(&session.inputs(), &session.outputs(), &folder.hints)
        .unwrap_or_else(|e| panic!("{e}"));
    let vocab = 1000u32;
    for &prompt in &args.prompts {
        let ids: Vec<u32> = (0..prompt as u32).map(|i| 3 + (i * 7919) % vocab).collect();
        let options = GenerateOptions {
            max_new_tokens: args.decode,
            sampling: Default::default(),
            eos: Vec::new(),
            max_seq_len: Some(prompt + args.decode),
        };
        let run = || -> Generation {
            generate(&session, &io, &ids, &options, |_| true).unwrap_or_else(|e| panic!("{e}"))
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
            })
        );
    }
}
