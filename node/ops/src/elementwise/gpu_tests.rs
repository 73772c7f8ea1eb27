//! The shaders against the CPU kernels (themselves checked against hand-computed values and
//! naive loops in `tests`), through the Vulkan test harness.

use crate::tensor::Tensor;
use crate::testkit::{Rng, build, gpu_matches_cpu};

const TOL: f64 = 1e-4;

#[test]
fn gpu_binary_f32_broadcasts() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[37, 61], &[37, 61]),
        (&[37, 61], &[]),
        (&[1], &[37, 61]),
        (&[], &[]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[5, 1, 3, 1], &[1, 4, 1, 2]),
        (&[2, 1, 3, 1, 2, 1], &[1, 2, 1, 3, 1, 2]),
        (&[300, 257], &[300, 1]),
        (&[3, 1, 257], &[100, 1]),
    ];
    let mut rng = Rng::new(21);
    for (a, b) in cases {
        let (x, mut y) = (rng.tensor_f32(a), rng.tensor_f32(b));
        for op in ["Add", "Sub", "Mul", "Div"] {
            if op == "Div" {
                // Keep divisors away from 0, where relative error means little.
                let v: Vec<f32> = y.view::<f32>().unwrap().iter().map(|v| v + 2.0).collect();
                y = Tensor::from_vec(b.to_vec(), v);
            }
            gpu_matches_cpu(&*build(op, 14, &[]).unwrap(), &[Some(&x), Some(&y)], TOL);
        }
    }
}

#[test]
fn gpu_binary_ints_match_exactly() {
    let a32 = Tensor::from_vec(vec![2, 4], vec![7i32, -7, 7, -7, 5, i32::MIN, i32::MAX, 0]);
    let b32 = Tensor::from_vec(vec![2, 4], vec![2i32, 2, -2, -2, 0, -1, 1, 3]);
    let col32 = Tensor::from_vec(vec![2, 1], vec![3i32, -1]);
    let a64 = Tensor::from_vec(
        vec![2, 4],
        vec![7i64, -7, 7, -7, 5, i64::MIN, i64::MAX, 1 << 40],
    );
    let b64 = Tensor::from_vec(vec![2, 4], vec![2i64, 2, -2, -2, 0, -1, 1, 3]);
    let col64 = Tensor::from_vec(vec![2, 1], vec![3i64, -1]);
    for op in ["Add", "Sub", "Mul", "Div"] {
        let op = build(op, 14, &[]).unwrap();
        gpu_matches_cpu(&*op, &[Some(&a32), Some(&b32)], 0.0);
        gpu_matches_cpu(&*op, &[Some(&a32), Some(&col32)], 0.0);
        gpu_matches_cpu(&*op, &[Some(&a64), Some(&b64)], 0.0);
        gpu_matches_cpu(&*op, &[Some(&col64), Some(&a64)], 0.0);
    }
}

#[test]
fn gpu_unary() {
    let mut rng = Rng::new(22);
    let mut v: Vec<f32> = rng.f32s(10_000).iter().map(|x| x * 12.0).collect();
    v.extend([
        0.0, -0.0, 1e-3, -1e-3, 0.049, 0.051, 50.0, -50.0, 100.0, -100.0, 1e-30, -89.0,
    ]);
    let x = Tensor::from_vec(vec![v.len()], v);
    for op in ["Relu", "Sigmoid", "Tanh"] {
        gpu_matches_cpu(&*build(op, 14, &[]).unwrap(), &[Some(&x)], TOL);
    }
}

#[test]
fn gpu_launch_folds_past_65535_groups() {
    // 65,536 groups of 256 do not fit in x: the launch folds into y.
    let n = 256 * 65_536 + 7;
    let x = Tensor::from_vec(vec![n], (0..n).map(|i| (i % 1000) as f32 - 500.0).collect());
    let y = Tensor::scalar(0.5f32);
    gpu_matches_cpu(&*build("Relu", 14, &[]).unwrap(), &[Some(&x)], 0.0);
    gpu_matches_cpu(&*build("Mul", 14, &[]).unwrap(), &[Some(&x), Some(&y)], 0.0);
}

/// Dropout with its mask at inference, on the GPU: the output is the input's bytes and the
/// mask all ones in its type (bool from opset 10, the data's type before), on odd sizes whose
/// bytes are not whole words.
#[test]
fn gpu_dropout_writes_the_input_and_an_all_true_mask() {
    use crate::testkit::gpu::run_op;
    use crate::{Attrs, NodeSpec, ValueType};
    use half::f16;
    let attrs = Attrs::default();
    let mut rng = Rng::new(23);
    let f32s = |shape: &[usize], rng: &mut Rng| rng.tensor_f32(shape);
    let f16s = |shape: &[usize], rng: &mut Rng| {
        let n = shape.iter().product();
        let v = rng.f32s(n).into_iter().map(f16::from_f32).collect();
        Tensor::from_vec(shape.to_vec(), v)
    };
    type Make = fn(&[usize], &mut Rng) -> Tensor;
    let makes: [Make; 2] = [f32s, f16s];
    for shape in [&[3, 5, 7][..], &[1], &[0, 3], &[2, 1, 3]] {
        for make in makes {
            let x = make(shape, &mut rng);
            for opset in [7, 10, 13] {
                let spec = NodeSpec {
                    name: "d",
                    op_type: "Dropout",
                    attrs: &attrs,
                    opset,
                    num_inputs: 1,
                    num_outputs: 2,
                };
                let op = crate::build(&spec).unwrap();
                let outs = crate::testkit::infer_known(&*op, &[Some(&x)]).unwrap();
                let ys = match run_op(&*op, &[Some(&x)], &outs) {
                    Err(e) if e == "skipped" => return,
                    r => r.unwrap(),
                };
                assert_eq!(ys[0].bytes(), x.bytes(), "opset {opset} {shape:?}");
                let m = &ys[1];
                assert_eq!(ValueType::of(m), outs[1]);
                let n = x.numel();
                if opset < 10 {
                    assert_eq!(m.dtype(), x.dtype());
                    assert_eq!(crate::testkit::f64s(m), vec![1.0; n], "opset {opset}");
                } else {
                    assert_eq!(m.view_bool().unwrap(), vec![true; n], "opset {opset}");
                }
            }
        }
    }
}
