//! Findings of past campaigns, replayed: each one crashed a node before its fix. A replay runs
//! the case in a process of its own under an address-space cap (an allocation sized from an
//! untrusted length aborts it, as it did the campaign's worker) and must end with the
//! outcome that the fix gives.

use std::path::Path;
use std::process::Command;

fn replay(finding: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/findings")
        .join(finding);
    let exe = env!("CARGO_BIN_EXE_vkml-fuzz");
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 8000000 && exec \"$0\" replay \"$1\"")
        .arg(exe)
        .arg(&dir)
        .output()
        .expect("the replay starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{finding}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_fragment_with_an_untyped_value_is_refused_not_a_panic() {
    // Was "panic: typed at node/src/exec/plan.rs:168".
    let out = replay("frames-untyped-fragment");
    assert!(
        out.contains("refused: protocol: malformed fragment: value # of node _ (Add) has no"),
        "{out}"
    );
}

#[test]
fn a_huge_announced_length_allocates_nothing_up_front() {
    // Was "memory allocation of 219740184864 bytes failed": a model's length taken from the
    // Submit frame and allocated before any byte came.
    // Outcomes are shortened and their numbers masked; the frames after it are answered.
    let out = replay("frames-huge-length");
    assert!(out.starts_with("soup member|error: protocol:"), "{out}");
}
