//! Every model the fuzzer once crashed or hung vkml with, kept in fuzz/regressions/<name>/
//! (model.onnx, test_data_set_0/, and `expect`: lines of text the outcome must each contain).
//! Each runs through `vkml-fuzz check` in a process of its own, under the worker's memory cap
//! and a time limit: a panic, an abort or a hang fails the test, and so does an outcome that no
//! longer names the problem (an `ok` where an error is due, or the wrong error).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

fn check(dir: &Path) -> Result<String, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vkml-fuzz"))
        .arg("check")
        .arg(dir)
        .args(["--address-space-mib", "16384"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start vkml-fuzz: {e}"))?;
    let start = Instant::now();
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {} s", LIMIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stderr.contains("panicked") {
        return Err(format!("{}: {stdout}\n{stderr}", out.status));
    }
    Ok(stdout)
}

#[test]
fn every_regression_ends_with_its_expected_outcome() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("fuzz/regressions")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "only {} regressions found", dirs.len());
    let mut failures = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let expect = std::fs::read_to_string(dir.join("expect"))
            .unwrap_or_else(|e| panic!("{name}/expect: {e}"));
        let wanted: Vec<&str> = expect.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!wanted.is_empty(), "{name}/expect is empty");
        match check(dir) {
            Ok(outcome) => match wanted.iter().find(|w| !outcome.contains(**w)) {
                None => eprintln!("{name}: {outcome}"),
                Some(w) => failures.push(format!("{name}: '{outcome}' lacks '{w}'")),
            },
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
