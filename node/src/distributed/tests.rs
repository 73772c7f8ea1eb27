use std::path::Path;

use vkml_planner::{LinkCosts, Snapshot};
use vkml_protocol::dist::Config;
use vkml_protocol::dist::submitter::{Action, Prepared, Submitter};

use super::{deploy, fragment};
use crate::cluster::inventory::{to_planner, to_wire};
use crate::exec::{Device, cost_graph, inventory};
use crate::graph::Graph;
use crate::ops::ValueType;
use crate::tensor::{DType, Tensor};

fn mnist() -> (Graph, crate::graph::Specialized) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mnist_cnn/model.onnx");
    let graph = Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap();
    let spec = graph
        .specialize(&[ValueType::new(DType::F32, vec![1, 1, 28, 28])], &[])
        .unwrap();
    (graph, spec)
}

/// Two CPU nodes, a and b, neither of which can hold the whole model (about 200 KB charged)
/// while both together can.
fn two_nodes() -> Snapshot {
    let mut snapshot = Snapshot::default();
    for (name, cap) in [("a", 60_000u64), ("b", 150_000)] {
        let devs = inventory(&[Device::Cpu], Some(cap))
            .nodes
            .into_values()
            .next()
            .unwrap();
        snapshot.nodes.insert(name.into(), devs);
    }
    snapshot
}

/// What a node advertises (through the wire record) plans exactly as the single-node runtime
/// plans over the same devices: a one-node cluster is the degenerate case, not another path.
#[test]
fn a_one_node_cluster_plans_as_the_single_node_runtime() {
    let (graph, spec) = mnist();
    let (cost, _) = cost_graph(&graph, &spec, &Default::default());
    for limit in [None, Some(60_000)] {
        let local = inventory(&[Device::Cpu], limit);
        let wire: Vec<_> = local
            .nodes
            .values()
            .flatten()
            .map(|d| to_planner(&to_wire(d, "cpu".into())))
            .collect();
        let cluster = Snapshot::single("n1", wire);
        let a = vkml_planner::plan(&cost, &local, &LinkCosts::default());
        let b = vkml_planner::plan(&cost, &cluster, &LinkCosts::default());
        match (a, b) {
            (Ok(a), Ok(b)) => {
                let idx = |p: &vkml_planner::Plan| {
                    p.placement.iter().map(|d| d.index).collect::<Vec<_>>()
                };
                assert_eq!(idx(&a), idx(&b));
                assert_eq!(a.op_chunk, b.op_chunk);
                assert_eq!(a.transfers, b.transfers);
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("{a:?} / {b:?}"),
        }
    }
}

/// A fragment rebuilt on a participant has the submitter's ops, types and (only) the
/// weights its own ops read; its cost graph survives the wire.
#[test]
fn fragments_rebuild_the_graph_with_only_their_weights() {
    let (graph, spec) = mnist();
    let (cost, _) = cost_graph(&graph, &spec, &Default::default());
    let snapshot = two_nodes();
    let plan = vkml_planner::plan(&cost, &snapshot, &LinkCosts::default()).unwrap();
    assert!(
        plan.transfers.iter().any(|t| t.cross_host),
        "the caps split the model: {:?} {:?} total {}",
        plan.memory,
        plan.placement,
        vkml_planner::single_device_bytes(&cost, false)
    );
    let skeleton = fragment::Skeleton::new(&graph, &spec, &cost, &snapshot).unwrap();
    let back = fragment::cost_from_wire(&fragment::cost_to_wire(&cost)).unwrap();
    assert_eq!(back, cost);
    assert_eq!(
        fragment::snapshot_from_wire(&fragment::snapshot_to_wire(&snapshot)),
        snapshot
    );
    let mut weights_seen = 0;
    for node in ["a", "b"] {
        let (f, weights) =
            skeleton.fragment(&graph, &spec, &plan, node, 7, "a", &Default::default());
        assert_eq!(f.nodes.len(), spec.live.len());
        // Only consts read by this node's ops.
        for (v, _) in &weights {
            let read_here = spec.live.iter().enumerate().any(|(p, &n)| {
                plan.placement[p].node == node && spec.node(&graph, n).inputs.contains(&Some(*v))
            });
            assert!(
                read_here,
                "{node} got weight {} it does not read",
                graph.value_names[*v]
            );
        }
        weights_seen += weights.len();
        let (g2, s2) = fragment::rebuild(&f, weights.into_iter().collect()).unwrap();
        assert_eq!(g2.value_names, graph.value_names);
        assert_eq!(s2.types, spec.types);
        for (p, &n) in spec.live.iter().enumerate() {
            assert_eq!(g2.nodes[p].op_type, spec.node(&graph, n).op_type);
            assert_eq!(g2.nodes[p].inputs, spec.node(&graph, n).inputs);
        }
        let (c2, _) = cost_graph(&g2, &s2, &Default::default());
        for (p, d) in plan.placement.iter().enumerate() {
            if d.node == node {
                assert_eq!(c2.ops[p].flops, cost.ops[p].flops);
                assert_eq!(c2.ops[p].gpu, cost.ops[p].gpu);
            }
        }
    }
    let all_consts = spec
        .live
        .iter()
        .flat_map(|&n| spec.node(&graph, n).inputs.iter().flatten())
        .filter(|&&v| spec.consts[v].is_some())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(
        weights_seen, all_consts,
        "every weight goes to exactly one node here"
    );
}

#[test]
fn a_malformed_fragment_is_an_error_not_a_panic() {
    let (graph, spec) = mnist();
    let (cost, _) = cost_graph(&graph, &spec, &Default::default());
    let snapshot = inventory(&[Device::Cpu], None);
    let plan = vkml_planner::plan(&cost, &snapshot, &LinkCosts::default()).unwrap();
    let skeleton = fragment::Skeleton::new(&graph, &spec, &cost, &snapshot).unwrap();
    let (f, _) = skeleton.fragment(
        &graph,
        &spec,
        &plan,
        "local",
        1,
        "local",
        &Default::default(),
    );
    let mut bad = f.clone();
    bad.nodes[0].inputs[0] = 1 << 40;
    assert!(fragment::rebuild(&bad, Default::default()).is_err());
    let mut bad = f.clone();
    bad.types.pop();
    assert!(fragment::rebuild(&bad, Default::default()).is_err());
    let mut bad = f;
    bad.nodes[0].onnx_node = bytes::Bytes::from_static(&[0xff, 0xff]);
    assert!(fragment::rebuild(&bad, Default::default()).is_err());
}

/// What the submitter's planning hands its machine is a plan the machine can deploy and run:
/// every node of the split plan gets its fragment, a run sends each node exactly the graph
/// inputs its ops read, and the output that comes back ends the run.
#[test]
fn a_split_plan_deploys_and_runs_through_the_submitter_machine() {
    let (graph, spec) = mnist();
    let with = deploy::Cut {
        load_id: 7,
        owner: 1,
        me: "a",
        tuning: &Default::default(),
        external: &Default::default(),
    };
    let (made, _) = deploy::cut(&graph, spec, &two_nodes(), None, &with).unwrap();
    let nodes: Vec<String> = made.plan.nodes.iter().cloned().collect();
    assert_eq!(nodes, ["a", "b"], "the caps split the model");
    assert!(made.parts.keys().eq(made.plan.nodes.iter()));
    assert!(made.plan.fixed_outputs.is_empty());
    let readers: Vec<&String> = made.plan.needs.keys().collect();
    assert!(!readers.is_empty() && made.plan.needs.values().all(|l| l == &[0]));

    let now = std::time::Instant::now();
    let mut s: Submitter<u32, Tensor> = Submitter::new("a".into(), Config::default());
    let drain = |s: &mut Submitter<u32, Tensor>| std::iter::from_fn(|| s.poll_action()).collect();
    s.add_model(1);
    let Ok(Prepared::Pending(plan)) = s.prepare(1, 0, now) else {
        panic!("a fresh model has no plan")
    };
    let _: Vec<_> = drain(&mut s);
    assert!(s.planned(plan, made.plan.clone(), now));
    let sends: Vec<_> = drain(&mut s);
    let want: Vec<_> = nodes
        .iter()
        .map(|n| Action::SendFragment {
            load_id: 7,
            node: n.clone(),
        })
        .collect();
    assert_eq!(sends, want);
    for n in &nodes {
        s.load_result(7, n, Ok(()), now);
    }
    let live: Vec<_> = drain(&mut s);
    assert!(matches!(live[..], [Action::Deployed { load_id: 7, .. }]));

    let image = Tensor::zeros(DType::F32, vec![1, 1, 28, 28]);
    let run = s.run(1, vec![image.clone()]).unwrap();
    let _: Vec<_> = drain(&mut s);
    s.resolve(run, 0, now);
    let mut wire_run = None;
    for a in drain(&mut s) {
        let Action::StartRun {
            node,
            load_id,
            run_id,
            inputs,
            ..
        } = a
        else {
            panic!("{a:?}")
        };
        assert_eq!(load_id, 7);
        wire_run = Some(run_id);
        let reads = made.plan.needs.contains_key(&node);
        assert_eq!(inputs.len(), usize::from(reads), "{node}");
        assert!(inputs.iter().all(|(i, t)| *i == 0 && *t == image));
    }
    let out = Tensor::zeros(DType::F32, vec![1, 10]);
    s.output(7, wire_run.unwrap(), 0, out.clone());
    match &drain(&mut s)[..] {
        [Action::RunDone { result: Ok(o), .. }] => assert_eq!(o.outputs, [out]),
        other => panic!("{other:?}"),
    }
}

/// Planning over a cluster folded a constant of any size the hub's memory allowed, though no
/// device could hold it: a 16 GB Range in a bad model took the hub 16 GB and 10 s, on nodes of
/// 70 KB (the soak's bad-model client found it). A value larger than the largest device is
/// now refused before it is made.
#[test]
fn planning_refuses_a_value_larger_than_every_device_before_folding_it() {
    use crate::onnx::proto::GraphProto;
    use crate::onnx::tests::{TempDir, model_with, node, raw_tensor, tensor_value, write_model};
    let dir = TempDir::new("dist-fold-limit");
    // 2^20 floats (4 MiB) from an initializer shape: folded while planning.
    let shape: Vec<u8> = (1i64 << 20).to_le_bytes().to_vec();
    let g = GraphProto {
        name: "g".into(),
        node: vec![node("ConstantOfShape", "fill", &["shape"], &["y"])],
        initializer: vec![raw_tensor("shape", 7, &[1], &shape)],
        output: vec![tensor_value("y", 1, None)],
        ..Default::default()
    };
    let path = write_model(&dir, "m.onnx", &model_with(g));
    let e = match super::offline::plan_model(&path, &two_nodes(), None, &Default::default()) {
        Ok(_) => panic!("a 4 MiB value planned on nodes of 150 KB"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("'fill'") && e.contains("4194304 bytes") && e.contains("150000 bytes"),
        "{e}"
    );
}
