//! Running one op's GPU kernel on real inputs, for tests that compare a shader with the op's
//! CPU reference kernel, on the GPU `vkml_testkit::test_gpu` picks.
//!
//! Without a Vulkan device `run_op` panics, unless `VKML_SKIP_VULKAN=1`, when it returns
//! `Err("skipped")`. The Vulkan side is `vkml_testkit::kernel`; a kernel is timed alone with
//! its `KernelTimer` over [`kernel_run`].

use bytes::Bytes;
use vkml_testkit::kernel::{self, KernelDispatch, KernelRun, Slot};
use vkml_testkit::test_gpu;
use vkml_vulkan::Gpu;

use super::{assert_close, f64s, infer_known};
use crate::tensor::Tensor;
use crate::{BufRef, GpuKernel, InferInput, Op, ValueType};

/// Runs `op`'s GPU kernel on `inputs` and returns its outputs, of the types `outputs`.
///
/// Each present input goes into its own upload buffer, each output and scratch buffer gets a
/// device buffer (poisoned first), tables become small upload buffers; the dispatches run with
/// a barrier between each pair, then the outputs are copied to readback buffers.
pub fn run_op(
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, String> {
    let Some(gpu) = test_gpu() else {
        return Err("skipped".into());
    };
    run_op_on(gpu, op, inputs, outputs)
}

/// [`run_op`] on a given GPU.
pub fn run_op_on(
    gpu: &Gpu,
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, String> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    // Every input's value is known here, as when the planner folds them.
    let planned: Vec<Option<InferInput<'_>>> = types
        .iter()
        .zip(inputs)
        .map(|(ty, t)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
        .collect();
    let kernel = op
        .gpu_planned(&planned, outputs, &crate::KernelTuning::default())
        .ok_or_else(|| format!("{op:?} has no GPU kernel for inputs {types:?}"))?;
    run_kernel_on(gpu, &kernel, inputs, outputs)
}

/// As [`run_op_on`], with a given kernel of the op (one of its preferred ones, say).
pub fn run_kernel_on(
    gpu: &Gpu,
    kernel: &GpuKernel,
    inputs: &[Option<&Tensor>],
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, String> {
    let bytes: Vec<Option<&[u8]>> = inputs.iter().map(|t| t.map(|t| &t.bytes()[..])).collect();
    let sizes: Vec<u64> = outputs.iter().map(|o| o.bytes() as u64).collect();
    let got = kernel::run(gpu, &kernel_run(kernel), &bytes, &sizes)?;
    outputs
        .iter()
        .zip(got)
        .map(|(ty, data)| {
            Tensor::from_bytes(ty.dtype, ty.shape.clone(), Bytes::from(data))
                .map_err(|x| x.to_string())
        })
        .collect()
}

/// An op's kernel in the test kit's terms.
pub fn kernel_run(k: &GpuKernel) -> KernelRun {
    KernelRun {
        scratch: k.scratch.clone(),
        dispatches: k
            .dispatches
            .iter()
            .map(|d| KernelDispatch {
                kernel: d.kernel(),
                slots: d
                    .buffers()
                    .iter()
                    .map(|b| match b {
                        BufRef::Input(i) => Slot::Input(*i),
                        BufRef::Output(i) => Slot::Output(*i),
                        BufRef::Scratch(i) => Slot::Scratch(*i),
                        BufRef::Table(t) => Slot::Table(t.clone()),
                        BufRef::Fault => Slot::Fault,
                        BufRef::Counters(n) => Slot::Counters(*n),
                    })
                    .collect(),
                params: d.params().to_vec(),
                groups: d.groups,
            })
            .collect(),
    }
}

/// Runs `op` on the GPU and on the CPU, and compares: floats within `tol` relative (absolute
/// below magnitude 1), integers and bools exactly. Returns quietly when GPU tests are skipped
/// (`VKML_SKIP_VULKAN=1` and no device).
pub fn gpu_matches_cpu(op: &dyn Op, inputs: &[Option<&Tensor>], tol: f64) {
    let out_types = infer_known(op, inputs).expect("shape rule");
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let cpu = op.run_cpu(inputs, &out_types).expect("CPU kernel");
    let gpu = match run_op(op, inputs, &out_types) {
        Ok(g) => g,
        Err(e) if e == "skipped" => return,
        Err(e) => panic!("GPU run of {op:?} on {types:?} failed: {e}"),
    };
    assert_eq!(gpu.len(), cpu.len());
    for (g, c) in gpu.iter().zip(&cpu) {
        assert_eq!(ValueType::of(g), ValueType::of(c), "{op:?} on {types:?}");
        if c.dtype().is_float() {
            assert_close(&f64s(g), &f64s(c), tol);
        } else if c.dtype().is_low_precision() {
            assert_eq!(g.bytes(), c.bytes(), "{op:?} on {types:?}");
        } else {
            assert_eq!(
                g.to_i64_vec().unwrap(),
                c.to_i64_vec().unwrap(),
                "{op:?} on {types:?}"
            );
        }
    }
}

/// Runs `op` on the CPU and on the GPU and asserts the outputs are the same bytes (for ops that
/// only move bytes). False when GPU tests are skipped (`VKML_SKIP_VULKAN=1`); panics when the
/// op has no GPU kernel for these inputs.
#[track_caller]
pub fn gpu_same_bytes(op: &dyn Op, inputs: &[Option<&Tensor>], what: &str) -> bool {
    let types = infer_known(op, inputs).expect("the inputs fit the op");
    let cpu = op.run_cpu(inputs, &types).expect("the CPU kernel runs");
    match run_op(op, inputs, &types) {
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

/// Runs `op` through the Vulkan test harness and on the CPU: (gpu outputs, cpu outputs), or
/// `None` when GPU tests are skipped (`VKML_SKIP_VULKAN=1`).
pub(crate) fn gpu_and_cpu(
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
) -> Option<(Vec<Tensor>, Vec<Tensor>)> {
    let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
    let infer_in: Vec<_> = types
        .iter()
        .map(|ty| ty.as_ref().map(|ty| InferInput { ty, value: None }))
        .collect();
    let out_types = op.infer(&infer_in).unwrap();
    let cpu = op.run_cpu(inputs, &out_types).unwrap();
    match run_op(op, inputs, &out_types) {
        Err(e) if e == "skipped" => None,
        Err(e) => panic!("{op:?}: {e}"),
        Ok(gpu) => Some((gpu, cpu)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpError;
    use crate::{Dispatch, tensor::DType};

    /// out = (x + 1) * table, through a scratch buffer and two tables, in two dispatches of
    /// binary.comp; with `short`, the second dispatch leaves the last element unwritten.
    #[derive(Debug)]
    struct TwoStep {
        short: bool,
    }

    const TABLE: [f32; 5] = [0.5, -1.0, 4.0, 0.0, 8.0];

    impl Op for TwoStep {
        fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
            Ok(vec![inputs[0].unwrap().ty.clone()])
        }
        fn run_cpu(&self, _: &[Option<&Tensor>], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
            unreachable!("the harness never runs the CPU kernel")
        }
        fn gpu(&self, inputs: &[Option<&ValueType>], _: &[ValueType]) -> Option<GpuKernel> {
            use vkml_shaders::{binary, op::Binary};
            let n = inputs[0]?.numel() as u32;
            let words = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect();
            let params = |mode, n, op: Binary| binary::Params {
                mode,
                n,
                op: op.code(),
                ..Default::default()
            };
            Some(GpuKernel {
                scratch: vec![4 * n as u64],
                dispatches: vec![
                    // Mode 1: b is one element.
                    Dispatch::new(
                        binary::Variant::F32,
                        binary::Buffers {
                            a: BufRef::Input(0),
                            b: BufRef::Table(words(&[1.0])),
                            y: BufRef::Scratch(0),
                        },
                        params(1, n, Binary::Add),
                        [1, 1, 1],
                    ),
                    // Mode 0: same shapes.
                    Dispatch::new(
                        binary::Variant::F32,
                        binary::Buffers {
                            a: BufRef::Scratch(0),
                            b: BufRef::Table(words(&TABLE)),
                            y: BufRef::Output(0),
                        },
                        params(0, n - u32::from(self.short), Binary::Mul),
                        [1, 1, 1],
                    ),
                ],
            })
        }
    }

    fn input() -> Tensor {
        Tensor::from_vec(vec![5], vec![1.0f32, 2.0, 3.0, -4.0, 0.25])
    }

    #[test]
    fn run_op_runs_every_dispatch_in_order() {
        if test_gpu().is_none() {
            return;
        }
        let x = input();
        let out = run_op(
            &TwoStep { short: false },
            &[Some(&x)],
            &[ValueType::new(DType::F32, vec![5])],
        )
        .unwrap();
        let got = out[0].view::<f32>().unwrap();
        // (x + 1) * table, by hand.
        assert_eq!(&got[..], &[1.0, -3.0, 16.0, 0.0, 10.0]);
    }

    #[test]
    fn run_op_poisons_what_the_kernel_does_not_write() {
        if test_gpu().is_none() {
            return;
        }
        let x = input();
        let out = run_op(
            &TwoStep { short: true },
            &[Some(&x)],
            &[ValueType::new(DType::F32, vec![5])],
        )
        .unwrap();
        let got = out[0].view::<f32>().unwrap();
        assert_eq!(&got[..4], &[1.0, -3.0, 16.0, 0.0]);
        assert!(got[4].is_nan());
    }

    #[test]
    fn run_op_without_a_kernel_is_an_error() {
        #[derive(Debug)]
        struct CpuOnly;
        impl Op for CpuOnly {
            fn infer(&self, _: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
                Ok(vec![])
            }
            fn run_cpu(
                &self,
                _: &[Option<&Tensor>],
                _: &[ValueType],
            ) -> Result<Vec<Tensor>, OpError> {
                Ok(vec![])
            }
        }
        if test_gpu().is_none() {
            return;
        }
        let err = run_op(&CpuOnly, &[Some(&input())], &[]).unwrap_err();
        assert!(err.contains("no GPU kernel"), "{err}");
    }
}
