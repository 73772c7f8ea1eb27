//! The cluster side of the command line: `keygen`, `status`, `submit`, `plan`, starting a node,
//! and reading input tensors (shared with `run`).

mod config;
pub mod env;
mod placement;
mod plan;
mod status;
mod submit;

use std::path::{Path, PathBuf};

use vkml::Tensor;

use anyhow::{Context, Result, bail};
use clap::Args;
use vkml::DeviceSelection;
use vkml::cluster::{Cluster, ClusterConfig, Secret};

pub use plan::{PlanArgs, plan};
pub use status::{StatusArgs, status};
pub use submit::{SubmitArgs, submit};

/// The secret a tool talks to the cluster with.
pub(crate) fn secret_for_tool(key: Option<&Path>, insecure: bool, what: &str) -> Result<Secret> {
    match (key, insecure) {
        (Some(p), _) => Ok(Secret::read(p)?),
        (None, true) => Ok(Secret::insecure()),
        (None, false) => {
            bail!("{what} needs --cluster-key FILE (or --insecure for a loopback cluster)")
        }
    }
}

/// `vkml-node --listen ADDR [--join ADDR]... --cluster-key FILE`: flags, each overriding the
/// same setting from `--config`.
#[derive(Args, Debug, Default)]
pub struct NodeArgs {
    /// Where to serve (UDP), e.g. 0.0.0.0:7000 or 127.0.0.1:7000.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The address peers reach this node at (needed when listening on 0.0.0.0).
    #[arg(long, value_name = "ADDR")]
    pub advertise: Option<String>,
    /// A member to join through (host:port). Repeatable.
    #[arg(long, value_name = "ADDR")]
    pub join: Vec<String>,
    /// The cluster secret, as written by `vkml-node keygen`.
    #[arg(long, value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,
    /// This node's name in the cluster (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Cap every device's memory budget, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub device_memory_limit: Option<u64>,
    /// Devices to serve: auto, cpu, vulkan, or vulkan:N.
    #[arg(long)]
    pub device: Option<DeviceSelection>,
    /// Settings from a TOML file (keys as the flags: listen, join, cluster_key...).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Run without a key, with a public one: allowed only when listening on loopback.
    #[arg(long)]
    pub insecure: bool,
}

pub fn keygen(out: &Path) -> Result<()> {
    Secret::generate()?.write_new(out)?;
    eprintln!(
        "wrote a new cluster key to {} (mode 0600); copy it to every node",
        out.display()
    );
    Ok(())
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn run_node(args: NodeArgs) -> Result<()> {
    let settings = config::Settings::resolve(args)?;
    // Before the devices are opened (seconds on a GPU machine): a bad name fails at once.
    vkml::cluster::names::check(&settings.name).map_err(|e| anyhow::anyhow!("--name: {e}"))?;
    let secret = match (&settings.cluster_key, settings.insecure) {
        (Some(path), _) => Secret::read(path)?,
        (None, true) => {
            if !settings.listen.ip().is_loopback() {
                bail!(
                    "--insecure is allowed only on a loopback address, not {}",
                    settings.listen
                );
            }
            tracing::warn!("insecure: any process on this machine can join this cluster");
            Secret::insecure()
        }
        (None, false) => bail!(
            "a node needs --cluster-key FILE (make one with `vkml-node keygen --out FILE`), or --insecure on loopback"
        ),
    };
    let tuning = env::tuning();
    // Heavy work yields to the network threads (node/src/priority.rs): the CPU kernels' pool,
    // and the threads drivers start when the devices open (lavapipe runs shaders on its own).
    let _ = rayon::ThreadPoolBuilder::new()
        .start_handler(|_| {
            vkml::priority::demote_this_thread();
        })
        .build_global();
    let (device, limit, vulkan) = (settings.device, settings.device_memory_limit, tuning.vulkan);
    let (devices, inventory) = std::thread::spawn(move || {
        vkml::priority::demote_this_thread();
        vkml::cluster::inventory::local_devices(device, limit, &vulkan)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("opening this node's devices panicked"))?
    .context("cannot open this node's devices")?;
    let cfg = ClusterConfig {
        name: settings.name.clone(),
        listen: settings.listen,
        advertise: settings.advertise,
        join: settings.join.clone(),
        secret,
        devices: inventory.clone(),
        tuning,
        tensor_lanes: env::tensor_lanes(),
        faults: env::faults()?,
        lease_grace: env::lease_grace(),
    };
    let rt = runtime()?;
    let result = rt.block_on(async move {
        let cluster = Cluster::start(cfg).await?;
        let exec = vkml::distributed::Exec::start(cluster.clone(), devices, inventory);
        let fatal = tokio::select! {
            r = wait_for_signal() => {
                r?;
                None
            }
            why = cluster.fatal() => Some(why),
        };
        tracing::info!("leaving the cluster");
        // Runs fail (their clients told why) and runs of others' models here stop waiting,
        // before the node goes: a run thread blocked on a value would otherwise keep the
        // process alive.
        exec.shutdown();
        cluster.leave().await;
        match fatal {
            Some(why) => Err(anyhow::anyhow!(why)),
            None => Ok(()),
        }
    });
    // Bounded: a run thread still busy in a kernel is not waited for.
    rt.shutdown_timeout(SHUTDOWN_WAIT);
    result
}

/// How long a stopping node waits for its run threads after leaving the cluster.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Inputs by name: from NAME=FILE flags, or DIR/input_<i>.pb in the model's input order.
pub fn read_inputs(
    declared: &[String],
    inputs: &[String],
    test_data: Option<&Path>,
) -> Result<Vec<(String, Tensor)>> {
    if let Some(dir) = test_data {
        return declared
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let path = dir.join(format!("input_{i}.pb"));
                let (_, t) = vkml::io::read_pb(&path)?;
                Ok((name.clone(), t))
            })
            .collect();
    }
    let mut out = Vec::new();
    for spec in inputs {
        let Some((name, file)) = spec.split_once('=') else {
            bail!("--input '{spec}' should be NAME=FILE");
        };
        let t = vkml::io::read_tensor_file(Path::new(file))?;
        out.push((name.to_string(), t));
    }
    Ok(out)
}
