//! Test helpers shared by the Conv, pool and BatchNormalization tests: a seeded generator,
//! node construction through the registry, and multi-index loops for reference kernels.

use crate::ops::{AttrValue, Attrs, NodeSpec, Op, ValueType};
use crate::tensor::Tensor;

/// xorshift64*: deterministic and dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    pub fn values(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.unit()).collect()
    }
}

pub fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

/// Builds an op of the default domain through the registry, as the graph layer does.
pub fn node(
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn Op>, crate::ops::OpError> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    crate::ops::build(&NodeSpec {
        name: "test",
        op_type,
        attrs: &attrs,
        opset,
        num_inputs,
        num_outputs,
    })
}

/// A tensor of f32 or f64 from f64 values.
pub fn tensor(shape: &[usize], v: &[f64], f64_dtype: bool) -> Tensor {
    if f64_dtype {
        Tensor::from_vec(shape.to_vec(), v.to_vec())
    } else {
        Tensor::from_vec(
            shape.to_vec(),
            v.iter().map(|&x| x as f32).collect::<Vec<f32>>(),
        )
    }
}

/// Runs `op` on the CPU after checking its shape rule agrees with what the kernel returns.
pub fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, crate::ops::OpError> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let infer_in: Vec<_> = types
        .iter()
        .zip(inputs)
        .map(|(ty, t)| {
            ty.as_ref()
                .map(|ty| crate::ops::InferInput { ty, value: *t })
        })
        .collect();
    let out_types = op.infer(&infer_in)?;
    let out = op.run_cpu(inputs, &out_types)?;
    let got: Vec<ValueType> = out.iter().map(ValueType::of).collect();
    assert_eq!(
        got, out_types,
        "kernel output types differ from the shape rule's"
    );
    Ok(out)
}

/// Calls `f` with every index of `shape`, row-major.
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0; shape.len()];
    loop {
        f(&idx);
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            idx[axis] += 1;
            if idx[axis] < shape[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
}

/// Row-major offset of `idx` in `shape`.
pub fn offset(shape: &[usize], idx: &[usize]) -> usize {
    shape.iter().zip(idx).fold(0, |acc, (&s, &i)| acc * s + i)
}

/// Asserts `|got - want| <= tol[i]` elementwise, reporting the first failure with `what`.
pub fn assert_close(got: &[f64], want: &[f64], tol: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let ok = (got[i] - want[i]).abs() <= tol[i] || (got[i].is_nan() && want[i].is_nan());
        assert!(
            ok,
            "{what}: element {i}: got {} want {} (tol {})",
            got[i], want[i], tol[i]
        );
    }
}
