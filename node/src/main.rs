//! `vkml-node`: run ONNX models on this machine's GPUs and CPU, or serve them to a cluster.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use vkml::io::Value;
use vkml::{DeviceSelection, Session, SessionOptions};

// See Cargo.toml: glibc's allocator hands the heap's top back after every small CPU run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "vkml-node",
    version,
    about = "Vulkan ONNX inference runtime",
    long_about = None,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a command: start a cluster node.
    #[command(flatten)]
    node: cli::NodeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model once (or --repeat N times) and write its outputs as .npy files.
    Run {
        /// The .onnx model file.
        model: PathBuf,
        /// An input as NAME=FILE, FILE being .npy or an ONNX TensorProto .pb. Repeatable.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Feed DIR/input_<i>.pb to the graph inputs in order (ONNX's test-data layout).
        #[arg(long, value_name = "DIR", conflicts_with = "inputs")]
        test_data: Option<PathBuf>,
        /// Where to write DIR/<output name>.npy.
        #[arg(long, value_name = "DIR", default_value = "out")]
        output_dir: PathBuf,
        /// auto (every GPU and the CPU), cpu, vulkan, or vulkan:N.
        #[arg(long, default_value = "auto")]
        device: DeviceSelection,
        /// Run N times and report the latency distribution.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Cap every device's memory budget, in bytes.
        #[arg(long, value_name = "BYTES")]
        device_memory_limit: Option<u64>,
        /// After the runs, print the median and p90 time of every op (GPU ops from timestamps
        /// between their dispatches, which keep dispatches from overlapping).
        #[arg(long)]
        profile: bool,
    },
    /// List the Vulkan devices and the CPU, with memory budgets and features.
    Devices,
    /// Write a new cluster secret (mode 0600) for `--cluster-key`.
    Keygen {
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print every member of the cluster a node belongs to, as that node sees it.
    Status(cli::StatusArgs),
    /// Run a model on a cluster: plan it over every node, stream each its part, run, and
    /// write the outputs as `run` does.
    Submit(cli::SubmitArgs),
    /// Print where the cluster's planner puts a model (ops, devices, cut edges, memory).
    Plan(cli::PlanArgs),
    /// Generate text with a language model folder (model.onnx + tokenizer.json), streaming
    /// tokens as they are made; here, or on a cluster with --to.
    Generate(cli::GenerateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A node's log is its membership history: info by default. Tools stay quiet.
    let default = if cli.command.is_none() {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each cause once: the library's messages often quote their I/O
/// error already, which `{:#}` would print again.
fn describe(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let t = cause.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
    }
    text
}

fn real_main(cli: Cli) -> Result<()> {
    let Some(command) = cli.command else {
        return cli::run_node(cli.node);
    };
    match command {
        Command::Devices => devices(),
        Command::Keygen { out } => cli::keygen(&out),
        Command::Status(args) => cli::status(args),
        Command::Submit(args) => cli::submit(args),
        Command::Plan(args) => cli::plan(args),
        Command::Generate(args) => cli::generate_cmd(args),
        Command::Run {
            model,
            inputs,
            test_data,
            output_dir,
            device,
            repeat,
            device_memory_limit,
            profile,
        } => {
            let session = Session::load(
                &model,
                SessionOptions {
                    devices: device,
                    device_memory_limit,
                    profile,
                    tuning: cli::env::tuning(),
                },
            )
            .with_context(|| format!("cannot load {}", model.display()))?;
            let fed = cli::read_values(&session.inputs(), &inputs, test_data.as_deref())?;
            let named: Vec<(&str, Value)> =
                fed.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
            let summary = session.plan_summary_values(&named)?;
            eprintln!(
                "plan: {} ({} chunks, {} transfers)",
                summary
                    .ops_per_device
                    .iter()
                    .map(|(d, n)| format!("{n} ops on {d}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                summary.chunks,
                summary.transfers
            );
            let mut times = Vec::with_capacity(repeat as usize);
            let mut outputs = Vec::new();
            for _ in 0..repeat {
                let t0 = Instant::now();
                outputs = session.run_values(&named)?;
                times.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            let outputs = cli::flatten_outputs(outputs);
            // All files or none, each under a name of its own.
            let paths = vkml::io::write_outputs(&output_dir, &outputs)?;
            for ((name, t), path) in outputs.iter().zip(paths) {
                println!(
                    "{name}: {} {:?} -> {}",
                    t.dtype(),
                    t.shape(),
                    path.display()
                );
            }
            if repeat > 1 {
                times.sort_by(f64::total_cmp);
                let q = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
                println!(
                    "latency over {repeat} runs: median {:.1} us, p10 {:.1} us, p90 {:.1} us, min {:.1} us, max {:.1} us",
                    q(0.5),
                    q(0.1),
                    q(0.9),
                    times[0],
                    times[times.len() - 1]
                );
            }
            if profile {
                print_profile(&session.profile());
            }
            Ok(())
        }
    }
}

/// The `--profile` table: one row per node, its device and its share of the summed medians.
fn print_profile(times: &[vkml::NodeTime]) {
    if times.is_empty() {
        println!("profile: no op was timed (a GPU whose queue writes no timestamps is not)");
        return;
    }
    let total: f64 = times.iter().map(|t| t.median_us).sum();
    let width = times.iter().map(|t| t.node.len()).max().unwrap_or(4).max(4);
    let op_width = times
        .iter()
        .map(|t| t.op_type.len())
        .max()
        .unwrap_or(2)
        .max(2);
    println!(
        "profile of the ops over {} runs (sum of medians {total:.1} us):",
        times[0].runs
    );
    println!(
        "  {:<width$}  {:<op_width$}  {:<3}  {:>10}  {:>10}  {:>6}",
        "node", "op", "on", "median us", "p90 us", "share"
    );
    for t in times {
        println!(
            "  {:<width$}  {:<op_width$}  {:<3}  {:>10.2}  {:>10.2}  {:>5.1}%",
            t.node,
            t.op_type,
            if t.gpu { "gpu" } else { "cpu" },
            t.median_us,
            t.p90_us,
            100.0 * t.median_us / total.max(f64::MIN_POSITIVE)
        );
    }
}

/// Output names become file names: anything but letters, digits, '.', '_' and '-' is '_'
/// (`run` also makes them unique: `vkml::io::write_outputs`).
pub(crate) fn sanitize(name: &str) -> String {
    vkml::io::sanitize(name)
}

fn devices() -> Result<()> {
    println!(
        "cpu: {} threads, memory budget {} MiB",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        vkml::exec::cpu_memory() >> 20
    );
    match vkml::session::vulkan(&cli::env::tuning().vulkan) {
        Err(e) => println!("vulkan: none ({e})"),
        Ok(v) => {
            for g in v.gpus() {
                let i = g.info();
                println!(
                    "vulkan:{}: {} [{}, {}] Vulkan {}, driver {}\n  memory budget {} MiB, shared memory {} KiB, subgroup {}, push constants {} B, fp16 {}, int64 {}, cooperative matrix {} (NV2 {}, bf16 {}), host memory import {}",
                    i.index,
                    i.name,
                    i.vendor,
                    i.device_type,
                    i.api_version,
                    i.driver,
                    i.memory_budget >> 20,
                    i.max_shared_memory / 1024,
                    i.subgroup_size,
                    i.max_push_constants,
                    i.fp16,
                    i.int64,
                    i.cooperative_matrix,
                    i.cooperative_matrix2,
                    i.bf16,
                    // Whether values reach this GPU from the process's others by their copy
                    // engines alone (exec/bridge.rs).
                    i.host_import_alignment.is_some()
                );
            }
        }
    }
    Ok(())
}
