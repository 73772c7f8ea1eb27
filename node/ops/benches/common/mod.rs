//! What the ops' GPU benches share: an op's kernel in the test kit's terms.

use vkml_ops::{BufRef, GpuKernel};
use vkml_testkit::kernel::{KernelDispatch, KernelRun, Slot};

/// `k` in the test kit's terms, its dispatches `repeat` times over (the test kit puts a
/// barrier between each pair, as a chain of dependent ops in a model has).
pub fn kernel_run_repeated(k: &GpuKernel, repeat: usize) -> KernelRun {
    let once: Vec<KernelDispatch> = k
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
        .collect();
    KernelRun {
        scratch: k.scratch.clone(),
        dispatches: (0..repeat).flat_map(|_| once.iter().cloned()).collect(),
    }
}

/// `k` in the test kit's terms.
#[allow(dead_code)] // not every bench times single runs
pub fn kernel_run(k: &GpuKernel) -> KernelRun {
    kernel_run_repeated(k, 1)
}
