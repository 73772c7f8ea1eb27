//! The ten-minute soak (tests/soak/mod.rs): three loopback nodes, 48 threads running a split
//! model through its owner's connection, 16 clients loading, running and abandoning a small
//! one and one submitting bad models, a node killed (SIGKILL) and restarted every two minutes,
//! another frozen (SIGSTOP) for 6 s halfway between, a 3 s partition every minute.
//!
//!     cargo bench --bench soak [-- --minutes N] [--samples FILE.csv] [--kill-every SECONDS]
//!                                  [--calm]
//!
//! `VKML_NODE_BIN` names the vkml-node binary to start (the GPU machine runs a staged copy;
//! by default, the one cargo built).
//!
//! `--calm` leaves out the kills, freezes and partitions: 64 callers (48 threads on the split
//! model and 16 clients) against a three-node split for the whole time, where no run may fail
//! (issue 20's load). The summary gives the successful runs' p50, p99 and p99.9 latency.
//!
//! Prints the run counts, the slowest run, each node process's growth of RSS, threads and open
//! files after a two-minute warmup, and anything left loaded; exits 1 when a promise broke.
//! Growth is judged on node lives with at least three minutes after their warmup (see
//! `soak::Growth::grew`).

#[path = "../tests/cluster_harness/mod.rs"]
mod cluster_harness;
#[path = "../tests/soak/mod.rs"]
mod soak;

use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let minutes: u64 = args
        .iter()
        .position(|a| a == "--minutes")
        .and_then(|i| args.get(i + 1))
        .map_or(10, |m| m.parse().expect("--minutes N"));
    // `--kill-every S` longer than the soak keeps every node up: growth measured over whole
    // lives, with no peer's share moving onto a node mid-life.
    let kill_every: u64 = args
        .iter()
        .position(|a| a == "--kill-every")
        .and_then(|i| args.get(i + 1))
        .map_or(120, |m| m.parse().expect("--kill-every SECONDS"));
    // `--calm`: no kills, freezes or partitions (issue 20's load: every run must succeed).
    let calm = args.iter().any(|a| a == "--calm");
    let kill_every = if calm { minutes * 60 * 4 } else { kill_every };
    let warmup = Duration::from_secs(120.min(minutes * 60 / 4));
    let judged_from = Duration::from_secs(180);
    let plan = soak::Plan {
        duration: Duration::from_secs(minutes * 60),
        s_threads: 48,
        t_clients: 16,
        kill_every: Duration::from_secs(kill_every),
        down_for: Duration::from_secs(3),
        partition_every: Duration::from_secs(if calm { minutes * 60 * 4 } else { 60 }),
        partition_for: Duration::from_secs(3),
        freeze_for: Duration::from_secs(6),
    };
    // Every sample (seconds, node, pid, RSS KiB and its anonymous and lazily freed parts,
    // threads, open files), for a trend over time.
    let samples = args
        .iter()
        .position(|a| a == "--samples")
        .and_then(|i| args.get(i + 1))
        .cloned();
    println!("soak: {plan:?}");
    let report = soak::soak("soak-bench", plan);
    println!("{}", soak::summary(&report, warmup, judged_from));
    if let Some(path) = samples {
        let mut csv = String::from("at_s,node,pid,rss_kib,anon_kib,lazy_free_kib,threads,fds\n");
        for s in &report.samples {
            csv.push_str(&format!(
                "{:.1},{},{},{},{},{},{},{}\n",
                s.at, s.node, s.pid, s.rss_kib, s.anon_kib, s.lazy_free_kib, s.threads, s.fds
            ));
        }
        std::fs::write(&path, csv).expect("writing --samples");
    }
    let lives = soak::growth(&report, warmup);
    let judged = lives.iter().filter(|g| g.judged(judged_from)).count();
    println!("node lives judged for growth: {judged} of {}", lives.len());
    let grew = judged == 0 || lives.iter().any(|g| g.grew(judged_from));
    // Calm, a run failing for any reason breaks the promise.
    let broken = report.over_10s > 0
        || (calm && (report.failed_named > 0 || report.retried > 0))
        || report.failed_other > 0
        || report.wrong > 0
        || !report.crashed.is_empty()
        || !report.leftovers.is_empty()
        || grew;
    println!(
        "{}",
        if broken {
            "soak: a promise broke"
        } else {
            "soak: every promise held"
        }
    );
    if broken {
        std::process::exit(1);
    }
}
