//! Where a fragment's CPU chunks run (exec/run.rs, `drain_soon`): a short chunk on the thread
//! that made it ready, which for a participant is the network task that started the run, so
//! that no pool thread has to wake for it; a long one on the CPU pool, never holding up that
//! thread. Both checked against onnxruntime's outputs of the fixtures.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use vkml::exec::RemoteHooks;
use vkml::graph::{Graph, ValueId};
use vkml::ops::ValueType;
use vkml::tensor::Tensor;

/// Keeps the run's output and the thread it was handed over on.
#[derive(Default)]
struct Seen(Mutex<Option<(ThreadId, Tensor)>>);

impl RemoteHooks for Seen {
    fn send(&self, _: ValueId, _: &[String], _: &Tensor) {}
    fn output(&self, _: usize, t: &Tensor) {
        *self.0.lock().unwrap() = Some((std::thread::current().id(), t.clone()));
    }
}

/// Runs fixture `model` as a one-node plan's fragment started on this thread, checks its
/// output against onnxruntime's, and returns the thread the output was made on.
fn fragment_run(model: &str) -> ThreadId {
    let dir = common::fixture(model);
    let graph = Graph::from_model(&vkml::onnx::load(&dir.join("model.onnx")).unwrap()).unwrap();
    let set = common::read_data_set(&dir.join("test_data_set_0"));
    let x = set.inputs[0].1.clone();
    let exe = common::cpu_fragment(graph, &[ValueType::of(&x)], &[("a", None)], |_| "a".into());
    let seen = Arc::new(Seen::default());
    let (tx, rx) = mpsc::channel();
    exe.start_fragment(
        vec![(0, x)],
        seen.clone(),
        |_| {},
        Box::new(move |r| tx.send(r.map_err(|e| e.to_string())).unwrap()),
    )
    .unwrap();
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the run ended")
        .expect("the run succeeded");
    let (thread, got) = seen.0.lock().unwrap().take().expect("an output");
    common::assert_tensor_close(model, &got, &set.outputs[0].1);
    thread
}

#[test]
fn a_short_chunk_runs_on_the_thread_that_starts_it() {
    // The MNIST-like CNN: about a million operations, 24 us on one core.
    assert_eq!(fragment_run("mnist_cnn"), std::thread::current().id());
}

#[test]
fn a_long_chunk_runs_on_the_pool() {
    // SqueezeNet 1.1: hundreds of millions of operations.
    assert_ne!(fragment_run("squeezenet_1_1"), std::thread::current().id());
}
