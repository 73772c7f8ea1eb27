//! The binary's edge with its environment: the only place `VKML_*` settings are read. The
//! library takes them as a [`Tuning`] value.

use vkml::Tuning;

/// Variables the test suite, the scripts and the benches read for themselves; this program
/// ignores them without a warning.
const NOT_OURS: &[&str] = &[
    "VKML_SKIP_VULKAN",
    "VKML_TEST_GPU",
    "VKML_SKIP_CONFORMANCE",
    "VKML_CONFORMANCE_UPDATE",
    "VKML_ONNX_TESTS",
    "VKML_NO_INSTALL",
    "VKML_NODE_BIN",
];

/// Variables of the node that the cluster layer still reads itself (fault injection, tensor
/// lanes: docs/CLUSTER.md).
const CLUSTER: &[&str] = &["VKML_FAULTS", "VKML_TENSOR_LANES"];

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
