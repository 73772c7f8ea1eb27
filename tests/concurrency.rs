//! One session shared by 8 threads, each running 20 times with inputs that differ from its
//! neighbours' at every step; every result is checked against its own reference, so a run that
//! picked up another run's buffers shows.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::DataSet;
use vkml::{DeviceSelection, Session};

const THREADS: usize = 8;
const RUNS: usize = 20;

fn hammer(session: &Session, sets: &[DataSet], context: &str) {
    assert!(
        sets.len() >= 2,
        "needs several data sets to tell runs apart"
    );
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let done = &done;
            s.spawn(move || {
                for i in 0..RUNS {
                    let set = &sets[(t + i) % sets.len()];
                    common::run_and_check(session, set, &format!("{context} thread {t} run {i}"));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert_eq!(done.load(Ordering::Relaxed), THREADS * RUNS);
}

fn check(name: &str, devices: DeviceSelection, limit: Option<u64>) {
    let session = Session::load(common::model_path(name), common::options(devices, limit))
        .unwrap_or_else(|e| panic!("{name} on {devices:?}: {e}"));
    let sets = common::data_sets(name);
    hammer(
        &session,
        &sets,
        &format!("{name} on {devices:?} limit {limit:?}"),
    );
}

#[test]
fn mnist_cnn_threads_on_cpu() {
    check("mnist_cnn", DeviceSelection::Cpu, None);
}

#[test]
fn mnist_cnn_threads_on_vulkan() {
    if common::skip_vulkan() {
        return;
    }
    check("mnist_cnn", DeviceSelection::Vulkan, None);
}

#[test]
fn mlp_threads_on_auto() {
    if common::skip_vulkan() {
        return;
    }
    check("mlp", DeviceSelection::Auto, None);
}

/// Runs in flight at once across a CPU/GPU boundary.
#[test]
fn mnist_cnn_threads_split_between_vulkan_and_cpu() {
    if common::skip_vulkan() {
        return;
    }
    let limit = common::split_limit("mnist_cnn");
    check("mnist_cnn", DeviceSelection::Auto, Some(limit));
}

/// Different batch sizes from different threads at once: plans for several shapes in flight.
#[test]
fn dynamic_batches_from_many_threads() {
    check("mnist_cnn_dynamic", DeviceSelection::Cpu, None);
    if !common::skip_vulkan() {
        check("mnist_cnn_dynamic", DeviceSelection::Vulkan, None);
    }
}

/// Two models on one GPU, run in turn from one thread: each model's runs are armed ahead
/// (exec/gpu.rs, `ArmSlot`), and every run of the other model disarms the armed one, which
/// then runs on stale inputs and is submitted again; every result is checked against its
/// reference, so a disarmed run whose results leaked into a later one shows.
#[test]
fn two_models_in_turn_on_one_gpu() {
    if common::skip_vulkan() {
        return;
    }
    let load = |name: &str| {
        let options = common::options(DeviceSelection::Vulkan, None);
        Session::load(common::model_path(name), options).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let (a, b) = (load("mnist_cnn"), load("mlp"));
    let (sets_a, sets_b) = (common::data_sets("mnist_cnn"), common::data_sets("mlp"));
    for i in 0..12 {
        let set = &sets_a[i % sets_a.len()];
        common::run_and_check(&a, set, &format!("mnist_cnn run {i}"));
        // Twice in a row now and then: the second finds its own recording armed.
        for k in 0..1 + i % 2 {
            let set = &sets_b[(i + k) % sets_b.len()];
            common::run_and_check(&b, set, &format!("mlp run {i}.{k}"));
        }
    }
}
