//! `vkml-node plan MODEL --to ADDR | --cluster FILE`: where the cluster's planner would put a
//! model, without running it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Deserialize;
use vkml::cluster::client::Client;
use vkml::cluster::inventory::to_planner;
use vkml::distributed::offline::{PlanReport, placed_ops, plan_model};
use vkml::distributed::placement::{describe, plan_for};
use vkml::graph::Graph;
use vkml_planner::Snapshot;
use vkml_protocol::pb;

use super::placement;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The .onnx model file.
    pub model: PathBuf,
    /// Ask this member for the cluster's current membership (host:port).
    #[arg(
        long,
        value_name = "ADDR",
        conflicts_with = "cluster",
        required_unless_present = "cluster"
    )]
    pub to: Option<String>,
    /// Plan offline over the cluster described in FILE: the JSON `vkml-node status --json`
    /// prints (members with their devices).
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// With --cluster: plan as submitted to this member (its name), which takes the last
    /// stage of a split, as the node a model is submitted to does. With --to, the node asked
    /// is it.
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub from: Option<String>,
    /// The cluster secret (with --to).
    #[arg(long, value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,
    /// Talk to an --insecure (loopback) cluster.
    #[arg(long)]
    pub insecure: bool,
    /// Inputs as NAME=FILE, to fix symbolic sizes (otherwise taken as 1). Repeatable.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Feed DIR/input_<i>.pb to the graph inputs in order.
    #[arg(long, value_name = "DIR", conflicts_with = "inputs")]
    pub test_data: Option<PathBuf>,
}

#[derive(Deserialize)]
struct ClusterFile {
    members: Vec<FileMember>,
}

#[derive(Deserialize)]
struct FileMember {
    name: String,
    #[serde(default = "alive")]
    state: String,
    devices: Vec<FileDevice>,
}

fn alive() -> String {
    "alive".into()
}

#[derive(Deserialize)]
struct FileDevice {
    name: String,
    kind: String,
    memory_budget: u64,
    flops_per_us: u64,
    #[serde(default)]
    op_overhead_ns: Option<u64>,
    #[serde(default)]
    features: u32,
    #[serde(default)]
    bytes_per_us: u64,
}

fn snapshot_from_file(path: &Path) -> Result<Snapshot> {
    let data = vkml::files::read_regular(path, 64 << 20)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8(data)
        .with_context(|| format!("{} is not a text file", path.display()))?;
    let f: ClusterFile = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a cluster description (the JSON of `vkml-node status --json`)",
            path.display()
        )
    })?;
    let mut nodes = BTreeMap::new();
    for m in f.members.into_iter().filter(|m| m.state == "alive") {
        let devs = m
            .devices
            .into_iter()
            .map(|d| {
                let gpu = match d.kind.as_str() {
                    "gpu" => true,
                    "cpu" => false,
                    other => bail!("device {} has kind '{other}': use cpu or gpu", d.name),
                };
                Ok(to_planner(&pb::Device {
                    name: d.name,
                    kind: if gpu {
                        pb::DeviceKind::Gpu
                    } else {
                        pb::DeviceKind::Cpu
                    } as i32,
                    vendor: String::new(),
                    memory_budget: d.memory_budget,
                    flops_per_us: d.flops_per_us,
                    op_overhead_ns: d.op_overhead_ns.unwrap_or(if gpu { 2_500 } else { 300 }),
                    features: d.features,
                    reserved: 0,
                    bytes_per_us: d.bytes_per_us,
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        nodes.insert(m.name, devs);
    }
    if nodes.is_empty() {
        bail!("{} lists no alive member", path.display());
    }
    Ok(Snapshot {
        version: 0,
        nodes,
        ..Snapshot::default()
    })
}

/// The plan at the shapes of `inputs` (in graph order). Only the inputs a shape rule needs
/// are known as values, as in a session: knowing them all would fold the whole model away
/// and plan nothing.
fn plan_given(
    path: &std::path::Path,
    snapshot: &Snapshot,
    inputs: &[vkml::Tensor],
    tuning: &vkml::Tuning,
) -> Result<PlanReport> {
    let graph = Graph::from_model(&vkml::onnx::load(path)?)?;
    let gpu = snapshot
        .devices()
        .any(|(_, d)| d.kind == vkml_planner::DeviceKind::Gpu);
    let fuse = tuning.fusion.for_plan(gpu);
    let largest = snapshot.devices().map(|(_, d)| d.memory_budget).max();
    let limit = tuning.max_value_bytes.or(largest).unwrap_or(0);
    let refs: Vec<&vkml::Tensor> = inputs.iter().collect();
    let spec = graph
        .specialize_given(&refs, fuse, limit)
        .map_err(vkml::Error::from)?;
    let (plan, cost, spec) = plan_for(&graph, spec, snapshot, tuning)?;
    let ops = placed_ops(&graph, &spec, &plan, snapshot);
    Ok(PlanReport {
        placement: describe(&graph, &cost, &plan, snapshot),
        ops,
        assumed: Vec::new(),
    })
}

pub fn plan(args: PlanArgs) -> Result<()> {
    let snapshot = match (&args.to, &args.cluster) {
        (_, Some(file)) => {
            let mut s = snapshot_from_file(file)?;
            if let Some(from) = &args.from {
                if !s.nodes.contains_key(from) {
                    bail!(
                        "--from {from}: {} has no alive member of that name (members: {})",
                        file.display(),
                        s.nodes.keys().cloned().collect::<Vec<_>>().join(", ")
                    );
                }
                s.origin = Some(from.clone());
            }
            s
        }
        (Some(to), None) => {
            let secret =
                super::secret_for_tool(args.cluster_key.as_deref(), args.insecure, "plan")?;
            let (reply, asked) = super::runtime()?.block_on(async {
                let client = Client::connect(to, &secret).await?;
                let r = client.status().await;
                let asked = client.node.clone();
                client.close().await;
                r.map(|r| (r, asked))
            })?;
            let nodes = reply
                .members
                .iter()
                .filter(|m| m.state == pb::MemberState::Alive as i32)
                .map(|m| (m.name.clone(), m.devices.iter().map(to_planner).collect()))
                .collect();
            // As a model submitted to the node asked is planned: from there.
            Snapshot {
                version: 0,
                nodes,
                origin: Some(asked),
                ..Snapshot::default()
            }
        }
        (None, None) => bail!("say which cluster: --to ADDR or --cluster FILE"),
    };
    let declared: Vec<String> = vkml::onnx::outline(&args.model)?
        .inputs
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let given = super::read_inputs(&declared, &args.inputs, args.test_data.as_deref())?;
    let tuning = super::env::tuning();
    let report = if given.is_empty() {
        plan_model(&args.model, &snapshot, None, &tuning)
            .with_context(|| format!("cannot plan {}", args.model.display()))?
    } else {
        let mut ordered = Vec::new();
        for name in &declared {
            match given.iter().find(|(n, _)| n == name) {
                Some((_, t)) => ordered.push(t.clone()),
                None => bail!("missing input '{name}' (give all inputs, or none)"),
            }
        }
        plan_given(&args.model, &snapshot, &ordered, &tuning)
            .with_context(|| format!("cannot plan {}", args.model.display()))?
    };
    if !report.assumed.is_empty() {
        println!(
            "symbolic sizes taken as 1: {} (give --input to plan real sizes)",
            report.assumed.join(", ")
        );
    }
    print!("{}", placement::render(&report.placement));
    println!("ops, in order (chunk: node/device: ops):");
    let mut i = 0;
    while i < report.ops.len() {
        let first = &report.ops[i];
        let mut j = i;
        while j < report.ops.len() && report.ops[j].chunk == first.chunk {
            j += 1;
        }
        let names: Vec<String> = report.ops[i..j]
            .iter()
            .map(|o| format!("{} ({})", o.name, o.op_type))
            .collect();
        println!(
            "  chunk {}: {}/{}: {}",
            first.chunk,
            first.node,
            first.device,
            names.join(", ")
        );
        i = j;
    }
    Ok(())
}
