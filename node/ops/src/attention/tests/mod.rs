//! Attention tests: the CPU kernel against the f64 references of `reference.rs`, the GPU
//! kernels against the CPU kernel on the test GPU, and the refusals.

mod errors;
mod gpu;
mod gqa;
mod mha;
mod onnx;
mod reference;

use crate::Op;
use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, f64s};

/// A test case: the op, its inputs, and the reference's outputs.
type Case = (Box<dyn Op>, Vec<Option<Tensor>>, Vec<Vec<f64>>);

/// A float tensor of `dtype` from f64 values.
fn tensor(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    crate::numeric::from_f64(dtype, shape.to_vec(), v.to_vec()).expect("a float type")
}

/// Values as the tensor holds them (rounded to its type), for the reference.
fn held(dtype: DType, v: Vec<f64>) -> Vec<f64> {
    f64s(&tensor(dtype, &[v.len()], &v))
}

fn random(rng: &mut Rng, dtype: DType, n: usize) -> Vec<f64> {
    held(dtype, rng.f64s(n))
}

/// Tolerance of a kernel output against the f64 reference, by type.
fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 8e-3,
        _ => 2e-5,
    }
}

fn check(got: &Tensor, want: &[f64], dtype: DType, what: &str) {
    assert_eq!(got.numel(), want.len(), "{what}: length");
    let g = f64s(got);
    for (i, (&a, &b)) in g.iter().zip(want).enumerate() {
        let ok = (a == b) || (a - b).abs() <= tol(dtype) * b.abs().max(1.0);
        assert!(ok, "{what}: element {i}: got {a}, want {b}");
    }
}

fn i64s_tensor(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec())
}

fn i32s_tensor(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(
        shape.to_vec(),
        v.iter().map(|&x| x as i32).collect::<Vec<i32>>(),
    )
}
