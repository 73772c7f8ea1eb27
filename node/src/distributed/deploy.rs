//! The submitter's planning, which the machine asks for (`Action::Plan`) and cannot do itself:
//! specialise the graph for a deployment key, plan it over the cluster's snapshot without the
//! nodes to avoid, and cut it into each node's fragment and weights.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use vkml_planner::{DeviceKind, DeviceRef, Plan, Snapshot};
use vkml_protocol::dist::deployment::{DeploymentPlan, FixedOutput};
use vkml_protocol::dist::run::PlanError;
use vkml_protocol::pb;

use super::DistError;
use super::fragment::Skeleton;
use super::placement::describe;
use crate::cluster::Cluster;
use crate::graph::{Graph, SpecializeError, Specialized, ValueId};
use crate::ops::ValueType;
use crate::tensor::Tensor;
use crate::tuning::Tuning;

/// What a deployment is made for: the input types, the values of the inputs its plan
/// depends on (a shape fed as an input), by input index, and for the steps of a sequence its
/// bindings (graph output, graph input), which the nodes may keep on their GPUs.
#[derive(Clone, PartialEq)]
pub struct DeployKey {
    pub types: Vec<ValueType>,
    pub values: Vec<(usize, Tensor)>,
    pub bound: Vec<(usize, usize)>,
}

impl DeployKey {
    /// The key of a run's inputs, given the inputs whose values plans of its model need.
    pub fn of(inputs: &[Tensor], value_inputs: &BTreeSet<usize>) -> DeployKey {
        DeployKey {
            types: inputs.iter().map(ValueType::of).collect(),
            values: value_inputs
                .iter()
                .filter_map(|&i| inputs.get(i).map(|t| (i, t.clone())))
                .collect(),
            bound: Vec::new(),
        }
    }
}

/// One node's fragment and the weights that go with it.
pub type Part = (pb::Fragment, Vec<(ValueId, Tensor)>);

/// The weights of a model that travel by reference (its deferred initializers), by value:
/// how they are named on the wire.
pub type External = BTreeMap<ValueId, pb::WeightRange>;

/// A deployment planned: what the machine decides with, and what the driver sends.
pub struct Made {
    pub plan: DeploymentPlan<Tensor>,
    pub parts: BTreeMap<String, Part>,
    pub placement: pb::Placement,
    /// Planned over whole budgets: the memory loaded models leave could not hold it.
    pub over_gross: bool,
    /// Planned in the memory loaded models leave, but a plan over whole budgets would run
    /// far faster (the model's other plans, for other input shapes, push this one onto slower
    /// devices or into many more cuts): the submitter lets the model's idle plans go and
    /// plans again.
    pub cramped: bool,
    /// Per graph output: the node whose op makes it (none for one known without running)
    /// and its type. A sequence's bound outputs stay there (distributed/sequences.rs).
    pub outputs: Vec<(Option<String>, Option<ValueType>)>,
    /// The model's weights the plan puts on each GPU, which its later plans may share.
    pub resident: Resident,
}

/// Why no deployment was made.
pub enum Unplanned {
    /// Specialising needs the values of these inputs.
    NeedsValues(Vec<usize>),
    Failed(PlanError),
}

fn failed(e: DistError) -> Unplanned {
    Unplanned::Failed(match e {
        DistError::Placement(s) => PlanError::Placement(s),
        other => PlanError::Other(other.to_string()),
    })
}

/// Per GPU, the model's initializers a plan (or several) holds there.
pub type Resident = BTreeMap<DeviceRef, BTreeSet<ValueId>>;

/// The model a deployment is planned for.
pub struct Ask<'a> {
    /// For logs (its file name).
    pub name: &'a str,
    pub graph: &'a Arc<Graph>,
    pub external: &'a External,
    /// The submitter's id of the model: its plans share their weights on each node.
    pub owner: u64,
    /// The weights its other plans hold, which a new plan shares where it places the ops
    /// that read them.
    pub resident: Resident,
}

/// Plans `ask`'s graph for `key` over the cluster as it is now, without the nodes in `avoid`.
pub async fn make(
    cluster: &Cluster,
    me: &str,
    ask: &Ask<'_>,
    key: &DeployKey,
    avoid: &BTreeSet<String>,
) -> Result<Made, Unplanned> {
    let (name, graph, external) = (ask.name, ask.graph, ask.external);
    let mut snapshot = cluster.snapshot();
    let mut gross = cluster.snapshot_gross();
    // Only where the nodes are: a node gone since took its copies with it.
    let resident: Resident = ask
        .resident
        .iter()
        .filter(|(d, _)| !avoid.contains(&d.node))
        .map(|(d, v)| (d.clone(), v.clone()))
        .collect();
    tracing::debug!(
        "model {}: {} weight(s) resident on {} GPU(s) from its other plans",
        ask.name,
        resident.values().map(BTreeSet::len).sum::<usize>(),
        resident.len()
    );
    snapshot.resident = resident.clone();
    gross.resident = resident;
    // The runs' inputs come from here and their outputs return here.
    snapshot.origin = Some(me.to_string());
    gross.origin = Some(me.to_string());
    let tuning = cluster.tuning();
    // Fused where a GPU may run the plan, as a session does.
    let gpu = snapshot
        .devices()
        .any(|(_, d)| d.kind == vkml_planner::DeviceKind::Gpu);
    let fuse = tuning.fusion.for_plan(gpu);
    for node in avoid {
        snapshot.nodes.remove(node);
        gross.nodes.remove(node);
    }
    let load_id: u64 = rand::random();
    let owner = ask.owner;
    let me_name = me;
    let bound = super::wire::bindings(&key.bound);
    let (graph, key, me) = (graph.clone(), key.clone(), me.to_string());
    let external = external.clone();
    // The life of each node now: a verdict on an older life must not end this plan, and a
    // newer life means its part is gone.
    let lives: BTreeMap<String, u64> = cluster
        .members()
        .into_iter()
        .map(|m| (m.name, m.generation))
        .collect();
    let limit = super::placement::value_limit(&gross, &tuning);
    let (mut made, hash) = crate::priority::heavy(move || {
        let known: Vec<Option<&Tensor>> = (0..key.types.len())
            .map(|i| key.values.iter().find(|(j, _)| *j == i).map(|(_, t)| t))
            .collect();
        let spec = match graph.specialize_with(&key.types, &known, fuse, limit) {
            Ok(spec) => spec,
            Err(SpecializeError::NeedsValues(more)) => return Err(Unplanned::NeedsValues(more)),
            Err(e) => return Err(failed(DistError::Runtime(e.into()))),
        };
        // Planned into the memory left by loaded models; when that cannot fit, the
        // reservations gossiped may be stale (a model unloaded a moment ago): plan over whole
        // budgets, and let the participants, which know what they hold, refuse if it is so.
        let fallback = (snapshot != gross).then_some(&gross);
        let cut_with = Cut {
            load_id,
            owner,
            me: &me,
            tuning: &tuning,
            external: &external,
        };
        cut(&graph, spec, &snapshot, fallback, &cut_with).map_err(failed)
    })
    .await
    .map_err(|e| failed(super::panicked(e)))??;
    let mut wanted: BTreeSet<&str> = made.plan.nodes.iter().map(String::as_str).collect();
    wanted.insert(me_name);
    made.plan.lives = lives
        .iter()
        .filter(|(n, _)| wanted.contains(n.as_str()))
        .map(|(n, &g)| (n.clone(), g))
        .collect();
    let wire: Vec<pb::NodeLife> = made
        .plan
        .lives
        .iter()
        .map(|(node, &generation)| pb::NodeLife {
            node: node.clone(),
            generation,
        })
        .collect();
    for (fragment, _) in made.parts.values_mut() {
        fragment.lives = wire.clone();
        fragment.bound = bound.clone();
    }
    tracing::info!(
        "model {name} planned as {load_id:016x} over {} node(s), plan {hash:016x}",
        made.plan.nodes.len(),
    );
    Ok(made)
}

/// What a plan's fragments are cut with besides the graph: the load's id, the submitter's
/// name and plan settings, and where the weights that travel by reference are.
pub(super) struct Cut<'a> {
    pub load_id: u64,
    /// The submitter's id of the model: its plans share weights on each node.
    pub owner: u64,
    pub me: &'a str,
    pub tuning: &'a Tuning,
    pub external: &'a External,
}

/// Plans a specialised graph with the plan settings of `with` and cuts it into fragments
/// (blocking), each marked with those settings; with the plan's hash.
pub(super) fn cut(
    graph: &Graph,
    spec: Specialized,
    snapshot: &Snapshot,
    fallback: Option<&Snapshot>,
    with: &Cut<'_>,
) -> Result<(Made, u64), DistError> {
    let Cut {
        load_id,
        owner,
        me,
        tuning,
        external,
    } = *with;
    let (cost, _) = crate::exec::cost_graph(graph, &spec, &tuning.kernels);
    let links = vkml_planner::LinkCosts::default();
    let (plan, snapshot, over_gross) = match (vkml_planner::plan(&cost, snapshot, &links), fallback)
    {
        (Ok(plan), _) => (plan, snapshot, false),
        (Err(e), Some(other)) => {
            tracing::debug!("no plan in the memory left ({e}); planning over whole budgets");
            let plan = vkml_planner::plan(&cost, other, &links)
                .map_err(|e| DistError::Placement(e.to_string()))?;
            (plan, other, true)
        }
        (Err(e), None) => return Err(DistError::Placement(e.to_string())),
    };
    let cramped =
        !over_gross && fallback.is_some_and(|gross| cramped(&cost, snapshot, gross, &plan));
    let skeleton = Skeleton::new(graph, &spec, &cost, snapshot)?;
    let (needs, fixed_outputs) = needs_and_fixed(graph, &spec, &plan)?;
    let nodes: BTreeSet<String> = plan.placement.iter().map(|d| d.node.clone()).collect();
    let parts = nodes
        .iter()
        .map(|n| {
            let (mut fragment, weights) =
                skeleton.fragment(graph, &spec, &plan, n, load_id, me, external);
            fragment.tuning_fingerprint = tuning.fingerprint();
            fragment.weights_owner = owner;
            fragment.plan_settings = tuning.plan_settings();
            (n.clone(), (fragment, weights))
        })
        .collect();
    let mut reserves: BTreeMap<String, u64> = BTreeMap::new();
    for (d, &bytes) in &plan.memory {
        *reserves.entry(d.node.clone()).or_insert(0) += bytes;
    }
    let mut made_on: BTreeMap<ValueId, &str> = BTreeMap::new();
    for (p, &n) in spec.live.iter().enumerate() {
        for &o in &spec.node(graph, n).outputs {
            made_on.insert(o, plan.placement[p].node.as_str());
        }
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|(v, _)| {
            let node = made_on.get(v).map(|n| n.to_string());
            (node, spec.types[*v].clone())
        })
        .collect();
    let resident = resident_of(graph, &spec, &plan, snapshot);
    let made = Made {
        plan: DeploymentPlan {
            load_id,
            nodes,
            needs,
            fixed_outputs,
            n_outputs: graph.outputs.len(),
            lives: BTreeMap::new(),
            reserves,
        },
        parts,
        placement: describe(graph, &cost, &plan, snapshot),
        over_gross,
        cramped,
        outputs,
        resident,
    };
    Ok((made, plan.hash))
}

/// The model's initializers `plan` puts on each GPU: what its next plans may share there.
fn resident_of(graph: &Graph, spec: &Specialized, plan: &Plan, snapshot: &Snapshot) -> Resident {
    let mut resident = Resident::new();
    for (p, &n) in spec.live.iter().enumerate() {
        let d = &plan.placement[p];
        if snapshot.device(d).is_none_or(|x| x.kind != DeviceKind::Gpu) {
            continue;
        }
        for &v in spec.node(graph, n).inputs.iter().flatten() {
            if graph.is_initializer(v) {
                resident.entry(d.clone()).or_default().insert(v);
            }
        }
    }
    resident
}

/// Whether a plan over whole budgets (`gross`) would run more than [`CRAMPED`] times faster
/// than `plan`, made in the memory loaded models leave (`net`).
fn cramped(cost: &vkml_planner::CostGraph, net: &Snapshot, gross: &Snapshot, plan: &Plan) -> bool {
    let links = vkml_planner::LinkCosts::default();
    let Ok(roomy) = vkml_planner::plan(cost, gross, &links) else {
        return false;
    };
    let (here, there) = (
        vkml_planner::run_ns(cost, net, &links, plan),
        vkml_planner::run_ns(cost, gross, &links, &roomy),
    );
    let cramped = there.saturating_mul(CRAMPED) < here;
    if cramped {
        tracing::debug!(
            "planned in the memory left: {} us a run, against {} us over whole budgets",
            here / 1000,
            there / 1000
        );
    }
    cramped
}

/// How many times slower than a plan with room a plan may be before the model's idle plans
/// make way for it (a language model's prompt plan pushing its single-token plan onto CPUs
/// and dozens of cuts: 100 ms a token where 3 would do).
const CRAMPED: u64 = 2;

/// The graph inputs each node reads, and the outputs known without running anything
/// (constants, inputs passed through).
#[allow(clippy::type_complexity)]
fn needs_and_fixed(
    graph: &Graph,
    spec: &Specialized,
    plan: &Plan,
) -> Result<
    (
        BTreeMap<String, Vec<usize>>,
        Vec<(usize, FixedOutput<Tensor>)>,
    ),
    DistError,
> {
    let mut needs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (p, &n) in spec.live.iter().enumerate() {
        let node = &plan.placement[p].node;
        for (i, (v, _)) in graph.inputs.iter().enumerate() {
            if spec.node(graph, n).inputs.contains(&Some(*v)) && spec.consts[*v].is_none() {
                let list = needs.entry(node.clone()).or_default();
                if !list.contains(&i) {
                    list.push(i);
                }
            }
        }
    }
    let produced: BTreeSet<ValueId> = spec
        .live
        .iter()
        .flat_map(|&n| spec.node(graph, n).outputs.iter().copied())
        .collect();
    let mut fixed = Vec::new();
    for (i, (v, d)) in graph.outputs.iter().enumerate() {
        if produced.contains(v) {
            continue;
        }
        if let Some(t) = &spec.consts[*v] {
            fixed.push((i, FixedOutput::Const(t.clone())));
        } else if let Some(j) = graph.inputs.iter().position(|(x, _)| x == v) {
            fixed.push((i, FixedOutput::Input(j)));
        } else {
            return Err(DistError::Unsupported(format!(
                "output '{}' is computed by nothing",
                d.name
            )));
        }
    }
    Ok((needs, fixed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkml_planner::{CostGraph, DeviceInventory, DeviceKind, OpCost, ValueCost, ValueKind};

    /// A chain of `n` GPU-capable ops, each with a weight of `weight` bytes.
    fn chain(n: usize, weight: u64) -> CostGraph {
        let mut g = CostGraph::default();
        g.values.push(ValueCost {
            bytes: 4096,
            kind: ValueKind::Input,
            output: false,
        });
        let mut last = 0;
        for i in 0..n {
            let w = g.values.len();
            g.values.push(ValueCost {
                bytes: weight,
                kind: ValueKind::Weight,
                output: false,
            });
            let out = g.values.len();
            g.values.push(ValueCost {
                bytes: 4096,
                kind: ValueKind::Computed,
                output: i + 1 == n,
            });
            g.ops.push(OpCost {
                name: format!("mm{i}"),
                inputs: vec![last, w],
                outputs: vec![out],
                flops: 50_000_000,
                gpu: true,
                gpu_needs: 0,
                view: false,
            });
            last = out;
        }
        g
    }

    fn node(gpu_budget: u64) -> Vec<DeviceInventory> {
        let dev = |name: &str, kind, budget, flops| DeviceInventory {
            name: name.into(),
            kind,
            memory_budget: budget,
            flops_per_us: flops,
            op_overhead_ns: 2_000,
            bytes_per_us: 0,
            features: 0,
        };
        vec![
            dev("cpu", DeviceKind::Cpu, 1 << 40, 10_000),
            dev("vulkan:0", DeviceKind::Gpu, gpu_budget, 10_000_000),
        ]
    }

    #[test]
    fn a_plan_pushed_off_the_gpus_by_the_model_s_own_plans_is_cramped() {
        let g = chain(8, 1 << 20);
        let gross = Snapshot::single("n1", node(64 << 20));
        let links = vkml_planner::LinkCosts::default();
        // The memory left holds a quarter of the weights: most ops go to the CPU.
        let net = Snapshot::single("n1", node(2 << 20));
        let squeezed = vkml_planner::plan(&g, &net, &links).unwrap();
        assert!(
            squeezed.placement.iter().any(|d| d.index == 0),
            "some ops on the CPU"
        );
        assert!(cramped(&g, &net, &gross, &squeezed));
        // With room for all of it, it is not.
        let roomy = Snapshot::single("n1", node(32 << 20));
        let fine = vkml_planner::plan(&g, &roomy, &links).unwrap();
        assert!(!cramped(&g, &roomy, &gross, &fine));
    }
}
