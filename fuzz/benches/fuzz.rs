//! The long campaign: `cargo bench -p vkml-fuzz --bench fuzz -- [--target T] [--cases N]
//! [--jobs J] [--seed S] [--device cpu|vulkan]`. Keeps its corpus in target/fuzz-corpus/<T>
//! between runs and its findings in target/fuzz-findings/bench-<T>. Seeds: tests/fixtures and,
//! when VKML_ONNX_TESTS is set, ONNX's backend node tests.

use std::path::PathBuf;
use std::time::Duration;

use vkml_fuzz::case::Target;
use vkml_fuzz::driver::{self, Config};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let targets: Vec<Target> = match value("--target").as_deref() {
        Some("models") => vec![Target::Models],
        Some("tensors") => vec![Target::Tensors],
        Some("frames") => vec![Target::Frames],
        Some(other) => panic!("--target {other}: expected models, tensors or frames"),
        None => vec![Target::Models, Target::Tensors, Target::Frames],
    };
    let cases: u64 = value("--cases").map_or(100_000, |v| v.parse().expect("--cases N"));
    let device = value("--device").unwrap_or_else(|| "cpu".into());
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target_dir = repo.join("target");
    let mut seed_roots = vec![repo.join("tests/fixtures")];
    if let Some(dir) = std::env::var_os("VKML_ONNX_TESTS") {
        seed_roots.push(PathBuf::from(dir).join("node"));
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_vkml-fuzz"));
    let mut failed = false;
    for target in targets {
        let roots = if target == Target::Models {
            seed_roots.clone()
        } else {
            Vec::new()
        };
        let mut cfg = Config::new(&exe, target, roots, &["--device".into(), device.clone()]);
        cfg.cases = cases;
        if let Some(j) = value("--jobs") {
            cfg.jobs = j.parse().expect("--jobs N");
        }
        cfg.seed = value("--seed").map_or(1, |s| s.parse().expect("--seed S"));
        cfg.timeout = Duration::from_secs(60);
        cfg.corpus = Some(target_dir.join("fuzz-corpus").join(target.name()));
        cfg.findings = target_dir
            .join("fuzz-findings")
            .join(format!("bench-{}", target.name()));
        cfg.progress = true;
        let report = driver::run(&cfg).expect("the campaign runs");
        driver::print_report(target, &report);
        failed |= !report.findings.is_empty();
    }
    if failed {
        std::process::exit(1);
    }
}
