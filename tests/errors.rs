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
            let x = Tensor::from_vec(vec![1, 1, 4, 4], vec![1f32; 16]);
            match session.run(&[("x", x)]) {
                Ok(_) => panic!("MaxRoiPool ran, but it is not an op this runtime has"),
                Err(e) => e.to_string(),
            }
        }
    };
    assert_mentions(&err, &["MaxRoiPool", "roi_pool_node"]);
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

use common::onnx as mk;

fn load_built(test: &str, m: &mk::ModelProto) -> Result<Session, vkml::Error> {
    let path = mk::write(&mk::scratch(test), "m.onnx", m);
    Session::load(&path, common::options(DeviceSelection::Cpu, None))
}

/// y = Relu(x) over x: float[4].
fn relu_graph() -> mk::GraphProto {
    mk::GraphProto {
        name: "g".into(),
        node: vec![mk::node("Relu", "relu", &["x"], &["y"])],
        input: vec![mk::value("x", mk::FLOAT, Some(&[4]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
        ..Default::default()
    }
}

/// Opset 99 loaded as if it were the newest vkml knows; now it is refused, naming both.
#[test]
fn an_opset_newer_than_vkml_knows_is_refused() {
    let err = load_built("opset99", &mk::model(relu_graph(), 99))
        .err()
        .expect("opset 99 loaded")
        .to_string();
    assert_mentions(&err, &["opset 99", "27"]);
    assert!(load_built("opset27", &mk::model(relu_graph(), 27)).is_ok());
}

/// Two initializers of one name, or a graph input listed twice, make the model ambiguous:
/// both were accepted (the last one won); now they are refused by name.
#[test]
fn duplicate_initializers_and_inputs_are_refused() {
    let mut g = relu_graph();
    g.node = vec![mk::node("Add", "add", &["x", "c"], &["y"])];
    g.initializer = vec![
        mk::floats("c", &[4], &[1.0; 4]),
        mk::floats("c", &[4], &[2.0; 4]),
    ];
    let err = load_built("dup-init", &mk::model(g, 17))
        .err()
        .expect("loaded")
        .to_string();
    assert_mentions(&err, &["two initializers", "'c'"]);
    let mut g = relu_graph();
    g.input.push(mk::value("x", mk::FLOAT, Some(&[4])));
    let err = load_built("dup-input", &mk::model(g, 17))
        .err()
        .expect("loaded")
        .to_string();
    assert_mentions(&err, &["input 'x' twice"]);
}

/// y = ConstantOfShape([2^40]): 4 TiB, folded while planning. The process tried to allocate it
/// and was killed; now the load fails naming the node and the size.
#[test]
fn a_constant_of_4_tib_is_refused_naming_node_and_size() {
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![mk::node("ConstantOfShape", "fill", &["shape"], &["y"])],
        initializer: vec![mk::int64s("shape", &[1], &[1 << 40])],
        output: vec![mk::value("y", mk::FLOAT, None)],
        ..Default::default()
    };
    let err = load_built("cos-4tib", &mk::model(g, 17))
        .err()
        .expect("4 TiB loaded");
    assert!(matches!(err, vkml::Error::TooLarge { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &["'fill'", "ConstantOfShape", "4398046511104 bytes"],
    );
}

/// y = Range(0, limit, 1) with limit an initializer: an infinite limit allocated until the
/// process died; a NaN one gave an empty range. Both are errors naming the node.
#[test]
fn a_range_with_an_infinite_or_nan_limit_is_refused() {
    for (what, limit) in [("inf", f32::INFINITY), ("nan", f32::NAN)] {
        let g = mk::GraphProto {
            name: "g".into(),
            node: vec![mk::node("Range", "range", &["s", "l", "d"], &["y"])],
            initializer: vec![
                mk::floats("s", &[], &[0.0]),
                mk::floats("l", &[], &[limit]),
                mk::floats("d", &[], &[1.0]),
            ],
            output: vec![mk::value("y", mk::FLOAT, None)],
            ..Default::default()
        };
        let err = load_built(&format!("range-{what}"), &mk::model(g, 17))
            .err()
            .unwrap_or_else(|| panic!("Range to {what} loaded"))
            .to_string();
        assert_mentions(&err, &["'range'", "Range", "finite"]);
    }
}

/// y = ReduceSum(Expand(x, [2^32, 2^32])): the Expand's 2^64 elements wrapped to none, and the
/// ReduceSum summed nothing. The Expand is refused by name, with x given at run time too.
#[test]
fn a_reduction_over_a_shape_that_wraps_is_refused_at_the_expand() {
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![
            mk::node("Expand", "grow", &["x", "shape"], &["big"]),
            mk::node("ReduceSum", "sum", &["big"], &["y"]),
        ],
        initializer: vec![mk::int64s("shape", &[2], &[1 << 32, 1 << 32])],
        input: vec![mk::value("x", mk::FLOAT, Some(&[1]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    let err = match load_built("expand-wraps", &mk::model(g, 17)) {
        Err(e) => e,
        Ok(s) => s
            .run(&[("x", vkml::Tensor::from_vec(vec![1], vec![1.0f32]))])
            .expect_err("a sum over 2^64 elements ran"),
    }
    .to_string();
    assert_mentions(&err, &["'grow'", "Expand", "element count"]);
}

/// y = Gather(w, i) with w: float[3, 2] an initializer and i: int64[2] a graph input. An index
/// out of range was an error on the CPU and clamped to the last row on Vulkan (exit 0, a
/// plausible wrong answer); now both refuse it, naming the node.
#[test]
fn an_index_out_of_range_is_an_error_on_every_device() {
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![mk::node("Gather", "pick", &["w", "i"], &["y"])],
        initializer: vec![mk::floats("w", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        input: vec![mk::value("i", mk::INT64, Some(&[2]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    let path = mk::write(&mk::scratch("gather-range"), "m.onnx", &mk::model(g, 17));
    let mut devices = vec![DeviceSelection::Cpu];
    if !common::skip_vulkan() {
        devices.push(DeviceSelection::Vulkan);
    }
    for dev in devices {
        let session = Session::load(&path, common::options(dev, None)).unwrap();
        let i = |v: Vec<i64>| [("i", vkml::Tensor::from_vec(vec![2], v))];
        let plan = session.plan_summary(&i(vec![0, 0])).unwrap();
        if dev == DeviceSelection::Vulkan {
            assert!(
                plan.ops_per_device.keys().any(|d| d != "cpu"),
                "the Gather runs on a GPU: {plan:?}"
            );
        }
        // Rows 2 and 0 (-3 counts from the end): [[5, 6], [1, 2]].
        let y = session.run(&i(vec![2, -3])).unwrap();
        assert_eq!(y[0].1.view::<f32>().unwrap().as_ref(), [5.0, 6.0, 1.0, 2.0]);
        for bad in [3, -4, i64::MAX] {
            let err = session
                .run(&i(vec![0, bad]))
                .expect_err("an index out of range ran")
                .to_string();
            assert_mentions(&err, &["'pick'", "Gather", "out of range"]);
        }
    }
}

/// y = GatherElements(x, idx, axis 1) with x: float[2, 3] a graph input and idx an initializer
/// holding 3, one past the axis: no shape rule sees the data, so this too was clamped on
/// Vulkan. Refused on every device, naming the node.
#[test]
fn a_constant_index_out_of_range_is_an_error_on_every_device() {
    let mut ge = mk::node("GatherElements", "ge", &["x", "idx"], &["y"]);
    ge.attribute.push(mk::int_attr("axis", 1));
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![ge],
        initializer: vec![mk::int64s("idx", &[2, 1], &[3, 0])],
        input: vec![mk::value("x", mk::FLOAT, Some(&[2, 3]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    let path = mk::write(&mk::scratch("ge-range"), "m.onnx", &mk::model(g, 17));
    let mut devices = vec![DeviceSelection::Cpu];
    if !common::skip_vulkan() {
        devices.push(DeviceSelection::Vulkan);
    }
    let x = [("x", vkml::Tensor::from_vec(vec![2, 3], vec![1.0f32; 6]))];
    for dev in devices {
        let session = Session::load(&path, common::options(dev, None)).unwrap();
        let err = session
            .run(&x)
            .expect_err("an index out of range ran")
            .to_string();
        assert_mentions(&err, &["'ge'", "GatherElements", "index 3 is out of range"]);
    }
}

/// One model whose indexing node reads indices computed during the run (`idx = Add(i, one)`,
/// i a graph input, so no check on the host sees them): on Vulkan, where both nodes run on the
/// GPU, the shaders used to clamp such an index silently. Now every device gives the right
/// answer for `good`, and for each of `bad` fails with the CPU's error word for word, naming
/// the node; a session still serves good runs after a faulted one (the fault record is reset).
fn computed_index_case(
    test: &str,
    g: mk::GraphProto,
    i_shape: &[usize],
    good: (&[i64], &[f32]),
    bad: &[(&[i64], &[&str])],
) {
    let path = mk::write(&mk::scratch(test), "m.onnx", &mk::model(g, 17));
    let mut devices = vec![DeviceSelection::Cpu];
    if !common::skip_vulkan() {
        devices.push(DeviceSelection::Vulkan);
    }
    let i = |v: &[i64]| [("i", vkml::Tensor::from_vec(i_shape.to_vec(), v.to_vec()))];
    let mut cpu_errors = Vec::new();
    for dev in devices {
        let session = Session::load(&path, common::options(dev, None)).unwrap();
        if dev == DeviceSelection::Vulkan {
            let plan = session.plan_summary(&i(good.0)).unwrap();
            assert_eq!(
                plan.ops_per_device.get("cpu").copied().unwrap_or(0),
                0,
                "{test}: every node runs on the GPU: {plan:?}"
            );
        }
        for round in 0..2 {
            let y = session.run(&i(good.0)).unwrap();
            assert_eq!(
                y[0].1.view::<f32>().unwrap().as_ref(),
                good.1,
                "{test} on {dev:?}, round {round}"
            );
            for (k, (v, mentions)) in bad.iter().enumerate() {
                let err = session
                    .run(&i(v))
                    .expect_err("an index out of range ran")
                    .to_string();
                assert_mentions(&err, mentions);
                if dev == DeviceSelection::Cpu {
                    if round == 0 {
                        cpu_errors.push(err);
                    }
                } else {
                    assert_eq!(err, cpu_errors[k], "{test}: Vulkan's error is the CPU's");
                }
            }
        }
    }
}

/// y = Gather(w, Add(i, 1)) with w: float[4, 2].
#[test]
fn a_computed_gather_index_out_of_range_is_an_error_on_every_device() {
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![
            mk::node("Add", "shift", &["i", "one"], &["idx"]),
            mk::node("Gather", "pick", &["w", "idx"], &["y"]),
        ],
        initializer: vec![
            mk::floats("w", &[4, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            mk::int64s("one", &[1], &[1]),
        ],
        input: vec![mk::value("i", mk::INT64, Some(&[3]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    // i + 1 = [1, -1, 3]: rows 1, 3 (-1 from the end) and 3, indexed by hand.
    let w = |r: usize| [2.0 * r as f32 + 1.0, 2.0 * r as f32 + 2.0];
    let want: Vec<f32> = [1, 3, 3].into_iter().flat_map(w).collect();
    computed_index_case(
        "computed-gather",
        g,
        &[3],
        (&[0, -2, 2], &want),
        &[
            (
                &[0, 4, 1],
                &[
                    "'pick'",
                    "Gather",
                    "index 5 (element 1 of the indices) is out of range",
                ],
            ),
            (&[-6, 0, 0], &["'pick'", "Gather", "index -5 (element 0"]),
            (
                &[0, 1, i64::MAX - 1],
                &["'pick'", "Gather", format!("index {}", i64::MAX).as_str()],
            ),
        ],
    );
}

/// y = ScatterElements(d, Add(i, 1), u, axis 1) with d: float[2, 3], u: float[2, 2].
#[test]
fn a_computed_scatter_index_out_of_range_is_an_error_on_every_device() {
    let mut se = mk::node("ScatterElements", "put", &["d", "idx", "u"], &["y"]);
    se.attribute.push(mk::int_attr("axis", 1));
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![mk::node("Add", "shift", &["i", "one"], &["idx"]), se],
        initializer: vec![
            mk::floats("d", &[2, 3], &[0.0; 6]),
            mk::floats("u", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            mk::int64s("one", &[1], &[1]),
        ],
        input: vec![mk::value("i", mk::INT64, Some(&[2, 2]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    // i + 1 = [[2, 0], [-3, 1]]: row 0 gets u[0][0] at column 2 and u[0][1] at column 0;
    // row 1 gets u[1][0] at column 0 (-3 from the end) and u[1][1] at column 1.
    let want = [2.0, 0.0, 1.0, 3.0, 4.0, 0.0];
    computed_index_case(
        "computed-scatter",
        g,
        &[2, 2],
        (&[1, -1, -4, 0], &want),
        &[
            (
                &[1, -1, 2, 0],
                &[
                    "'put'",
                    "ScatterElements",
                    "index 3 is out of range for an axis of size 3",
                ],
            ),
            (
                &[1, -5, 0, 0],
                &["'put'", "ScatterElements", "index -4 is out of range"],
            ),
        ],
    );
}

/// y = ScatterND(d, Add(i, 1), u) with d: float[3, 2], indices of shape [2, 1], u: float[2, 2].
#[test]
fn a_computed_scatter_nd_index_out_of_range_is_an_error_on_every_device() {
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![
            mk::node("Add", "shift", &["i", "one"], &["idx"]),
            mk::node("ScatterND", "put", &["d", "idx", "u"], &["y"]),
        ],
        initializer: vec![
            mk::floats("d", &[3, 2], &[9.0; 6]),
            mk::floats("u", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            mk::int64s("one", &[1], &[1]),
        ],
        input: vec![mk::value("i", mk::INT64, Some(&[2, 1]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    // i + 1 = [[2], [0]]: row 2 gets u[0], row 0 gets u[1].
    let want = [3.0, 4.0, 9.0, 9.0, 1.0, 2.0];
    computed_index_case(
        "computed-scatter-nd",
        g,
        &[2, 1],
        (&[1, -1], &want),
        &[(
            &[1, 2],
            &[
                "'put'",
                "ScatterND",
                "index 3 is out of range for an axis of size 3",
            ],
        )],
    );
}

/// An armed chunk (a model alone on its GPU, queued ahead of its next run) that faulted is
/// disarmed by another session's run on the same GPU: it then runs at once on the faulted run's
/// inputs and records their fault again. The next good run must not report it.
#[test]
fn a_disarmed_chunk_does_not_carry_a_fault_into_the_next_run() {
    if common::skip_vulkan() {
        return;
    }
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![
            mk::node("Add", "shift", &["i", "one"], &["idx"]),
            mk::node("Gather", "pick", &["w", "idx"], &["y"]),
        ],
        initializer: vec![
            mk::floats("w", &[3, 1], &[1.0, 2.0, 3.0]),
            mk::int64s("one", &[1], &[1]),
        ],
        input: vec![mk::value("i", mk::INT64, Some(&[2]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    let path = mk::write(&mk::scratch("disarmed-fault"), "m.onnx", &mk::model(g, 17));
    let a = Session::load(&path, common::options(DeviceSelection::Vulkan, None)).unwrap();
    let b = Session::load(&path, common::options(DeviceSelection::Vulkan, None)).unwrap();
    let i = |v: [i64; 2]| [("i", vkml::Tensor::from_vec(vec![2], v.to_vec()))];
    for round in 0..4 {
        let err = a.run(&i([0, 5])).expect_err("an index out of range ran");
        assert_mentions(&err.to_string(), &["'pick'", "index 6"]);
        // b's runs disarm what a queued for its next run.
        b.run(&i([0, 1])).unwrap();
        let y = a
            .run(&i([1, -4]))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(y[0].1.view::<f32>().unwrap().as_ref(), [3.0, 1.0]);
    }
}
