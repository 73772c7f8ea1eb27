//! A bounded campaign per target, in the test command: a few thousand cases each, from a fixed
//! seed, on two workers. Any panic, abort or hang fails the test, naming the saved finding
//! (`vkml-fuzz replay DIR` shows it). The long campaign is `cargo bench -p vkml-fuzz`.

use std::path::PathBuf;
use std::time::Duration;

use vkml_fuzz::case::Target;
use vkml_fuzz::driver::{self, Config};

fn campaign(target: Target, cases: u64, seed_roots: Vec<PathBuf>) {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_vkml-fuzz"));
    let args = ["--address-space-mib", "16384"].map(String::from);
    let mut cfg = Config::new(&exe, target, seed_roots, &args);
    cfg.cases = cases;
    cfg.jobs = 2;
    cfg.seed = 20_261_124;
    cfg.timeout = Duration::from_secs(60);
    cfg.findings =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{}", target.name()));
    let _ = std::fs::remove_dir_all(&cfg.findings);
    let report = driver::run(&cfg).expect("the campaign runs");
    driver::print_report(target, &report);
    assert_eq!(report.cases, cases, "every case ran");
    // A campaign whose cases all end the same way explores nothing.
    assert!(
        report.outcomes.len() > 20,
        "only {} outcomes",
        report.outcomes.len()
    );
    let findings: Vec<String> = report
        .findings
        .iter()
        .map(|f| {
            format!(
                "{:?}: {} (vkml-fuzz replay {})",
                f.kind,
                f.message,
                f.dir.display()
            )
        })
        .collect();
    assert!(findings.is_empty(), "findings:\n{}", findings.join("\n"));
}

#[test]
fn tensor_files_never_crash_a_reader() {
    campaign(Target::Tensors, 5000, Vec::new());
}

#[test]
fn frames_from_a_client_holding_the_key_never_crash_a_node() {
    // About half a minute on two loaded cores (the test command's budget; the long campaign
    // is `cargo bench -p vkml-fuzz`).
    campaign(Target::Frames, 12_000, Vec::new());
}

/// Mutated models from the repository's fixtures and, where `VKML_ONNX_TESTS` names ONNX's
/// backend tests, their node tests: sizes the fuzzer makes up (huge Range, ConstantOfShape,
/// Tile and Pad sizes, pads of i64::MAX, FIFOs as external data) end in errors, not in
/// aborts, panics or hangs.
#[test]
fn models_never_crash_a_session() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seeds = vec![root.join("tests/fixtures")];
    // Where the conformance tests look for them (tests/README.md).
    let onnx = std::env::var_os("VKML_ONNX_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/onnx-tests/onnx-1.22.0"));
    if onnx.join("node").is_dir() {
        seeds.push(onnx.join("node"));
    }
    campaign(Target::Models, 12_000, seeds);
}
