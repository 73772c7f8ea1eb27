//! Test helpers shared by the elementwise, matmul, softmax and cast tests: building an op from
//! a node description, running its shape rule and CPU kernel together, seeded random data.

use crate::ops::{AttrValue, Attrs, InferInput, NodeSpec, Op, OpError, ValueType};
use crate::tensor::Tensor;

/// Builds `op_type` at `opset` with the given attributes.
pub fn build(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, AttrValue)],
) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    crate::ops::build(&NodeSpec {
        name: "test",
        op_type,
        attrs: &attrs,
        opset,
        num_inputs: 2,
        num_outputs: 1,
    })
}

/// Runs the shape rule, then the CPU kernel, and checks that the kernel's outputs have the
/// types the rule promised.
pub fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let infer_in: Vec<Option<InferInput<'_>>> = types
        .iter()
        .zip(inputs)
        .map(|(ty, t)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
        .collect();
    let out_types = op.infer(&infer_in)?;
    let outs = op.run_cpu(inputs, &out_types)?;
    assert_eq!(outs.len(), out_types.len());
    for (o, t) in outs.iter().zip(&out_types) {
        assert_eq!(
            &ValueType::of(o),
            t,
            "kernel output differs from the shape rule"
        );
    }
    Ok(outs)
}

/// `run` for one output from present inputs.
pub fn run1(op: &dyn Op, inputs: &[&Tensor]) -> Result<Tensor, OpError> {
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    Ok(run(op, &ins)?.remove(0))
}

/// A small deterministic generator (splitmix64), so tests need no extra crate and reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit() as f32).collect()
    }

    pub fn f64s(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.unit()).collect()
    }

    pub fn tensor_f32(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), self.f32s(n))
    }
}

/// Asserts `|got - want| <= tol * max(1, |want|)` element by element, naming the first miss.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(ok, "element {i}: got {g}, want {w} (tolerance {tol})");
    }
}

/// The elements of a float tensor as f64.
pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().expect("float tensor")
}
