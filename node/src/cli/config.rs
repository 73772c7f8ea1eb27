//! Node settings: a TOML file (`--config`), overridden field by field by flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use vkml::DeviceSelection;

use super::NodeArgs;

/// The file's shape: the flags' names with underscores.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    advertise: Option<String>,
    #[serde(default)]
    join: Vec<String>,
    cluster_key: Option<PathBuf>,
    name: Option<String>,
    device_memory_limit: Option<u64>,
    device: Option<String>,
    #[serde(default)]
    insecure: bool,
}

#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub advertise: Option<SocketAddr>,
    pub join: Vec<String>,
    pub cluster_key: Option<PathBuf>,
    pub name: String,
    pub device_memory_limit: Option<u64>,
    pub device: DeviceSelection,
    pub insecure: bool,
}

fn read_file(path: &Path) -> Result<FileConfig> {
    let data = vkml::files::read_regular(path, 1 << 20)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8(data)
        .with_context(|| format!("{} is not a text file", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{} is not a valid node config", path.display()))
}

fn addr(what: &str, s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .with_context(|| format!("--{what} {s}: not an address (host:port)"))?
        .next()
        .with_context(|| format!("--{what} {s}: resolves to nothing"))
}

fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Settings {
    pub fn resolve(args: NodeArgs) -> Result<Settings> {
        let file = match &args.config {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        // A key path in a config file is relative to that file.
        let base = args
            .config
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let Some(listen) = args.listen.or(file.listen) else {
            bail!(
                "nothing to do: give a command (run, devices, keygen, status) or start a node with --listen ADDR (see --help)"
            );
        };
        let listen = addr("listen", &listen)?;
        let advertise = match args.advertise.or(file.advertise) {
            Some(a) => Some(addr("advertise", &a)?),
            None => None,
        };
        let device = match (args.device, file.device) {
            (Some(d), _) => d,
            (None, Some(s)) => s
                .parse()
                .map_err(|e: String| anyhow::anyhow!("device in config: {e}"))?,
            (None, None) => DeviceSelection::Auto,
        };
        Ok(Settings {
            listen,
            advertise,
            join: if args.join.is_empty() {
                file.join
            } else {
                args.join
            },
            cluster_key: args.cluster_key.or(file.cluster_key.map(|p| base.join(p))),
            name: args
                .name
                .or(file.name)
                .or_else(host_name)
                .unwrap_or_else(|| listen.to_string()),
            device_memory_limit: args.device_memory_limit.or(file.device_memory_limit),
            device,
            insecure: args.insecure || file.insecure,
        })
    }
}
