//! The op test kit, for every op's tests: building an op from a node description as the graph
//! layer does, running its shape rule and CPU kernel together, seeded random data, comparisons
//! with tolerances, and (in [`gpu`]) running an op's GPU kernel on the Vulkan device tests use.

pub mod gpu;

pub use gpu::{gpu_matches_cpu, gpu_same_bytes};

use crate::tensor::{DType, Tensor, numel};
use crate::{AttrValue, Attrs, InferInput, NodeSpec, Op, OpError, ValueType};

/// Builds an op of the default domain through the registry, as the graph layer does.
pub fn node(
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn Op>, OpError> {
    node_in("", op_type, opset, attrs, (num_inputs, num_outputs))
}

/// [`node`] for an op of `domain` (com.microsoft's, ai.onnx.ml's...).
pub fn node_in(
    domain: &str,
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    (num_inputs, num_outputs): (usize, usize),
) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    crate::build_in(
        domain,
        &NodeSpec {
            name: "test",
            op_type,
            attrs: &attrs,
            opset,
            num_inputs,
            num_outputs,
        },
    )
}

/// [`node`] with two inputs and one output (elementwise ops, products).
pub fn build(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, AttrValue)],
) -> Result<Box<dyn Op>, OpError> {
    node(op_type, opset, attrs.to_vec(), 2, 1)
}

/// [`node`] with one output.
pub fn op(
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    num_inputs: usize,
) -> Result<Box<dyn Op>, OpError> {
    node(op_type, opset, attrs, num_inputs, 1)
}

/// The shape rule's view of `inputs`: each present input's type, and its value where `known`
/// says so.
fn infer_inputs<'a>(
    inputs: &[Option<&'a Tensor>],
    types: &'a [Option<ValueType>],
    known: impl Fn(usize) -> bool,
) -> Vec<Option<InferInput<'a>>> {
    inputs
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (t, ty))| {
            ty.as_ref().map(|ty| InferInput {
                ty,
                value: if known(i) { *t } else { None },
            })
        })
        .collect()
}

fn types_of(inputs: &[Option<&Tensor>]) -> Vec<Option<ValueType>> {
    inputs.iter().map(|t| t.map(ValueType::of)).collect()
}

/// `infer` with every input's value known, as for a folded subgraph.
pub fn infer_known(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Vec<ValueType>, OpError> {
    let types = types_of(inputs);
    op.infer(&infer_inputs(inputs, &types, |_| true))
}

/// `infer` where only the inputs at `known` have values; the rest are run-time values.
pub fn infer_partly(
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
    known: &[usize],
) -> Result<Vec<ValueType>, OpError> {
    let types = types_of(inputs);
    op.infer(&infer_inputs(inputs, &types, |i| known.contains(&i)))
}

/// Runs the shape rule, then the CPU kernel, and checks that the kernel's outputs have the
/// types the rule promised.
pub fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let out_types = infer_known(op, inputs)?;
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

/// [`run`] for an op with one output.
pub fn run_one(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Tensor, OpError> {
    let mut out = run(op, inputs)?;
    assert_eq!(out.len(), 1, "one output expected");
    Ok(out.remove(0))
}

/// [`run_one`] from present inputs.
pub fn run1(op: &dyn Op, inputs: &[&Tensor]) -> Result<Tensor, OpError> {
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    run_one(op, &ins)
}

/// Builds and runs in one go; panics on a build error (tests of errors call the parts).
pub fn run_node(
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    inputs: &[Option<&Tensor>],
) -> Result<Tensor, OpError> {
    let op = op(op_type, opset, attrs, inputs.len()).expect("the node builds");
    run_one(op.as_ref(), inputs)
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

    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit() as f32).collect()
    }

    pub fn f64s(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.unit()).collect()
    }

    /// Same as [`Rng::f64s`], under the name the convolution tests use.
    pub fn values(&mut self, n: usize) -> Vec<f64> {
        self.f64s(n)
    }

    pub fn tensor_f32(&mut self, shape: &[usize]) -> Tensor {
        Tensor::from_vec(shape.to_vec(), self.f32s(numel(shape)))
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

/// Asserts `|got - want| <= tol[i]` elementwise (a bound per element, as a reference kernel
/// that tracks its own rounding error gives), reporting the first failure with `what`.
pub fn assert_within(got: &[f64], want: &[f64], tol: &[f64], what: &str) {
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

/// Asserts that an error is the given kind and that its message mentions `needle`.
#[track_caller]
pub fn assert_err(r: Result<impl std::fmt::Debug, OpError>, unsupported: bool, needle: &str) {
    match r {
        Ok(v) => panic!("expected an error mentioning '{needle}', got {v:?}"),
        Err(e) => {
            let kind_ok = matches!(
                (&e, unsupported),
                (OpError::Unsupported(_) | OpError::NeedsValue(_), true)
                    | (OpError::Invalid(_), false)
            );
            assert!(kind_ok, "wrong error kind: {e:?}");
            assert!(
                e.to_string().contains(needle),
                "'{e}' does not mention '{needle}'"
            );
        }
    }
}

/// The elements of a float tensor as f64.
pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().expect("float tensor")
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

/// An INTS attribute from any integers (sizes, axes, pads).
pub fn ints<T: Copy + TryInto<i64>>(v: &[T]) -> AttrValue {
    AttrValue::Ints(
        v.iter()
            .map(|&x| x.try_into().ok().expect("an attribute integer fits i64"))
            .collect(),
    )
}

pub fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec())
}

/// 0, 1, 2... as f32 in `shape`, for tests whose expected values are positions.
pub fn iota_f32(shape: &[usize]) -> Tensor {
    let n = numel(shape);
    Tensor::from_vec(shape.to_vec(), (0..n).map(|i| i as f32).collect())
}

/// Deterministic pseudo-random bytes, for tests that compare two implementations.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (rng.next_u64() >> 24) as u8).collect()
}

/// A tensor of random bytes. Bools are kept 0 or 1, as ONNX stores them.
pub fn random_tensor(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    let mut b = random_bytes(numel(shape) * dtype.size(), seed);
    if dtype == DType::Bool {
        b.iter_mut().for_each(|v| *v &= 1);
    }
    Tensor::from_bytes(dtype, shape.to_vec(), b.into()).expect("sizes match")
}

/// What the GPU shaders see: a tensor's bytes as little-endian 32-bit words (whole words only).
pub fn words(t: &Tensor) -> Vec<u32> {
    assert!(t.bytes().len().is_multiple_of(4));
    t.bytes()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn from_words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_le_bytes()).collect()
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

/// The spec's SAME padding for one axis, for the reference: (begin, end).
pub fn same_pads(input: usize, k: usize, s: usize, d: usize, upper: bool) -> (usize, usize) {
    let out = input.div_ceil(s);
    let total = ((out - 1) * s + (k - 1) * d + 1).saturating_sub(input);
    if upper {
        (total / 2, total - total / 2)
    } else {
        (total - total / 2, total / 2)
    }
}
