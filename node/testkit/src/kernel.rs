//! Running and timing one kernel's dispatches on a GPU, as an op describes them, without
//! depending on the ops crate (whose unit tests use this too, and would otherwise see two
//! copies of its types): a [`KernelRun`] is an op's `GpuKernel` in this crate's terms.

use std::time::{Duration, Instant};

use vkml_vulkan::{CommandList, Gpu, GpuBuffer, Kernel, MemoryUse, Step, VulkanError};

use crate::device_copy;

/// Written over every output and scratch buffer before the kernel runs, so an element the
/// kernel forgets to write reads back as NaN (floats) or -1 / 0xFF (integers, bools) rather
/// than as a plausible zero.
const POISON: u32 = 0xFFFF_FFFF;

/// How long a run may take before it counts as hung (lavapipe on a loaded CI machine is slow).
const LONG: Duration = Duration::from_secs(300);

/// A buffer a dispatch reaches, named as an op names it.
#[derive(Debug, Clone)]
pub enum Slot {
    Input(usize),
    Output(usize),
    Scratch(usize),
    /// A small read-only table, uploaded when the run is recorded.
    Table(Vec<u32>),
    /// The op's fault record (`Fault` in shaders/index.glsl): zeroed before the run; a run
    /// whose kernel records an index out of range in it fails.
    Fault,
    /// This many u32 counters of the dispatch's own, zeroed when the run is recorded.
    Counters(usize),
}

/// Bytes of a fault record (vkml_shaders::FAULT_RECORD_BYTES).
const FAULT_BYTES: u64 = 32;

/// One dispatch of a run.
#[derive(Debug, Clone)]
pub struct KernelDispatch {
    pub kernel: Kernel,
    pub slots: Vec<Slot>,
    pub params: Vec<u32>,
    pub groups: [u32; 3],
}

/// An op's dispatches, in order, and the scratch buffers they share.
#[derive(Debug, Clone, Default)]
pub struct KernelRun {
    /// Bytes of each scratch buffer.
    pub scratch: Vec<u64>,
    pub dispatches: Vec<KernelDispatch>,
}

fn err(e: VulkanError) -> String {
    e.to_string()
}

/// Runs `run` on `inputs` (absent ones `None`) into outputs of `outputs` bytes, and returns
/// their bytes. Each input gets an upload buffer, each output and scratch buffer a device
/// buffer (poisoned first), tables small upload buffers; the dispatches run with a barrier
/// between each pair, then the outputs are copied to readback buffers.
pub fn run(
    gpu: &Gpu,
    run: &KernelRun,
    inputs: &[Option<&[u8]>],
    outputs: &[u64],
) -> Result<Vec<Vec<u8>>, String> {
    let mut input_bufs = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        input_bufs.push(match t {
            Some(bytes) => {
                let buf = gpu
                    .create_buffer(bytes.len() as u64, MemoryUse::Upload, &format!("input {i}"))
                    .map_err(err)?;
                buf.write(0, bytes).map_err(err)?;
                Some(buf)
            }
            None => None,
        });
    }
    let (output_bufs, scratch_bufs) = output_and_scratch(gpu, run, outputs)?;
    let fault = fault_buffer(gpu)?;
    let readback = outputs
        .iter()
        .enumerate()
        .map(|(i, &b)| gpu.create_buffer(b, MemoryUse::Readback, &format!("readback {i}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
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
    let buffers = Buffers {
        inputs: &inputs_ref,
        outputs: &output_bufs,
        scratch: &scratch_bufs,
        fault: &fault,
    };
    steps.extend(steps_of(gpu, run, &buffers, &mut tables)?);
    steps.push(Step::Barrier);
    for (o, r) in output_bufs.iter().zip(&readback) {
        steps.push(Step::Copy {
            src: o,
            src_offset: 0,
            dst: r,
            dst_offset: 0,
            bytes: o.size(),
        });
    }
    let list = gpu.record(&steps).map_err(err)?;
    let value = gpu.submit(&list).map_err(err)?;
    if !gpu.wait(value, LONG).map_err(err)? {
        return Err(format!("the GPU kernel did not finish within {LONG:?}"));
    }
    let mut record = [0u8; FAULT_BYTES as usize];
    fault.read(0, &mut record).map_err(err)?;
    let word = |i: usize| u32::from_le_bytes(record[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    if word(0) != 0 {
        return Err(format!(
            "the kernel met index {} (element {} of the indices) out of range for an axis of \
             size {}",
            (u64::from(word(3)) << 32 | u64::from(word(2))) as i64,
            word(1),
            word(4)
        ));
    }
    outputs
        .iter()
        .zip(&readback)
        .map(|(&bytes, r)| {
            let mut data = vec![0u8; bytes as usize];
            r.read(0, &mut data).map_err(err)?;
            Ok(data)
        })
        .collect()
}

/// The buffers a run's slots resolve to.
struct Buffers<'a> {
    inputs: &'a [Option<&'a GpuBuffer>],
    outputs: &'a [GpuBuffer],
    scratch: &'a [GpuBuffer],
    fault: &'a GpuBuffer,
}

/// A zeroed fault record.
fn fault_buffer(gpu: &Gpu) -> Result<GpuBuffer, String> {
    let b = gpu
        .create_buffer(FAULT_BYTES, MemoryUse::Readback, "fault")
        .map_err(err)?;
    b.write(0, &[0; FAULT_BYTES as usize]).map_err(err)?;
    Ok(b)
}

/// The dispatches of `run` over `b`, with a barrier between each pair; tables are uploaded
/// into `tables`, which must outlive the recorded list.
fn steps_of(
    gpu: &Gpu,
    run: &KernelRun,
    b: &Buffers<'_>,
    tables: &mut Vec<GpuBuffer>,
) -> Result<Vec<Step<'static>>, String> {
    let mut steps = Vec::new();
    for (d, dispatch) in run.dispatches.iter().enumerate() {
        if d > 0 {
            steps.push(Step::Barrier);
        }
        let mut addrs = Vec::new();
        for slot in &dispatch.slots {
            let missing = |what: &str| format!("dispatch {d} reaches {what}, which does not exist");
            addrs.push(match slot {
                Slot::Input(i) => b
                    .inputs
                    .get(*i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| missing(&format!("input {i}")))?
                    .address(),
                Slot::Output(i) => b
                    .outputs
                    .get(*i)
                    .ok_or_else(|| missing(&format!("output {i}")))?
                    .address(),
                Slot::Scratch(i) => b
                    .scratch
                    .get(*i)
                    .ok_or_else(|| missing(&format!("scratch {i}")))?
                    .address(),
                Slot::Table(words) => {
                    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                    let t = gpu
                        .create_buffer(bytes.len() as u64, MemoryUse::Upload, "table")
                        .map_err(err)?;
                    t.write(0, &bytes).map_err(err)?;
                    let a = t.address();
                    tables.push(t);
                    a
                }
                Slot::Fault => b.fault.address(),
                Slot::Counters(n) => {
                    let c = device_copy(gpu, &vec![0; 4 * (*n).max(1)], "counters")?;
                    let a = c.address();
                    tables.push(c);
                    a
                }
            });
        }
        steps.push(Step::Dispatch {
            kernel: dispatch.kernel,
            addrs,
            params: dispatch.params.clone(),
            groups: dispatch.groups,
        });
    }
    Ok(steps)
}

/// Device buffers for `run`'s outputs (of `outputs` bytes) and its scratch.
fn output_and_scratch(
    gpu: &Gpu,
    run: &KernelRun,
    outputs: &[u64],
) -> Result<(Vec<GpuBuffer>, Vec<GpuBuffer>), String> {
    let sizes = outputs
        .iter()
        .map(|&b| (b, "output"))
        .chain(run.scratch.iter().map(|&b| (b, "scratch")));
    let mut bufs = sizes
        .enumerate()
        .map(|(i, (bytes, what))| {
            gpu.create_buffer(bytes, MemoryUse::Device, &format!("{what} {i}"))
                .map_err(err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let scratch = bufs.split_off(outputs.len());
    Ok((bufs, scratch))
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
        run: &KernelRun,
        inputs: &[Option<&[u8]>],
        outputs: &[u64],
    ) -> Result<Self, String> {
        let input_bufs = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.map(|t| device_copy(gpu, t, &format!("input {i}")))
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (output_bufs, scratch_bufs) = output_and_scratch(gpu, run, outputs)?;
        let fault = fault_buffer(gpu)?;
        let mut tables = Vec::new();
        let inputs_ref: Vec<Option<&GpuBuffer>> = input_bufs.iter().map(Option::as_ref).collect();
        let buffers = Buffers {
            inputs: &inputs_ref,
            outputs: &output_bufs,
            scratch: &scratch_bufs,
            fault: &fault,
        };
        let steps = steps_of(gpu, run, &buffers, &mut tables)?;
        // The list keeps every buffer its steps touch alive.
        let list = gpu.record(&steps).map_err(err)?;
        Ok(KernelTimer { gpu, list })
    }

    /// Seconds each of `runs` submissions takes, submission to observed completion.
    pub fn time(&self, runs: usize) -> Result<Vec<f64>, String> {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                let v = self.gpu.submit(&self.list).map_err(err)?;
                if !self.gpu.wait(v, LONG).map_err(err)? {
                    return Err(format!("the GPU kernel did not finish within {LONG:?}"));
                }
                Ok(t.elapsed().as_secs_f64())
            })
            .collect()
    }
}
