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
    data_listen: Option<String>,
    advertise: Option<String>,
    #[serde(default)]
    join: Vec<String>,
    cluster_key: Option<PathBuf>,
    name: Option<String>,
    device_memory_limit: Option<u64>,
    device: Option<String>,
    #[serde(default)]
    insecure: bool,
    cache_dir: Option<PathBuf>,
    cache_size: Option<String>,
    models: Option<PathBuf>,
    probe_cache: Option<PathBuf>,
}

#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_listen: Option<SocketAddr>,
    pub advertise: Option<SocketAddr>,
    pub join: Vec<String>,
    pub cluster_key: Option<PathBuf>,
    pub name: String,
    pub device_memory_limit: Option<u64>,
    pub device: DeviceSelection,
    pub insecure: bool,
    pub cache_dir: Option<PathBuf>,
    pub cache_size: u64,
    pub models: Option<PathBuf>,
    pub probe_cache: Option<PathBuf>,
}

/// The weight cache's bound when none is given.
pub const DEFAULT_CACHE_SIZE: u64 = 64 << 30;

/// A size in bytes: digits, optionally followed by K, M, G or T (binary units; "B", "iB" and
/// spaces around the unit accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size: write bytes, or a number with K, M, G or T"))?;
    let shift = match unit.trim().trim_end_matches('B').trim_end_matches('i') {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        other => return Err(format!("'{s}': unknown unit '{other}' (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
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
        let data_listen = match args.data_listen.or(file.data_listen) {
            Some(a) => Some(addr("data-listen", &a)?),
            None => None,
        };
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
            data_listen,
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
            cache_dir: args.cache_dir.or(file.cache_dir.map(|p| base.join(p))),
            cache_size: match (args.cache_size, file.cache_size) {
                (Some(n), _) => n,
                (None, Some(s)) => {
                    parse_size(&s).map_err(|e| anyhow::anyhow!("cache_size: {e}"))?
                }
                (None, None) => DEFAULT_CACHE_SIZE,
            },
            models: args.models.or(file.models.map(|p| base.join(p))),
            probe_cache: args.probe_cache.or(file.probe_cache.map(|p| base.join(p))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_read_as_bytes_or_binary_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4 << 10));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("64G"), Ok(64 << 30));
        assert_eq!(parse_size("2TB"), Ok(2 << 40));
        for bad in ["", "G", "1.5G", "-1", "12X", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?} is not a size");
        }
    }
}
