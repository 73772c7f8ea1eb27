//! Issue 19: heavy local work never starves membership. One node of three runs SqueezeNet on
//! lavapipe (which takes every core) from many threads at once and loads and unloads another
//! model over and over, for ten seconds; no node may suspect another meanwhile. The node runs
//! such work at a lower priority than its network threads (node/src/priority.rs). On this
//! two-core machine the test also passed with that demotion switched off (twice, 2026-11-24):
//! it guards the promise, it has not shown the starvation the issue reported.

mod cluster_harness;
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cluster_harness::*;
use vkml::cluster::Secret;
use vkml::distributed::client::ClusterClient;

const LOAD_FOR: Duration = Duration::from_secs(10);

#[test]
fn a_node_busy_on_every_core_is_never_suspected() {
    if common::skip_vulkan() {
        return;
    }
    let _g = serial();
    let c = Cluster::new("load");
    // Lavapipe where there is no GPU: its shader compiles and runs take every core. The
    // caps leave the model whole on one node.
    let extra = |cap: u64| {
        [
            "--device",
            "vulkan",
            "--device-memory-limit",
            &cap.to_string(),
        ]
        .map(String::from)
    };
    let heavy = common::fixture("squeezenet_1_1");
    let cap = 64 << 20;
    let a = c.start_opts("a", &[], &extra(cap), None, &[]);
    let b = c.start_opts("b", &[&a], &extra(cap), None, &[]);
    let n3 = c.start_opts("c", &[&a], &extra(cap), None, &[]);
    let nodes = [&a, &b, &n3];
    let start = Instant::now() - Duration::from_secs(60);
    converged(&nodes, start, Duration::from_secs(20)).unwrap_or_else(|| panic!("{}", logs(&nodes)));
    std::thread::sleep(Duration::from_millis(500));

    let secret = Secret::read(&c.key).unwrap();
    let client = ClusterClient::connect(&a.addr, &secret).unwrap();
    let light = common::fixture("mnist_cnn");
    let model = Arc::new(client.load(&heavy.join("model.onnx"), |_| {}).unwrap());
    let set = Arc::new(common::data_sets_in(&heavy).remove(0));
    let busy_since = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU64::new(0));
    let threads = 2 * std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let runners: Vec<_> = (0..threads)
        .map(|_| {
            let (model, stop, runs, set) = (model.clone(), stop.clone(), runs.clone(), set.clone());
            std::thread::spawn(move || {
                let feeds = set.feeds();
                while !stop.load(Ordering::Relaxed) {
                    model.run(&feeds).expect("a run on a busy node");
                    runs.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut loads = 0;
    while busy_since.elapsed() < LOAD_FOR {
        let m = client.load(&light.join("model.onnx"), |_| {}).unwrap();
        m.unload().unwrap();
        loads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for r in runners {
        r.join().unwrap();
    }
    let runs = runs.load(Ordering::Relaxed);
    assert!(
        runs > 0 && loads > 0,
        "the node was not busy: {runs} runs, {loads} loads"
    );
    for n in nodes {
        for other in ["a", "b", "c"] {
            for state in ["suspect", "dead"] {
                assert!(
                    n.saw(other, state, busy_since, Duration::ZERO).is_none(),
                    "{} saw {other} {state} while a ran {runs} runs on {threads} threads and \
                     {loads} loads:\n{}",
                    n.name,
                    logs(&nodes)
                );
            }
        }
    }
    drop(model);
    client.close();
}

/// Every worker of a node's main runtime blocked for 3 s (CPU-bound work or a long blocking
/// call on all of them) must not make the node look dead: membership runs on its own thread
/// and its own endpoint. With gossip on the main runtime (before 433d557), 3 s without an
/// answer to a probe is a death verdict: probes time out in 150 ms, suspicion lasts 1 s.
#[test]
fn a_node_whose_runtime_stalls_is_not_suspected() {
    let _g = serial();
    let c = Cluster::new("stall");
    let a = c.start("a", &[]);
    let b = c.start("b", &[&a]);
    let before = Instant::now();
    let s = c.start_opts("s", &[&a], &[], Some("stall = [[3.0, 6.0]]\n"), &[]);
    let long_ago = before - Duration::from_secs(60);
    converged(&[&a, &b, &s], long_ago, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no convergence:\n{}", logs(&[&a, &b, &s])));
    // Past the window, and the 1 s a suspicion would take to become a verdict.
    let past = before + Duration::from_secs(8);
    std::thread::sleep(past.saturating_duration_since(Instant::now()));
    assert!(
        s.log().contains("the runtime stalls"),
        "the stall was injected:\n{}",
        s.log()
    );
    for n in [&a, &b] {
        for state in ["suspect", "dead"] {
            assert!(
                n.saw("s", state, before, Duration::ZERO).is_none(),
                "{} saw s {state} while its runtime stalled:\n{}",
                n.name,
                logs(&[&a, &b, &s])
            );
        }
    }
}
