//! Bad models and bad inputs give errors that name the problem; none panics, and a session that
//! refused a bad run still serves good ones.

mod common;

use vkml::{DeviceSelection, Session, Tensor};

fn mnist() -> (Session, common::DataSet) {
    let session = common::load("mnist_cnn", DeviceSelection::Cpu);
    let set = common::data_sets("mnist_cnn").remove(0);
    (session, set)
}

/// The error of a run that must fail, as text; the session must still work afterwards.
fn run_error(session: &Session, inputs: &[(&str, Tensor)], good: &common::DataSet) -> String {
    let err = match session.run(inputs) {
        Ok(out) => panic!("run accepted bad inputs {inputs:?} and returned {out:?}"),
        Err(e) => e.to_string(),
    };
    assert!(!err.trim().is_empty(), "empty error message");
    common::run_and_check(session, good, "a good run after a refused one");
    err
}

fn assert_mentions(err: &str, what: &[&str]) {
    for w in what {
        assert!(err.contains(w), "error {err:?} does not mention {w:?}");
    }
}

#[test]
fn wrong_shape_is_refused() {
    let (session, set) = mnist();
    let bad = Tensor::zeros(vkml::DType::F32, vec![1, 1, 27, 28]);
    let err = run_error(&session, &[("input", bad)], &set);
    assert_mentions(&err, &["input", "27"]);
}

#[test]
fn wrong_rank_is_refused() {
    let (session, set) = mnist();
    let bad = Tensor::zeros(vkml::DType::F32, vec![28, 28]);
    let err = run_error(&session, &[("input", bad)], &set);
    assert_mentions(&err, &["input"]);
}

#[test]
fn wrong_dtype_is_refused() {
    let (session, set) = mnist();
    let bad = Tensor::zeros(vkml::DType::I32, vec![1, 1, 28, 28]);
    let err = run_error(&session, &[("input", bad)], &set);
    assert_mentions(&err, &["input"]);
    assert!(
        err.contains("int32") || err.contains("float"),
        "error {err:?} names neither the given nor the expected dtype"
    );
}

#[test]
fn missing_input_is_refused() {
    let (session, set) = mnist();
    let err = run_error(&session, &[], &set);
    assert_mentions(&err, &["input"]);
}

#[test]
fn extra_input_is_refused() {
    let (session, set) = mnist();
    let mut inputs = set.feeds();
    inputs.push(("bogus_extra", Tensor::zeros(vkml::DType::F32, vec![1])));
    let err = run_error(&session, &inputs, &set);
    assert_mentions(&err, &["bogus_extra"]);
}

#[test]
fn duplicate_input_is_refused() {
    let (session, set) = mnist();
    let mut inputs = set.feeds();
    inputs.push(inputs[0].clone());
    run_error(&session, &inputs, &set);
}

#[test]
fn wrong_shape_on_a_dynamic_model_is_refused() {
    let session = common::load("mnist_cnn_dynamic", DeviceSelection::Cpu);
    let set = common::data_sets("mnist_cnn_dynamic").remove(0);
    // The batch is free; the image size is not.
    let bad = Tensor::zeros(vkml::DType::F32, vec![2, 1, 28, 30]);
    let err = run_error(&session, &[("input", bad)], &set);
    assert_mentions(&err, &["input"]);
}

#[test]
fn plan_summary_refuses_bad_inputs_too() {
    let (session, _) = mnist();
    let bad = Tensor::zeros(vkml::DType::F32, vec![1, 1, 27, 28]);
    assert!(session.plan_summary(&[("input", bad)]).is_err());
}

#[test]
fn truncated_model_is_refused() {
    let path = common::malformed("truncated.onnx");
    let err = match Session::load(&path, common::options(DeviceSelection::Cpu, None)) {
        Ok(_) => panic!("a truncated model loaded"),
        Err(e) => e.to_string(),
    };
    assert!(!err.trim().is_empty());
}

#[test]
fn missing_model_file_names_the_path() {
    let path = common::fixtures_dir().join("no_such_model.onnx");
    let err = match Session::load(&path, common::options(DeviceSelection::Cpu, None)) {
        Ok(_) => panic!("a missing model loaded"),
        Err(e) => e.to_string(),
    };
    assert_mentions(&err, &["no_such_model.onnx"]);
}

#[test]
fn non_model_file_is_refused() {
    let path = common::malformed("not_a_tensor.pb");
    assert!(Session::load(&path, common::options(DeviceSelection::Cpu, None)).is_err());
}

/// Names both the op type and the node, at load or at the latest at the first run.
#[test]
fn unsupported_op_names_op_and_node() {
    let path = common::malformed("unsupported_op.onnx");
    let err = match Session::load(&path, common::options(DeviceSelection::Cpu, None)) {
        Err(e) => e.to_string(),
        Ok(session) => {
            let x = Tensor::from_vec(vec![3, 3], vec![1.0f32; 9]);
            match session.run(&[("x", x)]) {
                Ok(_) => panic!("Det ran, but it is not an op this runtime has"),
                Err(e) => e.to_string(),
            }
        }
    };
    assert_mentions(&err, &["Det", "det_node"]);
}

#[test]
fn tensor_files_that_are_not_tensors_are_refused() {
    let pb = common::malformed("not_a_tensor.pb");
    let npy = common::malformed("not_a_tensor.npy");
    assert!(vkml::io::read_pb(pb.as_path()).is_err());
    assert!(vkml::io::read_tensor_file(pb.as_path()).is_err());
    assert!(vkml::io::read_npy(npy.as_path()).is_err());
    assert!(vkml::io::read_tensor_file(npy.as_path()).is_err());
}

#[test]
fn no_vulkan_device_index_out_of_range() {
    let path = common::model_path("mlp");
    let opts = common::options(DeviceSelection::VulkanIndex(64), None);
    match Session::load(&path, opts) {
        Ok(_) => panic!("a session on vulkan:64 loaded"),
        Err(e) => assert!(!e.to_string().trim().is_empty()),
    }
}

#[test]
fn a_model_larger_than_every_device_is_refused_at_load() {
    let path = common::fixtures_dir().join("mnist_cnn/model.onnx");
    let options = vkml::SessionOptions {
        devices: DeviceSelection::Cpu,
        // Far below the CNN's weights (about 100 KB): no device can hold its first layers.
        device_memory_limit: Some(1_000),
        ..Default::default()
    };
    let err = match Session::load(&path, options) {
        Ok(_) => panic!("a 1,000-byte budget accepted the CNN"),
        Err(e) => e,
    };
    assert!(matches!(err, vkml::Error::Placement(_)), "{err:?}");
    assert_mentions(&err.to_string(), &["no device", "memory limit"]);
}
