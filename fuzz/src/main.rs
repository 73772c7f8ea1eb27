//! `vkml-fuzz`: fuzzing campaigns against VKML (see the library's docs and --help).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use vkml::DeviceSelection;
use vkml_fuzz::case::{Case, Target};
use vkml_fuzz::driver::{self, Config};
use vkml_fuzz::exec::{ModelSettings, Runner};

#[derive(Parser)]
#[command(
    version,
    about = "Fuzz VKML: mutated models, inputs, tensor files and frames, on stable Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a campaign: cases drawn from seeds and the corpus, run by worker processes;
    /// panics, aborts and hangs saved as findings. Exits 1 when there is a finding.
    Run {
        #[arg(long, value_enum, default_value = "models")]
        target: Target,
        /// Folders of seed models (model.onnx and test_data_set_0/), searched two deep.
        #[arg(long = "seeds", value_name = "DIR")]
        seeds: Vec<PathBuf>,
        #[arg(long, default_value_t = 1000)]
        cases: u64,
        /// Worker processes (default: the machine's cores).
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Seconds a case may run before it counts as a hang.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// Kept between runs: replayed first, grown with cases reaching new outcomes.
        #[arg(long, value_name = "DIR")]
        corpus: Option<PathBuf>,
        #[arg(long, value_name = "DIR", default_value = "target/fuzz-findings")]
        findings: PathBuf,
        #[command(flatten)]
        worker: WorkerSettings,
    },
    /// Runs one case (a case file, or a finding's folder) in this process: a panic shows
    /// with its backtrace.
    Replay {
        path: PathBuf,
        #[arg(long = "seeds", value_name = "DIR")]
        seeds: Vec<PathBuf>,
        #[command(flatten)]
        worker: WorkerSettings,
    },
    /// Loads and runs DIR/model.onnx with DIR/test_data_set_0/input_<i>.pb: a regression's
    /// check. Prints "ok" or the whole error; a panic fails.
    Check {
        dir: PathBuf,
        #[command(flatten)]
        worker: WorkerSettings,
    },
    /// The worker process the driver starts (reads cases on stdin).
    #[command(hide = true)]
    Worker {
        #[arg(long = "seeds", value_name = "DIR")]
        seeds: Vec<PathBuf>,
        #[arg(long)]
        scratch: PathBuf,
        #[command(flatten)]
        worker: WorkerSettings,
    },
}

#[derive(clap::Args, Clone)]
struct WorkerSettings {
    /// cpu or vulkan.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Every device's memory budget, MiB.
    #[arg(long, default_value_t = 1024)]
    device_memory_mib: u64,
    /// The worker's address-space cap, MiB: an allocation past every budget aborts it.
    #[arg(long, default_value_t = 16384)]
    address_space_mib: u64,
}

impl WorkerSettings {
    fn model_settings(&self) -> Result<ModelSettings> {
        let devices = match self.device.as_str() {
            "cpu" => DeviceSelection::Cpu,
            "vulkan" => DeviceSelection::Vulkan,
            other => bail!("--device {other}: expected cpu or vulkan"),
        };
        Ok(ModelSettings {
            devices,
            device_memory_limit: self.device_memory_mib << 20,
        })
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--device".into(),
            self.device.clone(),
            "--device-memory-mib".into(),
            self.device_memory_mib.to_string(),
            "--address-space-mib".into(),
            self.address_space_mib.to_string(),
        ]
    }
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Run {
            target,
            seeds,
            cases,
            jobs,
            seed,
            timeout,
            corpus,
            findings,
            worker,
        } => {
            worker.model_settings()?;
            let exe = std::env::current_exe().context("cannot find this program")?;
            let mut cfg = Config::new(&exe, target, seeds.clone(), &worker.args());
            if target == Target::Models && cfg.seeds.is_empty() {
                bail!("no seed models under {seeds:?}: give --seeds DIR with model.onnx folders");
            }
            cfg.cases = cases;
            cfg.jobs = jobs.unwrap_or(cfg.jobs);
            cfg.seed = seed;
            cfg.timeout = Duration::from_secs(timeout);
            cfg.corpus = corpus;
            cfg.findings = findings;
            cfg.progress = true;
            let report = driver::run(&cfg)?;
            driver::print_report(target, &report);
            if !report.findings.is_empty() {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Replay {
            path,
            seeds,
            worker,
        } => {
            let file = if path.is_dir() {
                path.join("case")
            } else {
                path
            };
            let case = Case::load(&file)?;
            let scratch =
                std::env::temp_dir().join(format!("vkml-fuzz-replay-{}", std::process::id()));
            let mut runner = Runner::new(&seeds, scratch.clone(), worker.model_settings()?);
            println!("{}", runner.run(&case));
            let _ = std::fs::remove_dir_all(scratch);
            Ok(())
        }
        Command::Check { dir, worker } => {
            // As in a worker: an allocation no budget checked aborts here, not the machine.
            vkml_fuzz::worker::cap_memory(worker.address_space_mib << 20)
                .context("cannot cap the address space")?;
            let inputs = read_inputs(&dir)?;
            let outcome = vkml_fuzz::exec::check_session(
                &dir.join("model.onnx"),
                &inputs,
                &worker.model_settings()?,
            );
            match outcome {
                Ok(n) => println!("ok {n}"),
                Err((stage, message)) => println!("{stage}: {message}"),
            }
            Ok(())
        }
        Command::Worker {
            seeds,
            scratch,
            worker,
        } => {
            vkml_fuzz::worker::cap_memory(worker.address_space_mib << 20)
                .context("cannot cap the address space")?;
            let runner = Runner::new(&seeds, scratch, worker.model_settings()?);
            vkml_fuzz::worker::serve(runner)?;
            Ok(())
        }
    }
}

fn read_inputs(dir: &std::path::Path) -> Result<Vec<(String, vkml::Tensor)>> {
    let mut out = Vec::new();
    for i in 0.. {
        let path = dir.join("test_data_set_0").join(format!("input_{i}.pb"));
        if !path.is_file() {
            break;
        }
        out.push(vkml::io::read_pb(&path)?);
    }
    Ok(out)
}
