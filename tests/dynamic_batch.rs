//! mnist_cnn_dynamic declares its batch as "N" and computes its Reshape target at run time
//! (Shape -> Gather -> Unsqueeze -> Concat). It shares mnist_cnn's weights (same generator
//! seed), so mnist_cnn's single-image references are references for any batch of those images.

mod common;

use common::{DataSet, assert_outputs_match, concat_batch, data_sets, run_and_check};
use vkml::model::Dim;
use vkml::{DeviceSelection, Session};

const NAME: &str = "mnist_cnn_dynamic";

/// The four mnist_cnn images and their outputs stacked into one batch of `4 * repeat`.
fn stacked_mnist_batch(repeat: usize) -> DataSet {
    let singles = data_sets("mnist_cnn");
    let pick = |f: fn(&DataSet) -> &vkml::Tensor| -> vkml::Tensor {
        let parts: Vec<&vkml::Tensor> = (0..repeat).flat_map(|_| singles.iter().map(f)).collect();
        concat_batch(&parts)
    };
    DataSet {
        dir: common::fixture("mnist_cnn"),
        inputs: vec![("input".into(), pick(|s| &s.inputs[0].1))],
        outputs: vec![("probabilities".into(), pick(|s| &s.outputs[0].1))],
    }
}

fn check_batches(devices: DeviceSelection) {
    let session = common::load(NAME, devices);
    let sets = data_sets(NAME);
    assert_eq!(sets[0].inputs[0].1.shape()[0], 3);
    assert_eq!(sets[1].inputs[0].1.shape()[0], 5);
    let context = format!("{NAME} on {devices:?}");
    // Batch sizes the file's data sets have, then ones it does not, then back: every batch size
    // gets its own plan and none may disturb another's.
    run_and_check(&session, &sets[0], &context);
    run_and_check(&session, &sets[1], &context);
    for repeat in [2, 1] {
        let batch = stacked_mnist_batch(repeat);
        let got = session.run(&batch.feeds()).unwrap_or_else(|e| {
            panic!("{context}: batch {}: {e}", 4 * repeat);
        });
        assert_outputs_match(
            &format!("{context} batch {}", 4 * repeat),
            &got,
            &batch.outputs,
        );
    }
    for single in data_sets("mnist_cnn") {
        run_and_check(&session, &single, &format!("{context} batch 1"));
    }
    run_and_check(&session, &sets[0], &context);
}

#[test]
fn batch_sizes_on_cpu() {
    check_batches(DeviceSelection::Cpu);
}

#[test]
fn batch_sizes_on_vulkan() {
    if common::skip_vulkan() {
        return;
    }
    check_batches(DeviceSelection::Vulkan);
}

#[test]
fn declared_inputs_keep_the_symbolic_batch() {
    let session = Session::load(
        common::model_path(NAME),
        common::options(DeviceSelection::Cpu, None),
    )
    .unwrap();
    let inputs = session.inputs();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].name, "input");
    assert_eq!(inputs[0].dtype, Some(vkml::DType::F32));
    assert_eq!(
        inputs[0].dims,
        Some(vec![
            Dim::Sym("N".into()),
            Dim::Fixed(1),
            Dim::Fixed(28),
            Dim::Fixed(28)
        ])
    );
    let outputs = session.outputs();
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].name, "probabilities");
    assert_eq!(
        outputs[0].dims,
        Some(vec![Dim::Sym("N".into()), Dim::Fixed(10)])
    );
}

/// The static model's declared types, for contrast.
#[test]
fn declared_inputs_of_the_static_model() {
    let session = common::load("mnist_cnn", DeviceSelection::Cpu);
    let inputs = session.inputs();
    assert_eq!(inputs.len(), 1);
    assert_eq!(
        inputs[0].dims,
        Some(vec![
            Dim::Fixed(1),
            Dim::Fixed(1),
            Dim::Fixed(28),
            Dim::Fixed(28)
        ])
    );
}

/// A batch of 3 planned for the CPU must not be reused for a batch of 5: plans differ by shape.
#[test]
fn plan_summary_per_batch_size() {
    let session = common::load(NAME, DeviceSelection::Cpu);
    let sets = data_sets(NAME);
    for set in &sets {
        let summary = session.plan_summary(&set.feeds()).unwrap();
        assert!(
            summary.ops_per_device.get("cpu").copied().unwrap_or(0) > 0,
            "{summary:?}"
        );
    }
}
