//! Every setting that changes how a model runs but not what it computes, as one value: a
//! session takes it in its options, so two sessions in one process may differ, and the library
//! never reads the environment. The binary reads `VKML_*` variables once, at its edge, through
//! [`Tuning::from_vars`].

use std::fmt::Write as _;

use crate::device::vulkan::{QueueFamily, VulkanOptions};
use crate::graph::Fusion;
use crate::ops::KernelTuning;
use crate::ops::tuning::{CoopKernels, GemmTiles, Gemv, SplitK};

/// How a session plans and runs. The default is what VKML measured fastest; the rest is for
/// A/B measurements and debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Where a GPU runs the plan: fuse chains of float elementwise ops into one dispatch
    /// (graph/fuse.rs), and row norms and SwiGLU activations into the few-row products that
    /// read them (graph/fuse_norm.rs); where none does, a Conv with the Add and activation
    /// reading it (graph/fuse_conv.rs). Off turns both off ([`Fusion::for_plan`]).
    pub fusion: Fusion,
    /// Choices among GPU kernels computing the same thing (split-K, tensor cores, tiles).
    pub kernels: KernelTuning,
    /// Queue a short single-GPU run ahead of its inputs (exec/gpu.rs, `ArmSlot`).
    pub arm: bool,
    /// Pass values between this process's GPUs through host memory they both import, moved
    /// by their copy engines alone (exec/bridge.rs), rather than by two copies on the CPU.
    pub bridge: bool,
    /// How Vulkan is opened (validation layer, queue family).
    pub vulkan: VulkanOptions,
    /// The most bytes one value (an input, a folded constant, an op's output) may take; a
    /// model whose shapes make a larger one fails to plan, naming the node, before anything is
    /// allocated for it. `None`: the largest memory budget among the session's devices (not
    /// capped by `device_memory_limit`, which only splits models), since a value larger than
    /// that fits nowhere anyway.
    pub max_value_bytes: Option<u64>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            fusion: Fusion::All,
            kernels: KernelTuning::default(),
            arm: true,
            bridge: true,
            vulkan: VulkanOptions::default(),
            max_value_bytes: None,
        }
    }
}

/// The variables [`Tuning::from_vars`] reads, and what each takes.
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "VKML_FUSION",
        "1 (all), chains (elementwise chains only) or 0 (none)",
    ),
    (
        "VKML_CONV_SPLITK",
        "0 (off) or N (at most N slices); unset: the shape rule",
    ),
    (
        "VKML_GEMM_SPLITK",
        "0 (off) or N (at most N slices); unset: the shape rule",
    ),
    ("VKML_GEMM_COOP", "any, khr, nv2, nv2wide, nv2narrow or off"),
    (
        "VKML_GEMM_KERNEL",
        "auto, gemm (64x64 tiles) or gemm_big (128x128)",
    ),
    (
        "VKML_GEMV",
        "auto, unsplit, off, 1, 2, 4, 8, 16 or 32 (column vectors per workgroup of the few-row \
         MatMul kernel), LxS (L vectors, K split in S slices, S up to 64), wide1 ... wide32 \
         (one-row workgroups of 1,024), or rowL / rowLxS (one-row workgroups of 256)",
    ),
    ("VKML_ARM", "0 or 1"),
    ("VKML_BRIDGE", "0 or 1"),
    ("VKML_QUEUE", "compute or graphics"),
    ("VKML_VALIDATION", "0 or 1"),
    (
        "VKML_GPU_SPIN_US",
        "microseconds a waiter polls a GPU before sleeping in the driver (default 100)",
    ),
    (
        "VKML_MAX_VALUE_BYTES",
        "a number of bytes, the most one value may take; unset: the largest device budget",
    ),
];

impl Tuning {
    /// What the executor reads of these settings.
    pub fn launch(&self) -> crate::exec::Launch {
        crate::exec::Launch {
            arm: self.arm,
            bridge: self.bridge,
        }
    }

    /// The settings `VKML_*` variables among `vars` ask for (the binary passes
    /// `std::env::vars()`), and a warning for each value that is not understood (the
    /// default is kept then). Variables this does not know are left alone: the caller decides
    /// which other `VKML_*` names are its own.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> (Tuning, Vec<String>) {
        let mut t = Tuning::default();
        let mut warnings = Vec::new();
        for (name, value) in vars {
            let v = value.trim();
            let ok = match name.as_str() {
                "VKML_FUSION" => fusion(v).map(|f| t.fusion = f),
                "VKML_CONV_SPLITK" => split(v).map(|s| t.kernels.conv_splitk = s),
                "VKML_GEMM_SPLITK" => split(v).map(|s| t.kernels.gemm_splitk = s),
                "VKML_GEMM_COOP" => coop(v).map(|c| t.kernels.gemm_coop = c),
                "VKML_GEMM_KERNEL" => tiles(v).map(|g| t.kernels.gemm_tiles = g),
                "VKML_GEMV" => gemv(v).map(|g| t.kernels.gemv = g),
                "VKML_ARM" => flag(v).map(|b| t.arm = b),
                "VKML_BRIDGE" => flag(v).map(|b| t.bridge = b),
                "VKML_QUEUE" => queue(v).map(|q| t.vulkan.queue = q),
                "VKML_VALIDATION" => flag(v).map(|b| t.vulkan.validation = b),
                "VKML_GPU_SPIN_US" => v
                    .parse()
                    .ok()
                    .map(|us| t.vulkan.spin = Some(std::time::Duration::from_micros(us))),
                "VKML_MAX_VALUE_BYTES" => v.parse().ok().map(|b| t.max_value_bytes = Some(b)),
                _ => continue,
            };
            if ok.is_none() {
                let wanted = VARIABLES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or("", |(_, w)| w);
                warnings.push(format!(
                    "{name}={value:?} is not understood (it takes {wanted}); using the default"
                ));
            }
        }
        (t, warnings)
    }

    /// A fingerprint of what changes plans (fusion and kernel choices, not local diagnostics
    /// such as arming or validation), the same on every machine and build for the same
    /// settings: cluster nodes compare theirs before running each other's fragments.
    pub fn fingerprint(&self) -> u64 {
        // FNV-1a over a canonical text: std's hashers are not stable across builds.
        self.plan_settings()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
    }

    /// The settings that change plans, as text for messages ("fusion=on conv_splitk=auto ...").
    pub fn plan_settings(&self) -> String {
        let k = &self.kernels;
        let mut s = String::new();
        let _ = write!(
            s,
            "fusion={} conv_splitk={} gemm_splitk={} gemm_coop={:?} gemm_tiles={:?} gemv={:?}",
            match self.fusion {
                Fusion::All => "on",
                Fusion::Chains => "chains",
                Fusion::Off => "off",
                Fusion::Cpu => "cpu",
            },
            split_text(k.conv_splitk),
            split_text(k.gemm_splitk),
            k.gemm_coop,
            k.gemm_tiles,
            k.gemv,
        );
        s
    }
}

fn flag(v: &str) -> Option<bool> {
    match v {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

fn split(v: &str) -> Option<SplitK> {
    match v.parse::<usize>().ok()? {
        0 => Some(SplitK::Off),
        n => Some(SplitK::Forced(n)),
    }
}

fn split_text(s: SplitK) -> String {
    match s {
        SplitK::Auto => "auto".into(),
        SplitK::Off => "off".into(),
        SplitK::Forced(n) => n.to_string(),
    }
}

fn coop(v: &str) -> Option<CoopKernels> {
    Some(match v {
        "any" => CoopKernels::Any,
        "khr" => CoopKernels::Khr,
        "nv2" => CoopKernels::Nv2,
        "nv2wide" => CoopKernels::Nv2Wide,
        "nv2narrow" => CoopKernels::Nv2Narrow,
        "off" => CoopKernels::Off,
        _ => return None,
    })
}

fn tiles(v: &str) -> Option<GemmTiles> {
    Some(match v {
        "auto" => GemmTiles::Auto,
        "gemm" => GemmTiles::Small,
        "gemm_big" => GemmTiles::Big,
        _ => return None,
    })
}

fn fusion(v: &str) -> Option<Fusion> {
    match v {
        "chains" => Some(Fusion::Chains),
        _ => flag(v).map(|on| if on { Fusion::All } else { Fusion::Off }),
    }
}

fn gemv(v: &str) -> Option<Gemv> {
    let lanes = |l: &str| {
        matches!(l, "1" | "2" | "4" | "8" | "16" | "32")
            .then(|| l.parse().ok())
            .flatten()
    };
    let slices = |s: &str| s.parse().ok().filter(|s| (1..=64).contains(s));
    Some(match v {
        "auto" => Gemv::Auto,
        "unsplit" => Gemv::Unsplit,
        "off" => Gemv::Off,
        _ => match (
            v.strip_prefix("wide"),
            v.strip_prefix("row"),
            v.split_once('x'),
        ) {
            (Some(l), ..) => Gemv::Wide(lanes(l)?),
            (None, Some(r), _) => match r.split_once('x') {
                Some((l, s)) => Gemv::Row(lanes(l)?, slices(s)?),
                None => Gemv::Row(lanes(r)?, 1),
            },
            (None, None, Some((l, s))) => Gemv::Split(lanes(l)?, slices(s)?),
            (None, None, None) => Gemv::Lanes(lanes(v)?),
        },
    })
}

fn queue(v: &str) -> Option<QueueFamily> {
    Some(match v {
        "compute" => QueueFamily::Compute,
        "graphics" => QueueFamily::Graphics,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn variables_set_fields_and_bad_values_are_warned_about() {
        let (t, warnings) = Tuning::from_vars(vars(&[
            ("VKML_FUSION", "0"),
            ("VKML_CONV_SPLITK", "4"),
            ("VKML_GEMM_SPLITK", "0"),
            ("VKML_GEMM_COOP", "khr"),
            ("VKML_GEMM_KERNEL", "gemm_big"),
            ("VKML_ARM", " 0 "),
            ("VKML_BRIDGE", "0"),
            ("VKML_QUEUE", "graphics"),
            ("VKML_VALIDATION", "1"),
            ("VKML_MAX_VALUE_BYTES", "4096"),
            ("VKML_GPU_SPIN_US", "250"),
            ("HOME", "/root"),
        ]));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(t.fusion == Fusion::Off && !t.arm && !t.bridge);
        assert_eq!(t.kernels.conv_splitk, SplitK::Forced(4));
        assert_eq!(t.kernels.gemm_splitk, SplitK::Off);
        assert_eq!(t.kernels.gemm_coop, CoopKernels::Khr);
        assert_eq!(t.kernels.gemm_tiles, GemmTiles::Big);
        assert_eq!(t.vulkan.queue, QueueFamily::Graphics);
        assert!(t.vulkan.validation);
        assert_eq!(t.max_value_bytes, Some(4096));
        assert_eq!(t.vulkan.spin, Some(std::time::Duration::from_micros(250)));

        let (t, warnings) =
            Tuning::from_vars(vars(&[("VKML_GEMM_COOP", "fast"), ("VKML_FUSION", "no")]));
        assert_eq!(t, Tuning::default());
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings[0].contains("VKML_GEMM_COOP=\"fast\""),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains("khr"), "{}", warnings[0]);
    }

    #[test]
    fn every_gemv_spelling_parses_and_bad_ones_do_not() {
        let cases = [
            ("auto", Some(Gemv::Auto)),
            ("unsplit", Some(Gemv::Unsplit)),
            ("off", Some(Gemv::Off)),
            ("8", Some(Gemv::Lanes(8))),
            ("16x8", Some(Gemv::Split(16, 8))),
            ("wide4", Some(Gemv::Wide(4))),
            ("row8", Some(Gemv::Row(8, 1))),
            ("row32x16", Some(Gemv::Row(32, 16))),
            ("3", None),
            ("16x0", None),
            ("16x65", None),
            ("wide", None),
            ("row", None),
            ("row8x", None),
            ("row64x2", None),
        ];
        for (v, want) in cases {
            assert_eq!(gemv(v), want, "{v}");
        }
    }

    #[test]
    fn the_fingerprint_follows_plan_settings_only() {
        let base = Tuning::default();
        let mut no_fusion = base;
        no_fusion.fusion = Fusion::Off;
        let mut chains = base;
        chains.fusion = Fusion::Chains;
        assert_ne!(base.fingerprint(), chains.fingerprint());
        assert_ne!(no_fusion.fingerprint(), chains.fingerprint());
        let mut coop = base;
        coop.kernels.gemm_coop = CoopKernels::Off;
        let mut no_arm = base;
        no_arm.arm = false;
        no_arm.vulkan.validation = true;
        no_arm.max_value_bytes = Some(1);
        assert_ne!(base.fingerprint(), no_fusion.fingerprint());
        assert_ne!(base.fingerprint(), coop.fingerprint());
        assert_ne!(no_fusion.fingerprint(), coop.fingerprint());
        assert_eq!(base.fingerprint(), no_arm.fingerprint());
        // The fingerprint hashes this text (FNV-1a), not anything build-dependent.
        assert_eq!(
            base.plan_settings(),
            "fusion=on conv_splitk=auto gemm_splitk=auto gemm_coop=Any gemm_tiles=Auto gemv=Auto"
        );
    }
}
