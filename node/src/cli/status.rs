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
}

#[derive(Serialize)]
struct JsonMember {
    name: String,
    state: &'static str,
    addr: String,
    generation: u64,
    devices: Vec<JsonDevice>,
}

#[derive(Serialize)]
struct JsonDevice {
    name: String,
    kind: &'static str,
    vendor: String,
    memory_budget: u64,
    flops_per_us: u64,
    op_overhead_ns: u64,
    features: u32,
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
        members: r
            .members
            .into_iter()
            .map(|m| JsonMember {
                state: state(m.state),
                name: m.name,
                addr: m.addr,
                generation: m.generation,
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
                        features: d.features,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn table(s: &JsonStatus) -> String {
    let mut rows = vec![[
        "NAME".to_string(),
        "STATE".into(),
        "ADDRESS".into(),
        "DEVICES (memory budget)".into(),
    ]];
    for m in &s.members {
        let devs = m
            .devices
            .iter()
            .map(|d| format!("{} {} ({} MiB)", d.name, d.vendor, d.memory_budget >> 20))
            .collect::<Vec<_>>()
            .join(", ");
        rows.push([m.name.clone(), m.state.into(), m.addr.clone(), devs]);
    }
    let widths: Vec<usize> = (0..3)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        out.push_str(&format!(
            "{:w0$}  {:w1$}  {:w2$}  {}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        ));
    }
    out
}

pub fn status(args: StatusArgs) -> Result<()> {
    let secret = match (&args.cluster_key, args.insecure) {
        (Some(p), _) => Secret::read(p)?,
        (None, true) => Secret::insecure(),
        (None, false) => bail!("status needs --cluster-key FILE (or --insecure)"),
    };
    let reply = super::runtime()?.block_on(async {
        let client = Client::connect(&args.to, &secret).await?;
        let r = client.status().await;
        client.close().await;
        r
    })?;
    let s = to_json(reply);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", table(&s));
    }
    Ok(())
}
