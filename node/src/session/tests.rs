//! Sessions on the CPU backend over models built by hand: plans keyed on the values of shape
//! inputs, and load-time refusals that name the node, the op and the type.

use crate::onnx::proto::GraphProto;
use crate::onnx::tests::{D, TempDir, model_with, node, raw_tensor, tensor_value, write_model};
use crate::session::{DeviceSelection, Session, SessionOptions};
use crate::tensor::Tensor;

const FLOAT: i32 = 1;
const INT32: i32 = 6;
const INT64: i32 = 7;

fn cpu() -> SessionOptions {
    SessionOptions {
        devices: DeviceSelection::Cpu,
        device_memory_limit: None,
        ..Default::default()
    }
}

fn load(dir: &TempDir, g: GraphProto) -> crate::error::Result<Session> {
    Session::load(write_model(dir, "m.onnx", &model_with(g)), cpu())
}

/// y = Relu(Reshape(x, s + [1, 0])): the reshape's target is a graph input, shifted by a node.
fn reshape_model() -> GraphProto {
    let c: Vec<u8> = [1i64, 0].iter().flat_map(|x| x.to_le_bytes()).collect();
    GraphProto {
        name: "g".into(),
        node: vec![
            node("Add", "shift", &["s", "c"], &["s2"]),
            node("Reshape", "reshape", &["x", "s2"], &["r"]),
            node("Relu", "relu", &["r"], &["y"]),
        ],
        initializer: vec![raw_tensor("c", INT64, &[2], &c)],
        input: vec![
            tensor_value("x", FLOAT, Some(&[D::V(6)])),
            tensor_value("s", INT64, Some(&[D::V(2)])),
        ],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    }
}

#[test]
fn one_session_runs_a_shape_input_at_several_values() {
    let dir = TempDir::new("session-shape");
    let session = load(&dir, reshape_model()).unwrap();
    let x = Tensor::from_vec(vec![6], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0]);
    let relu = vec![1.0f32, 0.0, 3.0, 0.0, 5.0, 0.0];
    // s + [1, 0] -> the shape: [2,2]->[3,2], [1,3]->[2,3], [0,6]->[1,6], and [2,2] again.
    for (s, want) in [
        ([2i64, 2], [3usize, 2]),
        ([1, 3], [2, 3]),
        ([0, 6], [1, 6]),
        ([2, 2], [3, 2]),
    ] {
        let feeds = [
            ("x", x.clone()),
            ("s", Tensor::from_vec(vec![2], s.to_vec())),
        ];
        let out = session.run(&feeds).unwrap();
        let y = &out[0].1;
        assert_eq!(y.shape(), want.as_slice(), "s = {s:?}");
        assert_eq!(y.view::<f32>().unwrap().as_ref(), relu.as_slice());
    }
}

#[test]
fn a_shape_that_does_not_fit_the_data_is_an_error_naming_the_node() {
    let dir = TempDir::new("session-shape-bad");
    let session = load(&dir, reshape_model()).unwrap();
    let feeds = [
        ("x", Tensor::from_vec(vec![6], vec![0.0f32; 6])),
        ("s", Tensor::from_vec(vec![2], vec![3i64, 3])),
    ];
    let e = session.run(&feeds).unwrap_err().to_string();
    assert!(e.contains("reshape") && e.contains("Reshape"), "{e}");
}

fn sigmoid_of_int32(dim: D) -> GraphProto {
    GraphProto {
        name: "g".into(),
        node: vec![node("Sigmoid", "squash", &["x"], &["y"])],
        input: vec![tensor_value("x", INT32, Some(&[dim]))],
        output: vec![tensor_value("y", INT32, None)],
        ..Default::default()
    }
}

#[test]
fn an_unsupported_type_fails_at_load_naming_node_op_and_type() {
    for (what, dim) in [("static", D::V(4)), ("symbolic", D::P("N"))] {
        let dir = TempDir::new("session-dtype");
        let e = match load(&dir, sigmoid_of_int32(dim)) {
            Ok(_) => panic!("{what}: Sigmoid of int32 loaded"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("'squash'") && e.contains("Sigmoid") && e.contains("int32"),
            "{what}: {e}"
        );
    }
}

#[test]
fn an_unsupported_op_fails_at_load_naming_node_and_op() {
    let dir = TempDir::new("session-op");
    let g = GraphProto {
        name: "g".into(),
        node: vec![node("NoSuchOp", "mystery", &["x"], &["y"])],
        input: vec![tensor_value("x", FLOAT, Some(&[D::V(1)]))],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    };
    let e = match load(&dir, g) {
        Ok(_) => panic!("an unknown op loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("'mystery'") && e.contains("NoSuchOp"), "{e}");
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// y = ConstantOfShape(shape) with `shape` an initializer: folded while planning.
fn constant_of_shape(shape: &[i64]) -> GraphProto {
    GraphProto {
        name: "g".into(),
        node: vec![node("ConstantOfShape", "fill", &["shape"], &["y"])],
        initializer: vec![raw_tensor(
            "shape",
            INT64,
            &[shape.len() as i64],
            &i64_bytes(shape),
        )],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    }
}

/// ConstantOfShape of 2^40 floats (4 TiB) was folded while planning: the process tried to
/// allocate it and was killed. The value's bytes are now checked first, naming node and size.
#[test]
fn a_value_larger_than_any_device_is_refused_before_it_is_allocated() {
    let dir = TempDir::new("session-huge");
    let e = match load(&dir, constant_of_shape(&[1 << 40])) {
        Ok(_) => panic!("4 TiB planned"),
        Err(e) => e,
    };
    assert!(matches!(e, crate::Error::TooLarge { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("'fill'") && e.contains("ConstantOfShape") && e.contains("4398046511104 bytes"),
        "{e}"
    );
    // A limit of the caller's: 4 KiB of floats are more than 1000 bytes.
    let opts = SessionOptions {
        tuning: crate::Tuning {
            max_value_bytes: Some(1000),
            ..Default::default()
        },
        ..cpu()
    };
    let path = write_model(&dir, "small.onnx", &model_with(constant_of_shape(&[1024])));
    let e = Session::load(&path, opts)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("4096 bytes") && e.contains("1000 bytes"), "{e}");
}

/// y = x + c, with c an initializer read by the CPU kernel on every run.
fn add_weight() -> GraphProto {
    GraphProto {
        name: "g".into(),
        node: vec![node("Add", "add", &["x", "c"], &["y"])],
        initializer: vec![raw_tensor(
            "c",
            FLOAT,
            &[4],
            &crate::onnx::tests::f32_bytes(&[1.0, 2.0, 3.0, 4.0]),
        )],
        input: vec![tensor_value("x", FLOAT, Some(&[D::V(4)]))],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    }
}

/// Truncating the model file between runs (`run --repeat`) made the next run's read of the
/// mapped weights a SIGBUS. A small model is now copied at load and runs on; a mapped one is
/// refused with an error naming the file.
#[test]
fn a_model_file_truncated_after_loading_never_crashes_a_run() {
    let dir = TempDir::new("session-truncate");
    let x = [("x", Tensor::from_vec(vec![4], vec![1.0f32; 4]))];
    let path = write_model(&dir, "small.onnx", &model_with(add_weight()));
    let session = Session::load(&path, cpu()).unwrap();
    std::fs::File::create(&path).unwrap(); // truncated to nothing
    let y = session.run(&x).unwrap();
    assert_eq!(y[0].1.view::<f32>().unwrap().as_ref(), [2.0, 3.0, 4.0, 5.0]);

    let path = write_model(&dir, "mapped.onnx", &model_with(add_weight()));
    let session = Session::load_copying_below(&path, cpu(), 0).unwrap();
    session.run(&x).unwrap();
    std::fs::File::create(&path).unwrap();
    let e = session.run(&x).unwrap_err().to_string();
    assert!(
        e.contains("mapped.onnx") && e.contains("changed after the model was loaded"),
        "{e}"
    );
}

/// acc_out = acc + x, y = acc_out * 2: a running sum bound as `acc_out -> acc`.
fn accumulator() -> GraphProto {
    let two: Vec<u8> = 2f32.to_le_bytes().to_vec();
    GraphProto {
        name: "g".into(),
        node: vec![
            node("Add", "add", &["acc", "x"], &["acc_out"]),
            node("Mul", "mul", &["acc_out", "two"], &["y"]),
        ],
        initializer: vec![raw_tensor("two", FLOAT, &[], &two)],
        input: vec![
            tensor_value("acc", FLOAT, Some(&[D::V(2)])),
            tensor_value("x", FLOAT, Some(&[D::V(2)])),
        ],
        output: vec![
            tensor_value("y", FLOAT, None),
            tensor_value("acc_out", FLOAT, None),
        ],
        ..Default::default()
    }
}

#[test]
fn bound_runs_feed_each_output_back_and_name_what_they_refuse() {
    let dir = TempDir::new("session-bound");
    let session = load(&dir, accumulator()).unwrap();
    let zero = Tensor::from_vec(vec![2], vec![0.0f32, 0.0]);
    let mut state = session
        .bind(&[("acc_out", "acc")], vec![zero.clone()])
        .unwrap();
    let x = |a: f32, b: f32| Tensor::from_vec(vec![2], vec![a, b]);
    for (step, want) in [
        (1.0f32, [2.0f32, 4.0]),
        (2.0, [6.0, 12.0]),
        (3.0, [12.0, 24.0]),
    ] {
        let out = session
            .run_bound(&mut state, &[("x", x(step, 2.0 * step))])
            .unwrap();
        // Only y comes back; the sum stays in the state.
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "y");
        assert_eq!(out[0].1.to_f64_vec().unwrap(), want.map(f64::from));
    }
    assert!(!state.on_gpu());
    let acc = state.values().unwrap();
    assert_eq!(acc[0].to_f64_vec().unwrap(), [6.0, 12.0]);

    let e = session
        .run_bound(&mut state, &[("x", x(0.0, 0.0)), ("acc", zero.clone())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("'acc' is bound to output 'acc_out'"), "{e}");
    let e = session.run_bound(&mut state, &[]).unwrap_err().to_string();
    assert!(e.contains("missing input 'x'"), "{e}");
    let e = session
        .bind(&[("acc_out", "acc")], Vec::new())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("1 bound pairs but 0 initial values"), "{e}");
    let e = session
        .bind(&[("nope", "acc")], vec![zero.clone()])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no output named 'nope'"), "{e}");
    let ints = Tensor::from_vec(vec![2], vec![0i64, 0]);
    let e = session
        .bind(&[("acc_out", "acc")], vec![ints])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("the initial value of 'acc' is int64"), "{e}");
}

/// y = MatMul(x, w) with x [N, 8] for any N and w [8, 4] an initializer.
fn matmul_weight() -> GraphProto {
    let w: Vec<f32> = (0..32).map(|i| i as f32 * 0.25 - 3.0).collect();
    GraphProto {
        name: "g".into(),
        node: vec![node("MatMul", "mm", &["x", "w"], &["y"])],
        initializer: vec![raw_tensor(
            "w",
            FLOAT,
            &[8, 4],
            &crate::onnx::tests::f32_bytes(&w),
        )],
        input: vec![tensor_value("x", FLOAT, Some(&[D::P("n"), D::V(8)]))],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    }
}

/// A plan per input shape, one GPU copy of the weights: the second plan uses the copy the
/// first uploaded, and both compute x @ w (checked against a product computed here).
#[test]
fn plans_for_other_shapes_share_the_weights_on_the_gpu() {
    if vkml_testkit::test_gpu().is_none() {
        return;
    }
    let dir = TempDir::new("session-shared-weights");
    let path = write_model(&dir, "m.onnx", &model_with(matmul_weight()));
    let opts = SessionOptions {
        devices: DeviceSelection::Vulkan,
        ..Default::default()
    };
    let session = Session::load(&path, opts).unwrap();
    let w: Vec<f32> = (0..32).map(|i| i as f32 * 0.25 - 3.0).collect();
    for n in [3usize, 1, 3] {
        let x: Vec<f32> = (0..n * 8).map(|i| (i % 5) as f32 - 2.0).collect();
        let want: Vec<f32> = (0..n * 4)
            .map(|o| (0..8).map(|k| x[o / 4 * 8 + k] * w[k * 4 + o % 4]).sum())
            .collect();
        let y = session
            .run(&[("x", Tensor::from_vec(vec![n, 8], x))])
            .unwrap();
        assert_eq!(y[0].1.view::<f32>().unwrap().as_ref(), want, "n = {n}");
    }
    assert_eq!(
        session.shared_weight_buffers(),
        1,
        "one copy of w for both plans"
    );
}

/// cache_out = TensorScatter(cache, row, at) over a [1, 4, 2] cache, y = cache_out * 2: a
/// cache bound in place on the GPU.
fn scatter_cache() -> GraphProto {
    let two: Vec<u8> = 2f32.to_le_bytes().to_vec();
    GraphProto {
        name: "g".into(),
        node: vec![
            node(
                "TensorScatter",
                "put",
                &["cache", "row", "at"],
                &["cache_out"],
            ),
            node("Mul", "mul", &["cache_out", "two"], &["y"]),
        ],
        initializer: vec![raw_tensor("two", FLOAT, &[], &two)],
        input: vec![
            tensor_value("cache", FLOAT, Some(&[D::V(1), D::V(4), D::V(2)])),
            tensor_value("row", FLOAT, Some(&[D::V(1), D::V(1), D::V(2)])),
            tensor_value("at", INT64, Some(&[D::V(1)])),
        ],
        output: vec![
            tensor_value("y", FLOAT, None),
            tensor_value("cache_out", FLOAT, None),
        ],
        ..Default::default()
    }
}

/// A sequence that ends leaves its GPU state buffer and recorded contexts to the session
/// (recording a long prompt's context again for each sequence cost most of its time); the
/// next sequence takes them, starting from its own initial values, not the last one's rows.
#[test]
fn a_new_sequence_takes_an_ended_one_s_gpu_state_and_starts_from_its_own_values() {
    if vkml_testkit::test_gpu().is_none() {
        return;
    }
    let dir = TempDir::new("session-idle-homes");
    let path = write_model(&dir, "m.onnx", &model_with(scatter_cache()));
    let opts = SessionOptions {
        devices: DeviceSelection::Vulkan,
        ..Default::default()
    };
    let session = Session::load(&path, opts).unwrap();
    let step = |state: &mut crate::session::BoundState, at: i64, v: f32| {
        let row = Tensor::from_vec(vec![1, 1, 2], vec![v, -v]);
        let at = Tensor::from_vec(vec![1], vec![at]);
        let out = session
            .run_bound(state, &[("row", row), ("at", at)])
            .unwrap();
        out[0].1.to_f64_vec().unwrap()
    };
    let zeros = || Tensor::from_vec(vec![1, 4, 2], vec![0f32; 8]);
    let bind = || {
        session
            .bind(&[("cache_out", "cache")], vec![zeros()])
            .unwrap()
    };
    let mut a = bind();
    step(&mut a, 0, 1.0);
    let y = step(&mut a, 3, 2.0);
    assert_eq!(y, [2.0, -2.0, 0.0, 0.0, 0.0, 0.0, 4.0, -4.0]);
    assert!(a.on_gpu());
    drop(a);
    assert_eq!(
        session.idle_homes.len(),
        1,
        "the ended sequence's home is kept"
    );
    let mut b = bind();
    let y = step(&mut b, 1, 3.0);
    assert_eq!(
        y,
        [0.0, 0.0, 6.0, -6.0, 0.0, 0.0, 0.0, 0.0],
        "b starts from zeros"
    );
    assert!(b.on_gpu());
    assert_eq!(session.idle_homes.len(), 0, "b took it");
    drop(b);
    assert_eq!(session.idle_homes.len(), 1);
}

/// y = Relu(x @ w1) @ w2 with 64 x 64 weights: under a cap that holds one weight per device,
/// each product goes to a device of its own.
fn two_products() -> GraphProto {
    let w = |seed: usize| -> Vec<f32> {
        (0..64 * 64)
            .map(|i| ((i * 7 + seed) % 17) as f32 * 0.0625 - 0.5)
            .collect()
    };
    GraphProto {
        name: "g".into(),
        node: vec![
            node("MatMul", "mm1", &["x", "w1"], &["h"]),
            node("Relu", "relu", &["h"], &["r"]),
            node("MatMul", "mm2", &["r", "w2"], &["y"]),
        ],
        initializer: vec![
            raw_tensor(
                "w1",
                FLOAT,
                &[64, 64],
                &crate::onnx::tests::f32_bytes(&w(1)),
            ),
            raw_tensor(
                "w2",
                FLOAT,
                &[64, 64],
                &crate::onnx::tests::f32_bytes(&w(5)),
            ),
        ],
        input: vec![tensor_value("x", FLOAT, Some(&[D::V(4), D::V(64)]))],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    }
}

/// A model split over two GPUs of one process (here the test GPU passed twice) computes the
/// same products, with the value between them passed through host memory both GPUs import
/// (exec/bridge.rs), and with `Tuning::bridge` off through the host's copies.
#[test]
fn two_gpus_pass_a_cut_edge_through_shared_host_memory() {
    let Some(gpu) = vkml_testkit::test_gpu() else {
        return;
    };
    let dir = TempDir::new("session-two-gpus");
    let path = write_model(&dir, "m.onnx", &model_with(two_products()));
    let w = |seed: usize, i: usize| ((i * 7 + seed) % 17) as f64 * 0.0625 - 0.5;
    let x: Vec<f32> = (0..4 * 64)
        .map(|i| ((i * 5) % 11) as f32 * 0.125 - 0.6)
        .collect();
    let product = |a: &[f64], seed: usize| -> Vec<f64> {
        (0..4 * 64)
            .map(|o| {
                (0..64)
                    .map(|k| a[o / 64 * 64 + k] * w(seed, k * 64 + o % 64))
                    .sum()
            })
            .collect()
    };
    let h = product(&x.iter().map(|&v| v as f64).collect::<Vec<_>>(), 1);
    let want = product(&h.iter().map(|&v| v.max(0.0)).collect::<Vec<_>>(), 5);
    let bridges = gpu.info().host_import_alignment.is_some();
    for bridge in [true, false] {
        let mut opts = SessionOptions {
            devices: DeviceSelection::Vulkan,
            device_memory_limit: Some(24 << 10),
            ..Default::default()
        };
        opts.tuning.bridge = bridge;
        let g = crate::exec::Device::Gpu(gpu.arc());
        let session = Session::load(&path, opts).unwrap().on_devices(vec![
            g.clone(),
            g,
            crate::exec::Device::CpuFallback,
        ]);
        let input = Tensor::from_vec(vec![4, 64], x.clone());
        let (used, bridged) = session.executable(&[&input]).unwrap().devices_and_bridged();
        assert_eq!(used, [0, 1].into(), "one product per GPU (bridge {bridge})");
        assert_eq!(bridged, usize::from(bridge && bridges), "bridge {bridge}");
        for _ in 0..3 {
            let y = session.run(&[("x", input.clone())]).unwrap();
            let got = y[0].1.view::<f32>().unwrap();
            for (i, (&g, &e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "y[{i}] = {g}, want {e}"
                );
            }
        }
    }
}
