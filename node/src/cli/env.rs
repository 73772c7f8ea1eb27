//! The binary's edge with its environment: the only place `VKML_*` settings are read. The
//! library takes them as a [`Tuning`] value.

use anyhow::{Context, Result};
use vkml::Tuning;
use vkml::cluster::FaultConfig;
use vkml::cluster::tensors::{MAX_LANES, default_lanes};

/// Variables the test suite, the scripts and the benches read for themselves; this program
/// ignores them without a warning.
const NOT_OURS: &[&str] = &[
    "VKML_SKIP_VULKAN",
    "VKML_TEST_GPU",
    "VKML_SKIP_CONFORMANCE",
    "VKML_CONFORMANCE_UPDATE",
    "VKML_CONFORMANCE_THREADS",
    "VKML_CONFORMANCE_TIMEOUT",
    "VKML_ONNX_TESTS",
    "VKML_NO_INSTALL",
    "VKML_NODE_BIN",
];

/// A node's own variables (docs/CLUSTER.md): read by [`tensor_lanes`], [`faults`],
/// [`lease_grace`] and [`sequence_idle`].
const CLUSTER: &[&str] = &[
    "VKML_FAULTS",
    "VKML_TENSOR_LANES",
    "VKML_LEASE_GRACE",
    "VKML_SEQUENCE_IDLE",
];

/// The tuning the environment asks for. Values that are not understood, and `VKML_*` names
/// nothing reads (a typo would otherwise change nothing, silently), are warned about.
pub fn tuning() -> Tuning {
    let vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("VKML_"))
        .collect();
    for (name, _) in &vars {
        let known = vkml::tuning::VARIABLES.iter().any(|(n, _)| n == name)
            || NOT_OURS.contains(&name.as_str())
            || CLUSTER.contains(&name.as_str())
            || name.starts_with("VKML_BENCH_");
        if !known {
            tracing::warn!(
                "{name} is not a setting of vkml-node; ignored (settings: {})",
                vkml::tuning::VARIABLES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let (tuning, warnings) = Tuning::from_vars(vars);
    for w in warnings {
        tracing::warn!("{w}");
    }
    tuning
}

/// The connections a node stripes a large tensor over: `VKML_TENSOR_LANES` (1 to 16), else
/// min(4, cores).
pub fn tensor_lanes() -> usize {
    match std::env::var("VKML_TENSOR_LANES") {
        Err(_) => default_lanes(),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_LANES).contains(&n) => n,
            _ => {
                tracing::warn!(
                    "VKML_TENSOR_LANES={v:?} is not a number from 1 to {MAX_LANES}; ignored"
                );
                default_lanes()
            }
        },
    }
}

/// How long a node keeps an idle sequence's values: `VKML_SEQUENCE_IDLE` seconds (0.1 to
/// 86400, fractions allowed), else 600.
pub fn sequence_idle() -> std::time::Duration {
    seconds(
        "VKML_SEQUENCE_IDLE",
        0.1..=86400.0,
        vkml::cluster::DEFAULT_SEQUENCE_IDLE,
    )
}

/// How long a model outlives the client connection that loaded it: `VKML_LEASE_GRACE`
/// seconds (0 to 3600, fractions allowed), else 5.
pub fn lease_grace() -> std::time::Duration {
    seconds(
        "VKML_LEASE_GRACE",
        0.0..=3600.0,
        vkml::cluster::DEFAULT_LEASE_GRACE,
    )
}

/// Variable `name` as seconds within `range`, else `default` (a value out of range or not a
/// number is warned about).
fn seconds(
    name: &str,
    range: std::ops::RangeInclusive<f64>,
    default: std::time::Duration,
) -> std::time::Duration {
    let Ok(v) = std::env::var(name) else {
        return default;
    };
    match v.trim().parse::<f64>() {
        Ok(s) if range.contains(&s) => std::time::Duration::from_secs_f64(s),
        _ => {
            tracing::warn!(
                "{name}={v:?} is not a number of seconds from {} to {}; ignored",
                range.start(),
                range.end()
            );
            default
        }
    }
}

/// The fault plan `VKML_FAULTS` names (a TOML file), if it is set: for tests of the cluster.
pub fn faults() -> Result<Option<FaultConfig>> {
    let Some(path) = std::env::var_os("VKML_FAULTS") else {
        return Ok(None);
    };
    let path = std::path::PathBuf::from(path);
    FaultConfig::read(&path)
        .map(Some)
        .with_context(|| format!("VKML_FAULTS={}", path.display()))
}
