//! The API: load a model once, run it many times from many threads.
//!
//! ```no_run
//! use vkml::{Session, SessionOptions, Tensor};
//! let session = Session::load("model.onnx", SessionOptions::default())?;
//! let x = Tensor::from_vec(vec![1, 4], vec![1.0f32, 2.0, 3.0, 4.0]);
//! let outputs = session.run(&[("x", x)])?;
//! # Ok::<(), vkml::Error>(())
//! ```

mod bound;
mod plans;
#[cfg(test)]
mod tests;
mod values;

pub use bound::BoundState;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use crate::device::vulkan::{Vulkan, VulkanOptions};
use crate::error::{Error, Result};
pub use crate::exec::PlanSummary;
use crate::exec::shared::SharedWeights;
use crate::exec::{Device, Executable, KernelTime, NodeTime};
use crate::graph::{Fusion, Graph, SpecializeError, Specialized};
use crate::io::Value;
use crate::lower::Structured;
use crate::model::{Dim, ValueDef};
use crate::ops::{OpError, ValueType};
use crate::tensor::Tensor;
use crate::tuning::Tuning;
use plans::{MAX_PLANS, PlanCache, PlanKey};

/// Which devices a session may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSelection {
    /// Every Vulkan GPU and the CPU.
    #[default]
    Auto,
    /// The CPU backend alone.
    Cpu,
    /// Every Vulkan GPU; the CPU only runs ops that have no GPU kernel.
    Vulkan,
    /// One Vulkan GPU, by its index in `vkml-node devices`.
    VulkanIndex(usize),
}

impl std::str::FromStr for DeviceSelection {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(DeviceSelection::Auto),
            "cpu" => Ok(DeviceSelection::Cpu),
            "vulkan" => Ok(DeviceSelection::Vulkan),
            _ => s
                .strip_prefix("vulkan:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSelection::VulkanIndex)
                .ok_or_else(|| format!("'{s}' is not a device: use auto, cpu, vulkan or vulkan:N")),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub devices: DeviceSelection,
    /// Caps every device's memory budget (bytes), to force a model to split across devices.
    pub device_memory_limit: Option<u64>,
    /// Time every op (see [`Session::profile`]).
    pub profile: bool,
    /// How to plan and run (fusion, kernel choices, arming, Vulkan diagnostics).
    pub tuning: Tuning,
}

/// The process's Vulkan instance opened with `options`, created on first use. Sessions with
/// the same options share it (and so the GPUs' queues, pipelines and arming); sessions asking
/// for other options (a validation layer, another queue family) get an instance of their own.
pub fn vulkan(options: &VulkanOptions) -> std::result::Result<&'static Vulkan, Error> {
    type Opened = std::result::Result<&'static Vulkan, String>;
    static OPENED: OnceLock<Mutex<BTreeMap<VulkanOptions, Opened>>> = OnceLock::new();
    let mut opened = OPENED
        .get_or_init(|| Mutex::new(BTreeMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let entry = opened.entry(*options).or_insert_with(|| {
        // Leaked once per distinct options: every session may hold GPUs of it for as long
        // as the process lives, as it would a static.
        Vulkan::new(options)
            .map(|v| &*Box::leak(Box::new(v)))
            .map_err(|e| e.to_string())
    });
    entry
        .clone()
        .map_err(|e| Error::Device(format!("Vulkan is not available: {e}")))
}

/// A loaded model. Plans are made per set of input shapes and cached, so runs with shapes
/// seen before record nothing and allocate nothing on the GPU. A model whose shapes follow
/// from the values of some inputs (a Reshape whose shape is an input) is planned per value of
/// those inputs, which then act as constants in that plan.
pub struct Session {
    graph: Arc<Graph>,
    devices: Vec<Device>,
    limit: Option<u64>,
    /// Graph inputs (indices) whose values shape the plan, learned as rules ask for them.
    value_inputs: Mutex<BTreeSet<usize>>,
    plans: Mutex<PlanCache<Arc<Executable>>>,
    profile: bool,
    /// Every plan made while profiling, so their times outlive the plan cache.
    profiled: Mutex<Vec<Arc<Executable>>>,
    tuning: Tuning,
    /// The most bytes one value may take (`Tuning::max_value_bytes`, or the largest device's
    /// budget).
    max_value_bytes: u64,
    /// The model's files that stay mapped (larger than `onnx::COPY_BELOW`), checked before
    /// every run: a file changed underneath its mapping is refused rather than read.
    files: crate::onnx::ModelFiles,
    /// Indexing ops reading graph inputs, whose indices are checked on the host before each
    /// run (a GPU kernel would clamp them).
    value_checks: values::ValueChecks,
    /// The GPU copies of the weights its plans share (one plan per set of input shapes).
    weights: SharedWeights,
    /// State buffers and contexts of ended sequences, for the next ones (session/bound.rs).
    idle_homes: Arc<bound::IdleHomes>,
    /// For a model with sequences or optionals, what runs it: a lowered tensor graph per
    /// input structure (lower/); `graph` is then empty.
    structured: Option<Box<Structured>>,
}

impl Session {
    pub fn load(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        Session::load_copying_below(path.as_ref(), options, crate::onnx::COPY_BELOW)
    }

    /// [`Session::load`], copying the model's files up to `copy_below` bytes into memory and
    /// mapping larger ones (see `onnx::load`).
    pub(crate) fn load_copying_below(
        path: &Path,
        options: SessionOptions,
        copy_below: u64,
    ) -> Result<Session> {
        let (model, files) = crate::onnx::load_files(path, copy_below)?;
        Session::from_model(&model, files, options)
    }

    /// A model whose bytes are given (one rewritten in memory, as the generation loop does
    /// with growing caches: generate/window.rs); `path` is where it came from, whose folder
    /// holds its external data.
    pub fn load_bytes(path: &Path, data: bytes::Bytes, options: SessionOptions) -> Result<Session> {
        let (model, files) = crate::onnx::load_files_from(path, data, crate::onnx::COPY_BELOW)?;
        Session::from_model(&model, files, options)
    }

    /// A session for a model already decoded, with no files of its own (control flow's
    /// bodies).
    pub(crate) fn from_model_def(
        model: &crate::model::ModelDef,
        options: SessionOptions,
    ) -> Result<Session> {
        Session::from_model(model, crate::onnx::ModelFiles::default(), options)
    }

    /// The output types for inputs of `types` with the values in `known`, as planning finds
    /// them (a body's rule, control/body.rs).
    pub(crate) fn output_types(
        &self,
        types: &[ValueType],
        known: &[Option<&Tensor>],
    ) -> std::result::Result<Vec<ValueType>, SpecializeError> {
        if let Some(s) = &self.structured {
            return s.output_types(types, known);
        }
        let spec = self.specialize(types, known)?;
        self.graph
            .outputs
            .iter()
            .map(|(v, d)| {
                spec.types[*v].clone().ok_or_else(|| {
                    SpecializeError::Failed(Error::Unsupported(format!(
                        "output '{}' has no type",
                        d.name
                    )))
                })
            })
            .collect()
    }

    fn from_model(
        model: &crate::model::ModelDef,
        files: crate::onnx::ModelFiles,
        options: SessionOptions,
    ) -> Result<Session> {
        let structured = crate::lower::uses_structure(&model.graph)
            .then(|| Box::new(Structured::new(model, options.clone())));
        let graph = match structured {
            // The lowered graphs are built and checked per input structure.
            Some(_) => Arc::new(Graph::from_model(&crate::model::ModelDef {
                graph: crate::model::GraphDef::default(),
                ..model.clone()
            })?),
            None => Arc::new(Graph::from_model(model)?),
        };
        let devices = select_devices(options.devices, &options.tuning.vulkan)?;
        let max_value_bytes = options.tuning.max_value_bytes.unwrap_or_else(|| {
            // Uncapped: `device_memory_limit` splits a model over devices, which the planner
            // does; the limit here is about what can exist at all.
            let snapshot = crate::exec::inventory(&devices, None);
            snapshot
                .devices()
                .map(|(_, d)| d.memory_budget)
                .max()
                .unwrap_or(0)
        });
        let value_checks = values::ValueChecks::new(&graph);
        let session = Session {
            graph,
            devices,
            limit: options.device_memory_limit,
            value_inputs: Mutex::new(BTreeSet::new()),
            plans: Mutex::new(PlanCache::new(MAX_PLANS)),
            profile: options.profile,
            profiled: Mutex::new(Vec::new()),
            tuning: options.tuning,
            max_value_bytes,
            files,
            value_checks,
            weights: SharedWeights::default(),
            idle_homes: Arc::default(),
            structured,
        };
        if session.structured.is_none() {
            session.check_at_load()?;
        }
        Ok(session)
    }

    /// Plans now when the input shapes are static, so a model that cannot run fails at load.
    /// With symbolic sizes, a trial at size 1 still finds ops refusing an element type, which
    /// does not depend on sizes.
    fn check_at_load(&self) -> Result<()> {
        let mut is_static = true;
        let mut types = Vec::with_capacity(self.graph.inputs.len());
        for (_, d) in &self.graph.inputs {
            let (Some(dtype), Some(dims)) = (d.dtype, d.dims.as_ref()) else {
                return Ok(());
            };
            let shape = dims
                .iter()
                .map(|x| match x {
                    Dim::Fixed(n) => *n,
                    Dim::Sym(_) => {
                        is_static = false;
                        1
                    }
                })
                .collect();
            types.push(ValueType::new(dtype, shape));
        }
        match self.specialize(&types, &[]) {
            Ok(spec) if is_static => {
                let exe = self.new_executable(spec, &[])?;
                let key = PlanKey {
                    types,
                    values: Vec::new(),
                    bound: Vec::new(),
                };
                self.plans.lock().expect("plans").insert(key, exe);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(SpecializeError::NeedsValues(inputs)) => {
                self.value_inputs
                    .lock()
                    .expect("value inputs")
                    .extend(inputs);
                Ok(())
            }
            Err(
                e @ SpecializeError::Op {
                    error: OpError::Unsupported(_),
                    ..
                },
            ) => Err(e.into()),
            Err(e) if is_static => Err(e.into()),
            // Size 1 was only a guess; the real sizes come with the first run.
            Err(_) => Ok(()),
        }
    }

    /// A plan for `spec`; `bound` (graph input index, graph output index) are pairs fed back
    /// across runs (see [`Session::bind`]).
    fn new_executable(
        &self,
        spec: Specialized,
        bound: &[(usize, usize)],
    ) -> Result<Arc<Executable>> {
        let pairs: Vec<_> = bound
            .iter()
            .map(|&(i, o)| (self.graph.inputs[i].0, self.graph.outputs[o].0))
            .collect();
        // The plans the cache let go may have held the last use of some weights.
        self.weights.sweep(None);
        let exe = Executable::new_sharing(
            self.graph.clone(),
            spec,
            self.devices.clone(),
            self.limit,
            &self.tuning,
            &pairs,
            Some((&self.weights, &(String::new(), 0))),
        )?;
        let exe = Arc::new(exe);
        if self.profile {
            exe.enable_profiling();
            self.profiled.lock().expect("profiled").push(exe.clone());
        }
        Ok(exe)
    }

    /// The session on `devices` instead of those its options chose, its plans dropped (tests:
    /// one GPU passed twice stands for two).
    #[cfg(test)]
    pub(crate) fn on_devices(mut self, devices: Vec<Device>) -> Session {
        self.devices = devices;
        self.plans = Mutex::new(PlanCache::new(MAX_PLANS));
        self
    }

    /// Buffers of weights its plans share on its GPUs (tests).
    #[cfg(test)]
    pub(crate) fn shared_weight_buffers(&self) -> usize {
        self.weights.buffers()
    }

    /// With [`SessionOptions::profile`], the median and 90th-percentile time of every op run
    /// so far, in plan order (nodes of plans for other input shapes after those of the
    /// first); empty otherwise. GPU ops are timed by timestamps in their command buffers
    /// (exec/profile.rs); a GPU whose queue writes none leaves its ops out.
    pub fn profile(&self) -> Vec<NodeTime> {
        if let Some(s) = &self.structured {
            return s.profile();
        }
        let profiled = self.profiled.lock().expect("profiled");
        profiled.iter().flat_map(|e| e.profile()).collect()
    }

    /// With [`SessionOptions::profile`], per plan made so far (one per input shape, in the
    /// order they were made), each GPU kernel's median time in a run, largest first.
    pub fn kernel_profile(&self) -> Vec<Vec<KernelTime>> {
        if let Some(s) = &self.structured {
            return s.kernel_profile();
        }
        let profiled = self.profiled.lock().expect("profiled");
        profiled.iter().map(|e| e.kernel_profile()).collect()
    }

    fn specialize(
        &self,
        types: &[ValueType],
        known: &[Option<&Tensor>],
    ) -> Result<Specialized, SpecializeError> {
        let fuse = self.fuse();
        self.graph
            .specialize_with(types, known, fuse, self.max_value_bytes)
    }

    /// Which fusions plans make: elementwise chains and the rest only where a GPU may run them
    /// (the CPU backend runs a chain's steps one by one anyway, and measured slower fused), the
    /// CPU backend's own (a Conv with its activation) where none may, and as tuned.
    fn fuse(&self) -> Fusion {
        let gpu = self.devices.iter().any(|d| matches!(d, Device::Gpu(_)));
        self.tuning.fusion.for_plan(gpu)
    }

    /// Inputs the caller must feed, as declared by the model.
    pub fn inputs(&self) -> Vec<ValueDef> {
        if let Some(s) = &self.structured {
            return s.inputs().to_vec();
        }
        self.graph.inputs.iter().map(|(_, d)| d.clone()).collect()
    }

    pub fn outputs(&self) -> Vec<ValueDef> {
        if let Some(s) = &self.structured {
            return s.outputs().to_vec();
        }
        self.graph.outputs.iter().map(|(_, d)| d.clone()).collect()
    }

    /// The plan for these inputs (in graph order): cached, or made now.
    fn executable(&self, inputs: &[&Tensor]) -> Result<Arc<Executable>> {
        let types: Vec<ValueType> = inputs.iter().map(|t| ValueType::of(t)).collect();
        let values: Vec<Option<&Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
        self.executable_for(types, &values, &[])
    }

    /// The plan for inputs of `types` (graph order) whose values, where known, are `values`;
    /// `bound` as in [`Session::new_executable`].
    fn executable_for(
        &self,
        types: Vec<ValueType>,
        values: &[Option<&Tensor>],
        bound: &[(usize, usize)],
    ) -> Result<Arc<Executable>> {
        // Each round either plans or learns new inputs to specialize on; there are finitely many.
        loop {
            let wanted = self.value_inputs.lock().expect("value inputs").clone();
            let mut key_values = Vec::with_capacity(wanted.len());
            for &i in &wanted {
                let t = values[i].ok_or_else(|| {
                    Error::Unsupported(format!(
                        "the value of input '{}' decides shapes, so it cannot be bound",
                        self.graph.inputs[i].1.name
                    ))
                })?;
                key_values.push((i, t.bytes().clone()));
            }
            let key = PlanKey {
                types: types.clone(),
                values: key_values,
                bound: bound.to_vec(),
            };
            if let Some(e) = self.plans.lock().expect("plans").get(&key) {
                return Ok(e);
            }
            // The plan and its key outlive this call: they keep copies of the values they
            // were made for, never the caller's bytes (Tensor::unshared).
            let known: Vec<Option<Tensor>> = (0..values.len())
                .map(|i| {
                    values[i]
                        .filter(|_| wanted.contains(&i))
                        .map(Tensor::unshared)
                })
                .collect();
            let known_refs: Vec<Option<&Tensor>> = known.iter().map(Option::as_ref).collect();
            match self.specialize(&types, &known_refs) {
                Ok(spec) => {
                    let exe = self.new_executable(spec, bound)?;
                    let key = PlanKey {
                        values: key
                            .values
                            .into_iter()
                            .map(|(i, b)| (i, bytes::Bytes::copy_from_slice(&b)))
                            .collect(),
                        ..key
                    };
                    self.plans.lock().expect("plans").insert(key, exe.clone());
                    return Ok(exe);
                }
                Err(SpecializeError::NeedsValues(more)) => {
                    let mut set = self.value_inputs.lock().expect("value inputs");
                    let before = set.len();
                    set.extend(more);
                    if set.len() == before {
                        // Cannot happen: the graph asks only for inputs it was not given.
                        return Err(Error::Unsupported(
                            "planning asked again for input values it already had".into(),
                        ));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Puts named inputs in the graph's order, with clear errors for missing and extra ones.
    fn order<'a>(&self, inputs: &'a [(&str, Tensor)]) -> Result<Vec<&'a Tensor>> {
        let mut by_name: BTreeMap<&str, &Tensor> = BTreeMap::new();
        for (name, t) in inputs {
            if by_name.insert(name, t).is_some() {
                return Err(Error::Input(format!("'{name}' is given twice")));
            }
        }
        let declared: Vec<&str> = self
            .graph
            .inputs
            .iter()
            .map(|(_, d)| d.name.as_str())
            .collect();
        for name in by_name.keys() {
            if !declared.contains(name) {
                return Err(Error::Input(format!(
                    "the model has no input named '{name}' (its inputs: {})",
                    declared.join(", ")
                )));
            }
        }
        declared
            .iter()
            .map(|n| {
                by_name
                    .get(n)
                    .copied()
                    .ok_or_else(|| Error::Input(format!("missing input '{n}'")))
            })
            .collect()
    }

    /// Runs once. Outputs come back in the graph's output order.
    pub fn run(&self, inputs: &[(&str, Tensor)]) -> Result<Vec<(String, Tensor)>> {
        if self.structured.is_some() {
            let values: Vec<(&str, Value)> = inputs
                .iter()
                .map(|(n, t)| (*n, Value::Tensor(t.clone())))
                .collect();
            return self
                .run_values(&values)?
                .into_iter()
                .map(|(name, v)| match v {
                    Value::Tensor(t) => Ok((name, t)),
                    v => Err(Error::Unsupported(format!(
                        "output '{name}' is a {}; Session::run_values gives those",
                        v.kind()
                    ))),
                })
                .collect();
        }
        self.files.check()?;
        let ordered = self.order(inputs)?;
        let exe = self.executable(&ordered)?;
        let known: Vec<Option<&Tensor>> = ordered.iter().map(|&t| Some(t)).collect();
        self.value_checks.check(&self.graph, exe.spec(), &known)?;
        let outs = exe.run(ordered.into_iter().cloned().collect())?;
        Ok(self
            .graph
            .outputs
            .iter()
            .map(|(_, d)| d.name.clone())
            .zip(outs)
            .collect())
    }

    /// Runs once with values that may be sequences or optionals of tensors (ONNX's
    /// `seq(...)` and `optional(...)` inputs and outputs). Outputs come back in the graph's
    /// output order.
    pub fn run_values(&self, inputs: &[(&str, Value)]) -> Result<Vec<(String, Value)>> {
        self.files.check()?;
        match &self.structured {
            Some(s) => s.run(inputs),
            None => {
                let tensors = tensors_of(inputs)?;
                let outs = self.run(&tensors)?;
                Ok(outs
                    .into_iter()
                    .map(|(n, t)| (n, Value::Tensor(t)))
                    .collect())
            }
        }
    }

    /// [`Session::plan_summary`] for values that may be sequences or optionals.
    pub fn plan_summary_values(&self, inputs: &[(&str, Value)]) -> Result<PlanSummary> {
        match &self.structured {
            Some(s) => s.plan_summary(inputs),
            None => self.plan_summary(&tensors_of(inputs)?),
        }
    }

    /// The placement used for inputs of these shapes (planning them if needed).
    pub fn plan_summary(&self, inputs: &[(&str, Tensor)]) -> Result<PlanSummary> {
        if self.structured.is_some() {
            let values: Vec<(&str, Value)> = inputs
                .iter()
                .map(|(n, t)| (*n, Value::Tensor(t.clone())))
                .collect();
            return self.plan_summary_values(&values);
        }
        self.files.check()?;
        let ordered = self.order(inputs)?;
        let exe = self.executable(&ordered)?;
        Ok(exe.summary().clone())
    }
}

/// Tensor feeds of values: a model without sequences or optionals takes only tensors.
fn tensors_of<'a>(inputs: &'a [(&'a str, Value)]) -> Result<Vec<(&'a str, Tensor)>> {
    inputs
        .iter()
        .map(|(n, v)| match v {
            Value::Tensor(t) => Ok((*n, t.clone())),
            v => Err(Error::Input(format!(
                "'{n}' is a {}; the model takes a tensor there",
                v.kind()
            ))),
        })
        .collect()
}

pub(crate) fn select_devices(sel: DeviceSelection, vk: &VulkanOptions) -> Result<Vec<Device>> {
    let gpus = || -> Result<Vec<Device>> {
        let v = vulkan(vk)?;
        if v.gpus().is_empty() {
            return Err(Error::Device("no Vulkan GPU found".into()));
        }
        Ok(v.gpus().iter().cloned().map(Device::Gpu).collect())
    };
    Ok(match sel {
        DeviceSelection::Cpu => vec![Device::Cpu],
        DeviceSelection::Vulkan => {
            let mut d = gpus()?;
            d.push(Device::CpuFallback);
            d
        }
        DeviceSelection::VulkanIndex(i) => {
            let all = gpus()?;
            let n = all.len();
            let gpu = all.into_iter().nth(i).ok_or_else(|| {
                Error::Device(format!(
                    "there is no vulkan:{i}; this machine has {n} Vulkan device(s)"
                ))
            })?;
            vec![gpu, Device::CpuFallback]
        }
        DeviceSelection::Auto => {
            let mut d = match gpus() {
                Ok(g) => g,
                Err(e) => {
                    tracing::info!("running on the CPU only: {e}");
                    Vec::new()
                }
            };
            d.push(Device::Cpu);
            d
        }
    })
}
