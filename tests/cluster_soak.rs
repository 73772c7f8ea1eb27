//! The one-minute soak (tests/soak/mod.rs): three nodes, 24 threads running a split model,
//! 8 clients loading, running and abandoning a small one and one submitting bad models, a node
//! killed at 30 s, one frozen (SIGSTOP) for 4 s at 15 s and 45 s, and two partitions. The
//! ten-minute one is `cargo bench --bench soak` (BENCHMARKS.md); its lives are long enough to
//! judge growth, this one's are not.

mod cluster_harness;
mod soak;

use cluster_harness as harness;

use std::time::Duration;

#[test]
fn a_minute_of_kills_partitions_and_abandoned_models_leaves_every_run_ended_and_nothing_loaded() {
    let _serial = harness::serial();
    let warmup = Duration::from_secs(15);
    let plan = soak::Plan {
        duration: Duration::from_secs(60),
        s_threads: 24,
        t_clients: 8,
        kill_every: Duration::from_secs(30),
        down_for: Duration::from_secs(2),
        partition_every: Duration::from_secs(20),
        partition_for: Duration::from_secs(3),
        freeze_for: Duration::from_secs(4),
    };
    let report = soak::soak("soak", plan);
    let summary = soak::summary(&report, warmup, Duration::MAX);
    println!("{summary}");
    assert!(report.ok > 50, "too few runs succeeded:\n{summary}");
    assert!(
        report.s_ok > 10,
        "too few runs of the split model succeeded:\n{summary}"
    );
    assert_eq!(report.over_10s, 0, "runs took over 10 s:\n{summary}");
    assert_eq!(
        report.failed_other, 0,
        "runs failed without naming a node:\n{summary}"
    );
    assert_eq!(report.wrong, 0, "wrong outputs:\n{summary}");
    assert!(
        report.abandoned > 0,
        "no client walked away from a model:\n{summary}"
    );
    assert!(report.bad > 5, "too few bad models submitted:\n{summary}");
    assert_eq!(report.freezes.len(), 2, "{summary}");
    assert!(report.crashed.is_empty(), "a node died:\n{summary}");
    assert!(
        report.leftovers.is_empty(),
        "models left loaded:\n{summary}"
    );
}
