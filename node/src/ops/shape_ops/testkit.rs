//! Test helpers for the data-movement ops (this folder, and transpose, concat and gather):
//! build an op through the registry as a loaded node would, infer and run it.

use crate::ops::{AttrValue, Attrs, InferInput, NodeSpec, Op, OpError, ValueType, build};
use crate::tensor::Tensor;

pub fn op(
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    num_inputs: usize,
) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    build(&NodeSpec {
        name: "test",
        op_type,
        attrs: &attrs,
        opset,
        num_inputs,
        num_outputs: 1,
    })
}

/// `infer` with every input's value known, as for a folded subgraph.
pub fn infer_known(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Vec<ValueType>, OpError> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let infer_inputs: Vec<Option<InferInput<'_>>> = inputs
        .iter()
        .zip(&types)
        .map(|(t, ty)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
        .collect();
    op.infer(&infer_inputs)
}

/// `infer` where only the inputs at `known` have values; the rest are run-time values.
pub fn infer_partly(
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
    known: &[usize],
) -> Result<Vec<ValueType>, OpError> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let infer_inputs: Vec<Option<InferInput<'_>>> = inputs
        .iter()
        .zip(&types)
        .enumerate()
        .map(|(i, (t, ty))| {
            ty.as_ref().map(|ty| InferInput {
                ty,
                value: if known.contains(&i) { *t } else { None },
            })
        })
        .collect();
    op.infer(&infer_inputs)
}

/// Infers (all values known), runs the CPU kernel, and checks that the kernel's output has the
/// type the rule promised.
pub fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Result<Tensor, OpError> {
    let types = infer_known(op, inputs)?;
    let mut out = op.run_cpu(inputs, &types)?;
    assert_eq!(out.len(), 1, "one output expected");
    let y = out.remove(0);
    assert_eq!(
        ValueType::of(&y),
        types[0],
        "kernel output differs from the shape rule"
    );
    Ok(y)
}

/// Builds and runs in one go; panics on a build error (tests of errors call the parts).
pub fn run_node(
    op_type: &str,
    opset: i64,
    attrs: Vec<(&str, AttrValue)>,
    inputs: &[Option<&Tensor>],
) -> Result<Tensor, OpError> {
    let op = op(op_type, opset, attrs, inputs.len()).expect("the node builds");
    run(op.as_ref(), inputs)
}

pub fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

pub fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec())
}

/// 0, 1, 2... as f32 in `shape`, for tests whose expected values are positions.
pub fn iota_f32(shape: &[usize]) -> Tensor {
    let n = crate::tensor::numel(shape);
    Tensor::from_vec(shape.to_vec(), (0..n).map(|i| i as f32).collect())
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

/// Deterministic pseudo-random bytes (xorshift), for tests that compare two implementations.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// A tensor of random bytes. Bools are kept 0 or 1, as ONNX stores them.
pub fn random_tensor(dtype: crate::tensor::DType, shape: &[usize], seed: u64) -> Tensor {
    let mut b = random_bytes(crate::tensor::numel(shape) * dtype.size(), seed);
    if dtype == crate::tensor::DType::Bool {
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

/// Runs `op` on the CPU and, through the Vulkan test harness, on the GPU, and asserts the
/// outputs are the same bytes (these ops only move bytes). False when Vulkan tests are skipped
/// (`VKML_SKIP_VULKAN=1`); panics when the op has no GPU kernel for these inputs.
#[track_caller]
pub fn gpu_matches_cpu(op: &dyn Op, inputs: &[Option<&Tensor>], what: &str) -> bool {
    let types = infer_known(op, inputs).expect("the inputs fit the op");
    let cpu = op.run_cpu(inputs, &types).expect("the CPU kernel runs");
    match crate::device::vulkan::testing::run_op(op, inputs, &types) {
        Err(e) if e == "skipped" => false,
        Err(e) => panic!("{what}: the GPU run failed: {e}"),
        Ok(gpu) => {
            assert_eq!(gpu.len(), cpu.len());
            for (g, c) in gpu.iter().zip(&cpu) {
                assert_eq!(ValueType::of(g), ValueType::of(c), "{what}");
                if g.bytes() != c.bytes() {
                    let at = g
                        .bytes()
                        .iter()
                        .zip(c.bytes().iter())
                        .position(|(a, b)| a != b);
                    panic!(
                        "{what}: GPU and CPU differ, first at byte {at:?} of {}",
                        g.bytes().len()
                    );
                }
            }
            true
        }
    }
}
