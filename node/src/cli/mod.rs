//! The cluster side of the command line: `keygen`, `status`, `submit`, `plan`, starting a node,
//! and reading input tensors (shared with `run`).

mod config;
pub mod env;
mod generate;
mod placement;
mod plan;
mod status;
mod submit;

use std::path::{Path, PathBuf};

use vkml::Tensor;
use vkml::io::Value;
use vkml::model::{Kind, ValueDef};
use vkml::onnx::DeclaredType;

use anyhow::{Context, Result, bail};
use clap::Args;
use vkml::DeviceSelection;
use vkml::cluster::{Cluster, ClusterConfig, Secret};

pub use generate::{GenerateArgs, generate_cmd};
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
    /// Where to serve data streams (submissions, runs, tensors between nodes), e.g.
    /// 0.0.0.0:7001: gossip keeps --listen to itself. Default: --listen's host, a port the
    /// system picks (peers and clients learn it when they connect).
    #[arg(long, value_name = "ADDR")]
    pub data_listen: Option<String>,
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
    /// Where to keep the weights this node is sent, named by their content, so a second
    /// submission of a model, or one after a restart, sends nothing again (default:
    /// $XDG_CACHE_HOME/vkml/weights, else ~/.cache/vkml/weights).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound the weight cache (bytes, or with K, M, G, T: binary units); the least recently
    /// used weights go first. 0 keeps no cache: weights live as long as their model.
    #[arg(long, value_name = "SIZE", value_parser = config::parse_size)]
    pub cache_size: Option<u64>,
    /// A folder of model files this node may read weights from instead of receiving them:
    /// a model's external-data file found here under the same name, with the same bytes
    /// (checked by hash), is mapped. The files must not change while the node runs.
    #[arg(long, value_name = "DIR")]
    pub models: Option<PathBuf>,
    /// Where the measured speed of this machine's devices is kept, by device identity: a
    /// node measures its devices when it starts (a short GEMM, op cost and bandwidth probe,
    /// about a second) unless this file has them (default:
    /// $XDG_CACHE_HOME/vkml/devices.json, else ~/.cache/vkml/devices.json).
    #[arg(long, value_name = "FILE")]
    pub probe_cache: Option<PathBuf>,
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
    // Before the devices are opened and measured: a cache folder that cannot be used fails
    // at once.
    let weights = weight_store(&settings)?;
    let (device, limit, vulkan) = (settings.device, settings.device_memory_limit, tuning.vulkan);
    let probe_cache = settings.probe_cache.clone().or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
        vkml::exec::probe::default_file(xdg.as_deref(), home.as_deref())
    });
    let probe_tuning = tuning;
    let (devices, inventory) = std::thread::spawn(move || {
        vkml::priority::demote_this_thread();
        vkml::cluster::inventory::local_devices(device, limit, &vulkan, |devices| {
            vkml::exec::probe::figures(devices, probe_cache.as_deref(), &probe_tuning)
        })
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
        sequence_idle: env::sequence_idle(),
        data_listen: settings.data_listen,
    };
    let rt = runtime()?;
    let result = rt.block_on(async move {
        let cluster = Cluster::start(cfg).await?;
        let exec = vkml::distributed::Exec::start(cluster.clone(), devices, inventory, weights);
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
/// The node's weight store: its cache and models folder, as the settings say. An explicit
/// --cache-dir that cannot be used is an error; the default one only a warning (the node then
/// keeps no cache), so a node runs where the home folder is read-only.
fn weight_store(settings: &config::Settings) -> Result<vkml::distributed::weights::WeightStore> {
    use vkml::cache::{WeightCache, default_dir};
    let cache = match (&settings.cache_dir, settings.cache_size) {
        (_, 0) => None,
        (Some(dir), size) => Some(WeightCache::open(dir, size)?),
        (None, size) => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
            match default_dir(xdg.as_deref(), home.as_deref()) {
                Some(dir) => match WeightCache::open(&dir, size) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!("{e}; running without a weight cache");
                        None
                    }
                },
                None => None,
            }
        }
    };
    if let Some(c) = &cache {
        tracing::info!(
            "weight cache: {} ({} of at most {} bytes held)",
            c.dir().display(),
            c.size(),
            settings.cache_size
        );
    }
    if let Some(dir) = settings.models.as_ref().filter(|d| !d.is_dir()) {
        bail!("--models {}: not a folder", dir.display());
    }
    Ok(vkml::distributed::weights::WeightStore::new(
        cache,
        settings.models.clone(),
    ))
}

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

/// [`read_inputs`] for `run`, whose model may take sequences and optionals: the .pb files of
/// `test_data` are read as the model declares each input.
pub fn read_values(
    declared: &[ValueDef],
    inputs: &[String],
    test_data: Option<&Path>,
) -> Result<Vec<(String, Value)>> {
    let Some(dir) = test_data else {
        let names: Vec<String> = declared.iter().map(|d| d.name.clone()).collect();
        let tensors = read_inputs(&names, inputs, None)?;
        return Ok(tensors
            .into_iter()
            .map(|(n, t)| (n, Value::Tensor(t)))
            .collect());
    };
    declared
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let path = dir.join(format!("input_{i}.pb"));
            let ty = declared_type(&d.kind, d.dtype);
            let (_, v) = vkml::io::read_value_pb(&path, &ty)?;
            Ok((d.name.clone(), v))
        })
        .collect()
}

/// The ONNX type a value of `kind` holding `dtype` tensors is stored as.
fn declared_type(kind: &Kind, dtype: Option<vkml::DType>) -> DeclaredType {
    match kind {
        Kind::Tensor => DeclaredType::Tensor {
            elem_type: dtype.map_or(0, |d| d.onnx_code()),
        },
        Kind::Sequence(k) => DeclaredType::Sequence(Box::new(declared_type(k, dtype))),
        Kind::Optional(k) => DeclaredType::Optional(Box::new(declared_type(k, dtype))),
    }
}

/// Outputs as tensor files take them: the tensors of a sequence `s` as `s.0`, `s.1`...; an
/// empty optional is said on standard error and gives no file.
pub fn flatten_outputs(outputs: Vec<(String, Value)>) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for (name, v) in outputs {
        push_value(&name, v, &mut out);
    }
    out
}

fn push_value(name: &str, v: Value, out: &mut Vec<(String, Tensor)>) {
    match v {
        Value::Tensor(t) => out.push((name.to_string(), t)),
        Value::Sequence(items) => {
            if items.is_empty() {
                eprintln!("{name}: an empty sequence");
            }
            for (k, item) in items.into_iter().enumerate() {
                push_value(&format!("{name}.{k}"), item, out);
            }
        }
        Value::Optional(Some(v)) => push_value(name, *v, out),
        Value::Optional(None) => eprintln!("{name}: an empty optional"),
        Value::Map { .. } => eprintln!("{name}: a map, which vkml does not write"),
    }
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
