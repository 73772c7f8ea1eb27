//! `vkml-node submit`: run a model on a cluster through any of its nodes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use vkml::Tensor;
use vkml::distributed::client::{ClusterClient, RemoteModel};

use super::placement;

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// The .onnx model file. It is sent to the node; weights stored as external data (files
    /// beside it) are hashed and sent only to nodes that do not have them.
    pub model: PathBuf,
    /// Any member of the cluster (host:port).
    #[arg(long, value_name = "ADDR")]
    pub to: String,
    /// The cluster secret.
    #[arg(long, value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,
    /// Talk to an --insecure (loopback) cluster.
    #[arg(long)]
    pub insecure: bool,
    /// An input as NAME=FILE (.npy or ONNX TensorProto .pb). Repeatable.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Feed DIR/input_<i>.pb to the graph inputs in order.
    #[arg(long, value_name = "DIR", conflicts_with = "inputs")]
    pub test_data: Option<PathBuf>,
    /// Where to write DIR/<output name>.npy.
    #[arg(long, value_name = "DIR", default_value = "out")]
    pub output_dir: PathBuf,
    /// Run N times and report the latency distribution and throughput.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Runs in flight at once (they pipeline through the nodes).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
}

pub fn submit(args: SubmitArgs) -> Result<()> {
    let secret = super::secret_for_tool(args.cluster_key.as_deref(), args.insecure, "submit")?;
    let cluster = ClusterClient::connect(&args.to, &secret)
        .with_context(|| format!("cannot reach {}", args.to))?;
    let bars = Bars::default();
    let model = cluster
        .load(&args.model, |p| bars.show(p))
        .with_context(|| format!("cannot load {} on the cluster", args.model.display()));
    bars.clear();
    let model = model?;
    match &model.placement {
        Some(p) => print!("{}", placement::render(p)),
        None => println!("the model has symbolic input sizes: it is planned at its first run"),
    }
    let result = run_and_write(&model, &args);
    let unloaded = model.unload();
    cluster.close();
    result?;
    unloaded.context("cannot unload the model")?;
    Ok(())
}

/// One progress bar per stage of a load and node it concerns: the bytes hashed, the model
/// sent, and each node's weights (sent, or found there already), with their rates.
#[derive(Default)]
struct Bars {
    all: MultiProgress,
    bars: std::cell::RefCell<BTreeMap<(String, String), ProgressBar>>,
}

impl Bars {
    fn show(&self, p: &vkml_protocol::pb::LoadProgress) {
        let key = (p.stage.clone(), p.node.clone());
        let mut bars = self.bars.borrow_mut();
        let bar = bars.entry(key).or_insert_with(|| {
            let bar = self.all.add(ProgressBar::new(p.total_bytes));
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:>24} [{bar:32}] {bytes}/{total_bytes} ({bytes_per_sec})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_message(if p.node.is_empty() {
                p.stage.clone()
            } else {
                format!("{} {}", p.stage, p.node)
            });
            bar
        });
        bar.set_length(p.total_bytes);
        bar.set_position(p.done_bytes);
    }

    fn clear(&self) {
        for bar in self.bars.borrow().values() {
            bar.finish_and_clear();
        }
    }
}

fn run_and_write(model: &RemoteModel, args: &SubmitArgs) -> Result<()> {
    let inputs = super::read_inputs(&model.inputs, &args.inputs, args.test_data.as_deref())?;
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let next = AtomicU32::new(0);
    let times = Mutex::new(Vec::with_capacity(args.repeat as usize));
    let last: Mutex<Option<Vec<(String, Tensor)>>> = Mutex::new(None);
    let retried = AtomicU32::new(0);
    let t0 = Instant::now();
    let workers = args.concurrency.min(args.repeat);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    while next.fetch_add(1, Ordering::Relaxed) < args.repeat {
                        let t = Instant::now();
                        let out = model.run(&named)?;
                        let us = t.elapsed().as_secs_f64() * 1e6;
                        times.lock().expect("times").push(us);
                        if out.retried {
                            retried.fetch_add(1, Ordering::Relaxed);
                        }
                        *last.lock().expect("last") = Some(out.outputs);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a run thread panicked")?;
        }
        Ok(())
    })?;
    let wall = t0.elapsed().as_secs_f64();
    let outputs = last.into_inner().expect("last").unwrap_or_default();
    std::fs::create_dir_all(&args.output_dir)
        .with_context(|| format!("cannot create {}", args.output_dir.display()))?;
    for (name, t) in &outputs {
        let path = args
            .output_dir
            .join(format!("{}.npy", crate::sanitize(name)));
        vkml::io::write_npy(&path, t)?;
        println!(
            "{name}: {} {:?} -> {}",
            t.dtype(),
            t.shape(),
            path.display()
        );
    }
    let n = retried.into_inner();
    if n > 0 {
        println!("{n} run(s) lost a node and were retried on a new plan without it");
    }
    let mut times = times.into_inner().expect("times");
    if times.len() > 1 {
        times.sort_by(f64::total_cmp);
        let q = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
        println!(
            "latency over {} runs (concurrency {workers}): median {:.1} us, p10 {:.1} us, p90 {:.1} us; throughput {:.1} runs/s",
            times.len(),
            q(0.5),
            q(0.1),
            q(0.9),
            times.len() as f64 / wall
        );
    }
    Ok(())
}
