//! A node's part of a model split over several nodes, run in process: a run waiting for another
//! node's value holds no thread (issue 18: a participant's thread count followed the runs it
//! had in flight, each parked on a thread of its own until its values came). Alone in its
//! binary, so that no other test's threads come and go while this one counts them.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vkml::exec::{RemoteHooks, RunLink};
use vkml::graph::{Graph, ValueId};
use vkml::ops::ValueType;
use vkml::tensor::{DType, Tensor};

/// What leaves the fragment: nothing, here (its values never come, so nothing finishes).
struct Nowhere;

impl RemoteHooks for Nowhere {
    fn send(&self, _: ValueId, _: &[String], _: &Tensor) {}
    fn output(&self, _: usize, _: &Tensor) {}
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn runs_waiting_for_another_node_hold_no_thread() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mnist_cnn/model.onnx");
    let graph = Graph::from_model(&vkml::onnx::load(&path).unwrap()).unwrap();
    let input = ValueType::new(DType::F32, vec![1, 1, 28, 28]);
    // Two CPU nodes, neither able to hold the model alone; the one whose chunks read a value
    // from the other.
    let exe = common::cpu_fragment(
        graph,
        &[input],
        &[("a", Some(60_000)), ("b", Some(150_000))],
        |plan| {
            let t = plan
                .transfers
                .iter()
                .find(|t| t.cross_host)
                .expect("the caps split the model");
            plan.placement[plan.chunks[t.to_chunk].ops[0]].node.clone()
        },
    );
    let x = Tensor::from_vec(vec![1, 1, 28, 28], vec![0.5f32; 784]);
    let links: Arc<Mutex<Vec<RunLink>>> = Arc::default();
    let (tx, rx) = mpsc::channel();
    let before = threads();
    const RUNS: usize = 200;
    for _ in 0..RUNS {
        let (links, tx) = (links.clone(), tx.clone());
        exe.start_fragment(
            vec![(0, x.clone())],
            Arc::new(Nowhere),
            move |l| links.lock().unwrap().push(l),
            Box::new(move |r| tx.send(r.map_err(|e| e.to_string())).unwrap()),
        )
        .unwrap();
    }
    let during = threads();
    assert!(
        during <= before + 4,
        "{RUNS} runs waiting for another node took {} threads ({before} -> {during})",
        during.saturating_sub(before)
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "a run waiting for a value that never comes ended"
    );
    // Given up, each ends once, with the reason.
    for l in links.lock().unwrap().iter() {
        l.abort(vkml::Error::Device("given up by the test".into()));
    }
    for i in 0..RUNS {
        let r = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("run {i} of {RUNS} did not end after its abort"));
        assert_eq!(r, Err("device error: given up by the test".into()));
    }
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "a run ended twice"
    );
}
