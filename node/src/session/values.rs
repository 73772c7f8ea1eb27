//! Checks of graph inputs' values before a run. An index out of range is an error on the CPU.
//! Where the indices are a graph input or a constant, their values are on the host before the
//! run, so the op checks them there, whatever device runs it, and the run fails before
//! anything is submitted. Indices computed on a GPU during the run are checked by the kernels,
//! which record a fault that fails the run once it completes (shaders/index.glsl,
//! exec/gpu.rs `GpuLayout::take_fault`).

use crate::error::Result;
use crate::graph::{Graph, Specialized};
use crate::ops::InferInput;
use crate::tensor::Tensor;

/// The ops whose index values are checked before a run (they implement `Op::check_values`).
const INDEXING: &[&str] = &[
    "Gather",
    "GatherElements",
    "GatherND",
    "ScatterElements",
    "Scatter",
    "ScatterND",
];

/// The nodes of a graph to check before each run: an indexing op reading a graph input or an
/// initializer (a constant whose node is not folded: its data comes from the run).
#[derive(Debug, Default)]
pub(super) struct ValueChecks(Vec<usize>);

impl ValueChecks {
    pub(super) fn new(graph: &Graph) -> ValueChecks {
        let is_input =
            |v: usize| graph.inputs.iter().any(|(g, _)| *g == v) || graph.initializers[v].is_some();
        ValueChecks(
            graph
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.domain.is_empty() && INDEXING.contains(&n.op_type.as_str()))
                .filter(|(_, n)| n.inputs.iter().flatten().any(|&v| is_input(v)))
                .map(|(i, _)| i)
                .collect(),
        )
    }

    /// `inputs` in graph order (`None` where the value stays on a device: bound state);
    /// `spec` the plan's types and constants.
    pub(super) fn check(
        &self,
        graph: &Graph,
        spec: &Specialized,
        inputs: &[Option<&Tensor>],
    ) -> Result<()> {
        for &n in &self.0 {
            let node = &graph.nodes[n];
            let mut args = Vec::with_capacity(node.inputs.len());
            for v in &node.inputs {
                let Some(v) = *v else {
                    args.push(None);
                    continue;
                };
                // A node the plan never reaches has no types: nothing runs it.
                let Some(ty) = spec.types[v].as_ref() else {
                    args.clear();
                    break;
                };
                let value = match graph.inputs.iter().position(|(g, _)| *g == v) {
                    Some(i) => inputs.get(i).copied().flatten(),
                    None => spec.consts[v].as_ref(),
                };
                args.push(Some(InferInput { ty, value }));
            }
            if args.is_empty() {
                continue;
            }
            node.op
                .check_values(&args)
                .map_err(|e| crate::graph::op_err(&node.name, &node.op_type, e))?;
        }
        Ok(())
    }
}
