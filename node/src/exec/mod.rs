//! Execution: a plan turned into chunks with dependency counters. GPU chunks are command lists
//! recorded once per execution context and replayed; CPU chunks call the reference kernels.
//! A chunk that finishes decrements its successors' counters; those that reach zero start.

mod arena;
mod gpu;
mod plan;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use plan::{Device, cpu_memory, inventory};
use vkml_planner::{LinkCosts, Plan, PlanError};

use crate::error::{Error, Result};
use crate::graph::{Graph, Specialized, ValueId};
use crate::ops::{GpuKernel, ValueType};
use crate::session::PlanSummary;
use crate::tensor::Tensor;
use gpu::{GpuContext, GpuLayout, GpuOps};

/// One GPU's layout, its ops as (plan position, chunk), and the values it exports.
type GpuShare = (GpuLayout, Vec<(usize, usize)>, Vec<ValueId>);

/// A model specialised to input shapes, planned and ready to run many times.
pub struct Executable {
    graph: Arc<Graph>,
    spec: Specialized,
    devices: Vec<Device>,
    plan: Plan,
    kernels: Vec<Option<GpuKernel>>,
    /// Per GPU device index (in `devices`): its layout and the ops it runs.
    layouts: BTreeMap<usize, GpuShare>,
    /// Idle execution contexts; a run takes one, or makes one when all are busy.
    pool: Mutex<Vec<BTreeMap<usize, GpuContext>>>,
    summary: PlanSummary,
}

fn plan_error(e: PlanError) -> Error {
    Error::Placement(e.to_string())
}

impl Executable {
    pub fn new(
        graph: Arc<Graph>,
        spec: Specialized,
        devices: Vec<Device>,
        memory_limit: Option<u64>,
    ) -> Result<Executable> {
        let input_ids: Vec<usize> = graph.inputs.iter().map(|(v, _)| *v).collect();
        let (cost, kernels) = plan::cost_graph(&graph, &spec, &input_ids);
        let snapshot = plan::inventory(&devices, memory_limit);
        let plan =
            vkml_planner::plan(&cost, &snapshot, &LinkCosts::default()).map_err(plan_error)?;
        let dev_of = |c: usize| plan.chunks[c].device.index;

        let mut ops_per_device = BTreeMap::new();
        for d in &plan.placement {
            *ops_per_device.entry(devices[d.index].name()).or_insert(0) += 1;
        }
        let summary = PlanSummary {
            ops_per_device,
            transfers: plan.transfers.len(),
            chunks: plan.chunks.len(),
        };
        tracing::debug!(?summary, hash = plan.hash, "planned");

        let mut layouts = BTreeMap::new();
        for (d, dev) in devices.iter().enumerate() {
            let Device::Gpu(g) = dev else { continue };
            let ops: Vec<(usize, usize)> = (0..spec.live.len())
                .filter(|&p| plan.placement[p].index == d)
                .map(|p| (p, plan.op_chunk[p]))
                .collect();
            if ops.is_empty() {
                continue;
            }
            let mut exported: Vec<ValueId> = Vec::new();
            for t in &plan.transfers {
                if dev_of(t.from_chunk) == d && !exported.contains(&t.value) {
                    exported.push(t.value);
                }
            }
            for &(p, _) in &ops {
                for &o in &graph.nodes[spec.live[p]].outputs {
                    if graph.outputs.iter().any(|(v, _)| *v == o) && !exported.contains(&o) {
                        exported.push(o);
                    }
                }
            }
            let on = GpuOps {
                ops: ops.clone(),
                exported: exported.clone(),
                kernels: &kernels,
            };
            let layout = GpuLayout::new(g.clone(), &graph, &spec, &on)?;
            layouts.insert(d, (layout, ops, exported));
        }
        let exe = Executable {
            graph,
            spec,
            devices,
            plan,
            kernels,
            layouts,
            pool: Mutex::new(Vec::new()),
            summary,
        };
        // One context up front, so the first run pays no recording.
        let ctx = exe.new_context()?;
        exe.pool.lock().expect("pool").push(ctx);
        Ok(exe)
    }

    pub fn summary(&self) -> &PlanSummary {
        &self.summary
    }

    pub fn output_types(&self) -> Vec<ValueType> {
        self.graph
            .outputs
            .iter()
            .map(|(v, _)| self.spec.types[*v].clone().expect("typed"))
            .collect()
    }

    fn new_context(&self) -> Result<BTreeMap<usize, GpuContext>> {
        let mut m = BTreeMap::new();
        for (d, (layout, ops, exported)) in &self.layouts {
            let on = GpuOps {
                ops: ops.clone(),
                exported: exported.clone(),
                kernels: &self.kernels,
            };
            m.insert(*d, layout.context(&self.graph, &self.spec, &on)?);
        }
        Ok(m)
    }

    /// Runs once with inputs in the graph's input order.
    pub fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let ctx = self.pool.lock().expect("pool").pop();
        let ctx = match ctx {
            Some(c) => c,
            None => self.new_context()?,
        };
        let result = self.run_in(&ctx, inputs);
        self.pool.lock().expect("pool").push(ctx);
        result
    }

    fn run_in(
        &self,
        ctx: &BTreeMap<usize, GpuContext>,
        inputs: Vec<Tensor>,
    ) -> Result<Vec<Tensor>> {
        let n_values = self.graph.value_names.len();
        let mut host: Vec<Option<Tensor>> = vec![None; n_values];
        for ((v, _), t) in self.graph.inputs.iter().zip(inputs) {
            host[*v] = Some(t);
        }
        let chunks = &self.plan.chunks;
        let counters: Vec<AtomicUsize> = chunks
            .iter()
            .map(|c| AtomicUsize::new(c.preds.len()))
            .collect();
        let mut ready: VecDeque<usize> = (0..chunks.len())
            .filter(|&c| chunks[c].preds.is_empty())
            .collect();
        let mut in_flight: VecDeque<(usize, u64)> = VecDeque::new();
        let mut remaining = chunks.len();
        let complete = |c: usize, ready: &mut VecDeque<usize>| {
            for &s in &chunks[c].succs {
                if counters[s].fetch_sub(1, Ordering::AcqRel) == 1 {
                    ready.push_back(s);
                }
            }
        };
        while remaining > 0 {
            if let Some(c) = ready.pop_front() {
                let d = chunks[c].device.index;
                match &self.devices[d] {
                    Device::Cpu | Device::CpuFallback => {
                        self.run_cpu_chunk(c, &mut host)?;
                        remaining -= 1;
                        complete(c, &mut ready);
                    }
                    Device::Gpu(g) => {
                        let gctx = &ctx[&d];
                        let layout = &self.layouts[&d].0;
                        for &(v, off) in &layout.imports {
                            if self.chunk_reads(c, v) {
                                let t = host[v]
                                    .as_ref()
                                    .or(self.spec.consts[v].as_ref())
                                    .ok_or_else(|| {
                                        Error::Device(format!(
                                            "value '{}' missing before upload",
                                            self.graph.value_names[v]
                                        ))
                                    })?;
                                gctx.import
                                    .write(off, t.bytes())
                                    .map_err(|e| Error::Device(e.to_string()))?;
                            }
                        }
                        let ticket = g
                            .submit(&gctx.lists[&c])
                            .map_err(|e| Error::Device(e.to_string()))?;
                        in_flight.push_back((c, ticket));
                    }
                }
                continue;
            }
            let Some((c, ticket)) = in_flight.pop_front() else {
                return Err(Error::Device(
                    "scheduler stalled: no chunk ready and none in flight".into(),
                ));
            };
            let d = chunks[c].device.index;
            let Device::Gpu(g) = &self.devices[d] else {
                unreachable!("only GPU chunks are in flight")
            };
            let done = g
                .wait_spin(ticket, g.spin_default(), Duration::from_secs(600))
                .map_err(|e| Error::Device(e.to_string()))?;
            if !done {
                return Err(Error::Device(format!(
                    "{} did not finish a chunk within 600 s",
                    self.devices[d].name()
                )));
            }
            let layout = &self.layouts[&d].0;
            if let Some(ex) = layout.exports.get(&c) {
                for &(v, off) in ex {
                    let ty = self.spec.types[v].as_ref().expect("typed");
                    let mut bytes = vec![0u8; ty.bytes()];
                    ctx[&d]
                        .readback
                        .read(off, &mut bytes)
                        .map_err(|e| Error::Device(e.to_string()))?;
                    host[v] = Some(Tensor::from_bytes(
                        ty.dtype,
                        ty.shape.clone(),
                        bytes.into(),
                    )?);
                }
            }
            remaining -= 1;
            complete(c, &mut ready);
        }
        self.graph
            .outputs
            .iter()
            .map(|(v, def)| {
                host[*v]
                    .clone()
                    .or_else(|| self.spec.consts[*v].clone())
                    .ok_or_else(|| Error::Device(format!("output '{}' was not produced", def.name)))
            })
            .collect()
    }

    fn chunk_reads(&self, c: usize, v: ValueId) -> bool {
        self.plan.chunks[c].ops.iter().any(|&p| {
            self.graph.nodes[self.spec.live[p]]
                .inputs
                .contains(&Some(v))
        })
    }

    fn run_cpu_chunk(&self, c: usize, host: &mut [Option<Tensor>]) -> Result<()> {
        for &p in &self.plan.chunks[c].ops {
            let node = &self.graph.nodes[self.spec.live[p]];
            let args: Vec<Option<&Tensor>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|v| host[v].as_ref().or(self.spec.consts[v].as_ref())))
                .collect();
            let out_types: Vec<ValueType> = node
                .outputs
                .iter()
                .map(|&o| self.spec.types[o].clone().expect("typed"))
                .collect();
            let outs = node
                .op
                .run_cpu(&args, &out_types)
                .map_err(|e| Error::Node {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    message: e.to_string(),
                })?;
            for (&o, t) in node.outputs.iter().zip(outs) {
                host[o] = Some(t);
            }
        }
        Ok(())
    }
}
