//! Running one op's GPU kernel on real inputs, for tests that compare a shader with the op's
//! CPU reference kernel, on the GPU `vkml_testkit::test_gpu` picks.
//!
//! Without a Vulkan device `run_op` panics, unless `VKML_SKIP_VULKAN=1`, when it returns
//! `Err("skipped")`.

use std::time::Duration;

use bytes::Bytes;
use vkml_testkit::{device_copy, test_gpu};
use vkml_vulkan::{CommandList, Gpu, GpuBuffer, MemoryUse, Step, VulkanError};

use super::{assert_close, f64s, infer_known};
use crate::tensor::Tensor;
use crate::{BufRef, GpuKernel, InferInput, Op, ValueType};

/// Written over every output and scratch buffer before the kernel runs, so an element the
/// kernel forgets to write reads back as NaN (floats) or -1 / 0xFF (integers, bools) rather
/// than as a plausible zero.
const POISON: u32 = 0xFFFF_FFFF;

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
    let e = |e: VulkanError| e.to_string();

    let mut input_bufs: Vec<Option<GpuBuffer>> = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        input_bufs.push(match t {
            Some(t) => {
                let buf = gpu
                    .create_buffer(
                        t.bytes().len() as u64,
                        MemoryUse::Upload,
                        &format!("input {i}"),
                    )
                    .map_err(e)?;
                buf.write(0, t.bytes()).map_err(e)?;
                Some(buf)
            }
            None => None,
        });
    }
    let (output_bufs, scratch_bufs) = output_and_scratch(gpu, kernel, outputs)?;
    let readback_bufs = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            gpu.create_buffer(
                o.bytes() as u64,
                MemoryUse::Readback,
                &format!("readback {i}"),
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;

    let mut tables = Vec::new();
    let mut steps = Vec::new();
    for buf in output_bufs.iter().chain(&scratch_bufs) {
        steps.push(Step::Fill {
            dst: buf,
            offset: 0,
            bytes: buf.size(),
            value: POISON,
        });
    }
    steps.push(Step::Barrier);
    let inputs_ref: Vec<Option<&GpuBuffer>> = input_bufs.iter().map(Option::as_ref).collect();
    steps.extend(kernel_steps(
        gpu,
        kernel,
        &inputs_ref,
        &output_bufs,
        &scratch_bufs,
        &mut tables,
    )?);
    steps.push(Step::Barrier);
    for (o, r) in output_bufs.iter().zip(&readback_bufs) {
        steps.push(Step::Copy {
            src: o,
            src_offset: 0,
            dst: r,
            dst_offset: 0,
            bytes: o.size(),
        });
    }

    let list = gpu.record(&steps).map_err(e)?;
    let value = gpu.submit(&list).map_err(e)?;
    // Generous: lavapipe on a loaded CI machine is slow.
    if !gpu.wait(value, Duration::from_secs(300)).map_err(e)? {
        return Err("the GPU kernel did not finish within 300 s".into());
    }
    outputs
        .iter()
        .zip(&readback_bufs)
        .map(|(ty, r)| {
            let mut data = vec![0u8; ty.bytes()];
            r.read(0, &mut data).map_err(e)?;
            Tensor::from_bytes(ty.dtype, ty.shape.clone(), Bytes::from(data))
                .map_err(|x| x.to_string())
        })
        .collect()
}

/// The dispatches of `kernel` over the given buffers, with a barrier between each pair;
/// tables are uploaded into `tables`, which must outlive the recorded list.
fn kernel_steps<'a>(
    gpu: &Gpu,
    kernel: &GpuKernel,
    inputs: &[Option<&GpuBuffer>],
    outputs: &[GpuBuffer],
    scratch: &[GpuBuffer],
    tables: &mut Vec<GpuBuffer>,
) -> Result<Vec<Step<'a>>, String> {
    let e = |e: VulkanError| e.to_string();
    let mut steps = Vec::new();
    for (d, dispatch) in kernel.dispatches.iter().enumerate() {
        if d > 0 {
            steps.push(Step::Barrier);
        }
        let mut addrs = Vec::new();
        for r in dispatch.buffers() {
            let addr = match r {
                BufRef::Input(i) => inputs
                    .get(*i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| format!("dispatch {d} reads input {i}, which is absent"))?
                    .address(),
                BufRef::Output(i) => outputs
                    .get(*i)
                    .ok_or_else(|| format!("dispatch {d} writes output {i}, which does not exist"))?
                    .address(),
                BufRef::Scratch(i) => scratch
                    .get(*i)
                    .ok_or_else(|| format!("dispatch {d} uses scratch {i}, which does not exist"))?
                    .address(),
                BufRef::Table(words) => {
                    let bytes: &[u8] = bytemuck::cast_slice(words);
                    let t = gpu
                        .create_buffer(
                            bytes.len() as u64,
                            MemoryUse::Upload,
                            &format!("table of dispatch {d}"),
                        )
                        .map_err(e)?;
                    t.write(0, bytes).map_err(e)?;
                    let a = t.address();
                    tables.push(t);
                    a
                }
            };
            addrs.push(addr);
        }
        steps.push(Step::Dispatch {
            kernel: dispatch.kernel(),
            addrs,
            params: dispatch.params().to_vec(),
            groups: dispatch.groups,
        });
    }
    Ok(steps)
}

/// Device buffers for `kernel`'s outputs (of the types `outputs`) and its scratch.
fn output_and_scratch(
    gpu: &Gpu,
    kernel: &GpuKernel,
    outputs: &[ValueType],
) -> Result<(Vec<GpuBuffer>, Vec<GpuBuffer>), String> {
    let sizes = outputs
        .iter()
        .map(|o| (o.bytes() as u64, "output"))
        .chain(kernel.scratch.iter().map(|&b| (b, "scratch")));
    let mut bufs = sizes
        .enumerate()
        .map(|(i, (bytes, what))| {
            gpu.create_buffer(bytes, MemoryUse::Device, &format!("{what} {i}"))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let scratch = bufs.split_off(outputs.len());
    Ok((bufs, scratch))
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

/// One kernel alone on fixed inputs, recorded once and timed as often as wanted: inputs,
/// outputs and scratch sit in device memory as the executor places them. For reports that
/// time a kernel without a model around it.
pub struct KernelTimer<'g> {
    gpu: &'g Gpu,
    list: CommandList,
}

impl<'g> KernelTimer<'g> {
    pub fn new(
        gpu: &'g Gpu,
        kernel: &GpuKernel,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Self, String> {
        let input_bufs = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.map(|t| device_copy(gpu, t.bytes(), &format!("input {i}")))
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (output_bufs, scratch_bufs) = output_and_scratch(gpu, kernel, outputs)?;
        let mut tables = Vec::new();
        let inputs_ref: Vec<Option<&GpuBuffer>> = input_bufs.iter().map(Option::as_ref).collect();
        let steps = kernel_steps(
            gpu,
            kernel,
            &inputs_ref,
            &output_bufs,
            &scratch_bufs,
            &mut tables,
        )?;
        // The list keeps every buffer its steps touch alive.
        let list = gpu.record(&steps).map_err(|e| e.to_string())?;
        Ok(KernelTimer { gpu, list })
    }

    /// Seconds each of `runs` submissions takes, submission to observed completion.
    pub fn time(&self, runs: usize) -> Result<Vec<f64>, String> {
        let e = |e: VulkanError| e.to_string();
        (0..runs)
            .map(|_| {
                let t = std::time::Instant::now();
                let v = self.gpu.submit(&self.list).map_err(e)?;
                if !self.gpu.wait(v, Duration::from_secs(300)).map_err(e)? {
                    return Err("the GPU kernel did not finish within 300 s".into());
                }
                Ok(t.elapsed().as_secs_f64())
            })
            .collect()
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
