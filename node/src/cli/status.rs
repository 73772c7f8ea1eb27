//! `vkml-node status --to ADDR --cluster-key FILE [--json]`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use serde::Serialize;
use vkml::cluster::Secret;
use vkml::cluster::client::Client;
use vkml_protocol::pb;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// A member to ask (host:port).
    #[arg(long, value_name = "ADDR")]
    to: String,
    /// The cluster secret.
    #[arg(long, value_name = "FILE")]
    cluster_key: Option<PathBuf>,
    /// Ask an --insecure (loopback) cluster.
    #[arg(long)]
    insecure: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct JsonStatus {
    node: String,
    members: Vec<JsonMember>,
    /// The answering node's own tensor traffic (payload bytes, all peers).
    tensor_bytes_sent: u64,
    tensor_bytes_received: u64,
    /// Bytes of intermediate values the answering node sent to / received from other nodes.
    edge_bytes_sent: u64,
    edge_bytes_received: u64,
    /// Weight bytes the answering node received, and those it took from its cache or its
    /// models folder instead.
    weight_bytes_received: u64,
    weight_bytes_cached: u64,
    /// Sequences whose bound values (a language model's caches) the answering node keeps
    /// between their steps, and those values' bytes.
    sequences_kept: u64,
    sequence_bytes: u64,
    /// Of those bytes, the ones in GPU buffers (kept in place between steps).
    sequence_gpu_bytes: u64,
    /// Models submitted to the answering node: who loaded them, what they reserve where.
    models: Vec<JsonModel>,
    /// Parts of models (any node's) the answering node holds, with what they reserve here.
    fragments: Vec<JsonFragment>,
}

#[derive(Serialize)]
struct JsonModel {
    /// The id its client uses, in hex.
    model_id: String,
    name: String,
    /// The client connection it is leased to.
    owner: String,
    /// Bytes its plans reserve, by node.
    reserved: std::collections::BTreeMap<String, u64>,
    /// Its owner is gone: it is unloaded in this many milliseconds (absent while leased).
    #[serde(skip_serializing_if = "Option::is_none")]
    unload_in_ms: Option<u64>,
}

#[derive(Serialize)]
struct JsonFragment {
    load_id: String,
    submitter: String,
    reserved_bytes: u64,
}

#[derive(Serialize)]
struct JsonMember {
    name: String,
    state: &'static str,
    addr: String,
    generation: u64,
    devices: Vec<JsonDevice>,
    /// The member's own weight counters, asked of it (absent when it did not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    weight_bytes_received: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight_bytes_cached: Option<u64>,
    /// The member's load, asked of it (absent when it did not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    load: Option<JsonLoad>,
}

#[derive(Serialize)]
struct JsonLoad {
    /// Runs (or parts of split runs) executing on the member now, and ended since it started.
    runs_in_flight: u64,
    runs_finished: u64,
    /// Per device that has run work: the share of the last second or so it was busy (0-1),
    /// and its busy time since the member started.
    devices: std::collections::BTreeMap<String, JsonDeviceLoad>,
    /// Cut-edge bytes the member sent to and received from each other node.
    peers: std::collections::BTreeMap<String, JsonPeer>,
    /// Sequences whose caches the member keeps between steps, their bytes, and those of the
    /// bytes in GPU buffers.
    sequences_kept: u64,
    sequence_bytes: u64,
    sequence_gpu_bytes: u64,
    /// Weights the plans of a model share on the member's GPUs, and the bytes of weights its
    /// loads found there already instead of uploading them.
    shared_weight_bytes: u64,
    weight_bytes_reused: u64,
}

#[derive(Serialize)]
struct JsonDeviceLoad {
    busy: f64,
    busy_ms: u64,
    /// The same in microseconds: a small part's work adds up to less than a millisecond.
    busy_us: u64,
}

#[derive(Serialize)]
struct JsonPeer {
    edge_bytes_sent: u64,
    edge_bytes_received: u64,
}

fn load(r: &pb::StatusReply) -> JsonLoad {
    JsonLoad {
        runs_in_flight: r.runs_in_flight,
        runs_finished: r.runs_finished,
        sequences_kept: r.sequences_kept,
        sequence_bytes: r.sequence_bytes,
        sequence_gpu_bytes: r.sequence_gpu_bytes,
        shared_weight_bytes: r.shared_weight_bytes,
        weight_bytes_reused: r.weight_bytes_reused,
        devices: r
            .device_loads
            .iter()
            .map(|d| {
                let l = JsonDeviceLoad {
                    busy: f64::from(d.busy_ppm) / 1e6,
                    busy_ms: d.busy_ns / 1_000_000,
                    busy_us: d.busy_ns / 1_000,
                };
                (d.device.clone(), l)
            })
            .collect(),
        peers: r
            .peers
            .iter()
            .map(|p| {
                let t = JsonPeer {
                    edge_bytes_sent: p.edge_bytes_sent,
                    edge_bytes_received: p.edge_bytes_received,
                };
                (p.node.clone(), t)
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct JsonDevice {
    name: String,
    kind: &'static str,
    vendor: String,
    memory_budget: u64,
    flops_per_us: u64,
    op_overhead_ns: u64,
    /// Measured memory bandwidth (0: not measured).
    bytes_per_us: u64,
    features: u32,
    /// What loaded models' parts reserve on it, as the answering node last heard (its
    /// plans are made against `memory_budget - reserved`).
    reserved: u64,
}

fn state(s: i32) -> &'static str {
    match pb::MemberState::try_from(s) {
        Ok(pb::MemberState::Alive) => "alive",
        Ok(pb::MemberState::Suspect) => "suspect",
        Ok(pb::MemberState::Dead) => "dead",
        Ok(pb::MemberState::Left) => "left",
        Err(_) => "unknown",
    }
}

fn to_json(r: pb::StatusReply) -> JsonStatus {
    JsonStatus {
        node: r.node,
        tensor_bytes_sent: r.tensor_bytes_sent,
        tensor_bytes_received: r.tensor_bytes_received,
        edge_bytes_sent: r.edge_bytes_sent,
        edge_bytes_received: r.edge_bytes_received,
        weight_bytes_received: r.weight_bytes_received,
        weight_bytes_cached: r.weight_bytes_cached,
        sequences_kept: r.sequences_kept,
        sequence_bytes: r.sequence_bytes,
        sequence_gpu_bytes: r.sequence_gpu_bytes,
        models: r
            .models
            .into_iter()
            .map(|m| JsonModel {
                model_id: format!("{:016x}", m.model_id),
                name: m.name,
                owner: m.owner,
                reserved: m.reserved.into_iter().map(|b| (b.node, b.bytes)).collect(),
                unload_in_ms: (m.unload_in_ms > 0).then_some(m.unload_in_ms),
            })
            .collect(),
        fragments: r
            .fragments
            .into_iter()
            .map(|f| JsonFragment {
                load_id: format!("{:016x}", f.load_id),
                submitter: f.submitter,
                reserved_bytes: f.reserved_bytes,
            })
            .collect(),
        members: r
            .members
            .into_iter()
            .map(|m| JsonMember {
                state: state(m.state),
                name: m.name,
                addr: m.addr,
                generation: m.generation,
                weight_bytes_received: None,
                weight_bytes_cached: None,
                load: None,
                devices: m
                    .devices
                    .into_iter()
                    .map(|d| JsonDevice {
                        kind: if d.kind() == pb::DeviceKind::Gpu {
                            "gpu"
                        } else {
                            "cpu"
                        },
                        name: d.name,
                        vendor: d.vendor,
                        memory_budget: d.memory_budget,
                        flops_per_us: d.flops_per_us,
                        op_overhead_ns: d.op_overhead_ns,
                        bytes_per_us: d.bytes_per_us,
                        features: d.features,
                        reserved: d.reserved,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Rows as columns padded to their widest cell (the last one not padded).
fn columns(rows: Vec<Vec<String>>) -> String {
    let n = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..n)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 < n {
                line.push_str(&format!("{cell:w$}  ", w = widths[c]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn table(s: &JsonStatus) -> String {
    let mut rows = vec![vec![
        "NAME".to_string(),
        "STATE".into(),
        "ADDRESS".into(),
        "WEIGHTS RECEIVED / FROM CACHE".into(),
        "DEVICES (memory budget)".into(),
    ]];
    for m in &s.members {
        let devs = m
            .devices
            .iter()
            .map(|d| format!("{} {} ({} MiB)", d.name, d.vendor, d.memory_budget >> 20))
            .collect::<Vec<_>>()
            .join(", ");
        let weights = match (m.weight_bytes_received, m.weight_bytes_cached) {
            (Some(r), Some(c)) => format!("{} / {}", mib(r), mib(c)),
            _ => "-".into(),
        };
        rows.push(vec![
            m.name.clone(),
            m.state.into(),
            m.addr.clone(),
            weights,
            devs,
        ]);
    }
    let mut out = columns(rows);
    out.push_str(&load_table(s));
    if !s.models.is_empty() {
        let mut rows = vec![vec![
            "MODEL".to_string(),
            "NAME".into(),
            "OWNER".into(),
            "RESERVED".into(),
        ]];
        for m in &s.models {
            let owner = match m.unload_in_ms {
                Some(ms) => format!("{} (gone: unloaded in {:.1} s)", m.owner, ms as f64 / 1e3),
                None => m.owner.clone(),
            };
            let reserved = m
                .reserved
                .iter()
                .map(|(node, &b)| format!("{node} {}", mib(b)))
                .collect::<Vec<_>>()
                .join(", ");
            rows.push(vec![m.model_id.clone(), m.name.clone(), owner, reserved]);
        }
        out.push_str(&format!("\nmodels submitted to {}:\n", s.node));
        out.push_str(&columns(rows));
    }
    if !s.fragments.is_empty() {
        let mut rows = vec![vec![
            "PLAN".to_string(),
            "SUBMITTER".into(),
            "RESERVED HERE".into(),
        ]];
        for f in &s.fragments {
            rows.push(vec![
                f.load_id.clone(),
                f.submitter.clone(),
                mib(f.reserved_bytes),
            ]);
        }
        out.push_str(&format!("\nparts of models held by {}:\n", s.node));
        out.push_str(&columns(rows));
    }
    out
}

/// Each member's load: runs, device figures and busy shares, cut-edge bytes per peer.
fn load_table(s: &JsonStatus) -> String {
    let mut rows = vec![vec![
        "NAME".to_string(),
        "RUNS (now / ended)".into(),
        "SEQUENCES (caches kept)".into(),
        "DEVICES (rate, op cost: busy)".into(),
        "EDGE BYTES OUT / IN BY PEER".into(),
    ]];
    for m in s.members.iter() {
        let Some(l) = &m.load else { continue };
        let devs = m
            .devices
            .iter()
            .map(|d| {
                let busy = l.devices.get(&d.name).map_or("idle".to_string(), |x| {
                    format!("{:.0}% busy", x.busy * 100.0)
                });
                format!(
                    "{} {:.1} GFLOP/s, {:.1} us: {busy}",
                    d.name,
                    d.flops_per_us as f64 / 1000.0,
                    d.op_overhead_ns as f64 / 1000.0
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let peers = l
            .peers
            .iter()
            .map(|(p, t)| {
                format!(
                    "{p} {} / {}",
                    super::placement::bytes(t.edge_bytes_sent),
                    super::placement::bytes(t.edge_bytes_received)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        rows.push(vec![
            m.name.clone(),
            format!("{} / {}", l.runs_in_flight, l.runs_finished),
            match l.sequences_kept {
                0 => "-".into(),
                n => format!(
                    "{n}: {} ({} on GPUs)",
                    mib(l.sequence_bytes),
                    mib(l.sequence_gpu_bytes)
                ),
            },
            devs,
            if peers.is_empty() { "-".into() } else { peers },
        ]);
    }
    if rows.len() == 1 {
        return String::new();
    }
    format!("\nload (asked of each member):\n{}", columns(rows))
}

/// How long a member other than the one asked may take to give its counters.
const MEMBER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

async fn ask(addr: &str, secret: &Secret) -> Result<pb::StatusReply> {
    let client = Client::connect(addr, secret).await?;
    let r = client.status().await;
    client.close().await;
    Ok(r?)
}

pub fn status(args: StatusArgs) -> Result<()> {
    let secret = match (&args.cluster_key, args.insecure) {
        (Some(p), _) => Secret::read(p)?,
        (None, true) => Secret::insecure(),
        (None, false) => bail!("status needs --cluster-key FILE (or --insecure)"),
    };
    let rt = super::runtime()?;
    let reply = rt.block_on(ask(&args.to, &secret))?;
    let mut s = to_json(reply);
    // Each member's counters are its own: ask every live one, at once.
    let counters = rt.block_on(async {
        let mut asks = tokio::task::JoinSet::new();
        for m in s.members.iter().filter(|m| m.state == "alive") {
            let (name, addr, secret) = (m.name.clone(), m.addr.clone(), secret.clone());
            asks.spawn(async move {
                let r = tokio::time::timeout(MEMBER_WAIT, ask(&addr, &secret)).await;
                (name, r.ok().and_then(Result::ok))
            });
        }
        asks.join_all().await
    });
    for (name, reply) in counters {
        if let (Some(m), Some(r)) = (s.members.iter_mut().find(|m| m.name == name), reply) {
            m.weight_bytes_received = Some(r.weight_bytes_received);
            m.weight_bytes_cached = Some(r.weight_bytes_cached);
            m.load = Some(load(&r));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", table(&s));
    }
    Ok(())
}
