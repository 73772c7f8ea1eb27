use super::*;

/// A small deterministic generator, so the property tests need no dependency and replay.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn random_graph(rng: &mut Rng, n_ops: usize) -> CostGraph {
    let mut g = CostGraph::default();
    let input = g.values.len();
    g.values.push(ValueCost {
        bytes: 64 + rng.below(4096),
        kind: ValueKind::Input,
        output: false,
    });
    let mut computed = vec![input];
    for i in 0..n_ops {
        let mut inputs = vec![computed[rng.below(computed.len() as u64) as usize]];
        if rng.below(2) == 0 {
            inputs.push(computed[rng.below(computed.len() as u64) as usize]);
        }
        if rng.below(3) == 0 {
            let w = g.values.len();
            g.values.push(ValueCost {
                bytes: rng.below(100_000),
                kind: ValueKind::Weight,
                output: false,
            });
            inputs.push(w);
        }
        let out = g.values.len();
        g.values.push(ValueCost {
            bytes: 4 + rng.below(50_000),
            kind: ValueKind::Computed,
            output: i + 1 == n_ops,
        });
        computed.push(out);
        g.ops.push(OpCost {
            name: format!("op{i}"),
            inputs,
            outputs: vec![out],
            flops: rng.below(10_000_000),
            gpu: rng.below(8) != 0,
            gpu_needs: 0,
            view: rng.below(10) == 0,
        });
    }
    g
}

pub(crate) fn device(name: &str, kind: DeviceKind, budget: u64) -> DeviceInventory {
    DeviceInventory {
        name: name.into(),
        kind,
        memory_budget: budget,
        flops_per_us: if kind == DeviceKind::Gpu {
            1_000_000
        } else {
            5_000
        },
        op_overhead_ns: if kind == DeviceKind::Gpu { 2_000 } else { 500 },
        bytes_per_us: 0,
        features: 0,
    }
}

fn random_snapshot(rng: &mut Rng) -> Snapshot {
    let mut s = Snapshot {
        version: rng.below(100),
        ..Snapshot::default()
    };
    for n in 0..1 + rng.below(3) {
        let mut devs = vec![device(
            "cpu",
            DeviceKind::Cpu,
            200_000 + rng.below(2_000_000),
        )];
        for g in 0..rng.below(3) {
            devs.push(device(
                &format!("vulkan:{g}"),
                DeviceKind::Gpu,
                100_000 + rng.below(1_000_000),
            ));
        }
        s.nodes.insert(format!("node{n}"), devs);
    }
    s
}

/// Checks every structural promise of a plan against the graph it came from.
pub(crate) fn check_plan(g: &CostGraph, s: &Snapshot, p: &Plan) {
    assert_eq!(p.placement.len(), g.ops.len());
    // Every op in exactly one chunk, on its placed device, in topological order.
    let mut count = vec![0; g.ops.len()];
    for (c, chunk) in p.chunks.iter().enumerate() {
        for &o in &chunk.ops {
            count[o] += 1;
            assert_eq!(p.op_chunk[o], c);
            assert_eq!(p.placement[o], chunk.device);
        }
        assert!(chunk.ops.windows(2).all(|w| w[0] < w[1]));
        for &pr in &chunk.preds {
            assert!(pr < c, "chunks are in topological order");
            assert!(p.chunks[pr].succs.contains(&c));
        }
    }
    assert!(
        count.iter().all(|&c| c == 1),
        "every op placed exactly once"
    );
    // GPU-incapable ops on CPUs; budgets respected.
    for (o, op) in g.ops.iter().enumerate() {
        let d = s.device(&p.placement[o]).unwrap();
        assert!(op.gpu || d.kind == DeviceKind::Cpu);
    }
    for (d, used) in &p.memory {
        assert!(
            *used <= s.device(d).unwrap().memory_budget,
            "{d} over budget"
        );
    }
    // Transfers are exactly the edges that cross devices; chunk edges exactly the cross-chunk ones.
    let producers = g.producers();
    for (o, op) in g.ops.iter().enumerate() {
        for &v in &op.inputs {
            let Some(pr) = producers[v] else { continue };
            let crosses = p.placement[pr] != p.placement[o];
            let listed = p
                .transfers
                .iter()
                .any(|t| t.value == v && t.to_chunk == p.op_chunk[o]);
            assert_eq!(crosses, listed, "transfer for value {v} into op {o}");
            if p.op_chunk[pr] != p.op_chunk[o] {
                assert!(p.chunks[p.op_chunk[o]].preds.contains(&p.op_chunk[pr]));
            }
        }
    }
}

#[test]
fn random_plans_keep_every_promise() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut planned = 0;
    for _ in 0..300 {
        let n = 1 + rng.below(60) as usize;
        let g = random_graph(&mut rng, n);
        let s = random_snapshot(&mut rng);
        match plan(&g, &s, &LinkCosts::default()) {
            Ok(p) => {
                check_plan(&g, &s, &p);
                planned += 1;
            }
            Err(PlanError::OutOfMemory { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(planned > 100, "most random cases should fit ({planned})");
}

#[test]
fn equal_inputs_in_another_order_give_the_same_plan() {
    let mut rng = Rng(42);
    for _ in 0..50 {
        let g = random_graph(&mut rng, 40);
        let s = random_snapshot(&mut rng);
        // The same cluster, its nodes learned in the reverse order.
        let mut reversed = Snapshot {
            version: s.version,
            ..Snapshot::default()
        };
        for (k, v) in s.nodes.iter().rev() {
            reversed.nodes.insert(k.clone(), v.clone());
        }
        let a = plan(&g, &s, &LinkCosts::default());
        let b = plan(&g, &reversed, &LinkCosts::default());
        assert_eq!(a, b);
        if let Ok(p) = a {
            assert_ne!(p.hash, 0);
        }
    }
}

#[test]
fn the_hash_changes_with_the_plan() {
    let mut rng = Rng(7);
    let g = random_graph(&mut rng, 30);
    let s = Snapshot::single("a", vec![device("cpu", DeviceKind::Cpu, u64::MAX)]);
    let mut s2 = s.clone();
    s2.version += 1;
    let p1 = plan(&g, &s, &LinkCosts::default()).unwrap();
    let p2 = plan(&g, &s2, &LinkCosts::default()).unwrap();
    assert_ne!(p1.hash, p2.hash);
}

fn chain(n: usize, bytes: u64) -> CostGraph {
    let mut g = CostGraph::default();
    g.values.push(ValueCost {
        bytes,
        kind: ValueKind::Input,
        output: false,
    });
    for i in 0..n {
        let w = g.values.len();
        g.values.push(ValueCost {
            bytes,
            kind: ValueKind::Weight,
            output: false,
        });
        let out = g.values.len();
        g.values.push(ValueCost {
            bytes,
            kind: ValueKind::Computed,
            output: i + 1 == n,
        });
        g.ops.push(OpCost {
            name: format!("add{i}"),
            inputs: vec![out - 2 - usize::from(i > 0), w],
            outputs: vec![out],
            flops: 1_000_000,
            gpu: true,
            gpu_needs: 0,
            view: false,
        });
    }
    // Fix the first op's data input: value 0 (the graph input).
    g.ops[0].inputs[0] = 0;
    for i in 1..n {
        g.ops[i].inputs[0] = g.ops[i - 1].outputs[0];
    }
    g
}

#[test]
fn a_memory_cap_splits_a_chain_into_two_chunks_with_one_transfer() {
    let g = chain(100, 64);
    let s = Snapshot::single(
        "n",
        vec![
            device("vulkan:0", DeviceKind::Gpu, 64 * 100),
            device("cpu", DeviceKind::Cpu, 1 << 20),
        ],
    );
    let p = plan(&g, &s, &LinkCosts::default()).unwrap();
    check_plan(&g, &s, &p);
    assert_eq!(p.chunks.len(), 2);
    assert_eq!(p.transfers.len(), 1);
    assert_eq!(
        p.chunks[0].device.index, 0,
        "the GPU takes the head of the chain"
    );
}

#[test]
fn too_small_a_cluster_is_a_clear_error() {
    let g = chain(10, 1000);
    let s = Snapshot::single("n", vec![device("cpu", DeviceKind::Cpu, 2500)]);
    let e = plan(&g, &s, &LinkCosts::default()).unwrap_err();
    assert!(matches!(e, PlanError::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().contains("no device"));
}

#[test]
fn joining_a_chunk_never_makes_a_cycle() {
    // gpu: a -> c ; cpu: b(a) ; gpu: d(b, c). d cannot join a's chunk, which feeds b.
    let mut g = CostGraph::default();
    g.values.push(ValueCost {
        bytes: 4,
        kind: ValueKind::Input,
        output: false,
    });
    for _ in 0..4 {
        g.values.push(ValueCost {
            bytes: 4,
            kind: ValueKind::Computed,
            output: false,
        });
    }
    let op = |name: &str, inputs: Vec<usize>, out: usize, gpu: bool| OpCost {
        name: name.into(),
        inputs,
        outputs: vec![out],
        flops: 1,
        gpu,
        gpu_needs: 0,
        view: false,
    };
    g.ops = vec![
        op("a", vec![0], 1, true),
        op("b", vec![1], 2, false),
        op("c", vec![1], 3, true),
        op("d", vec![2, 3], 4, true),
    ];
    let s = Snapshot::single(
        "n",
        vec![
            DeviceInventory {
                op_overhead_ns: 0,
                features: 0,
                ..device("vulkan:0", DeviceKind::Gpu, 1 << 20)
            },
            // Slow enough that running everything there is no alternative.
            DeviceInventory {
                op_overhead_ns: 1_000_000,
                ..device("cpu", DeviceKind::Cpu, 1 << 20)
            },
        ],
    );
    let p = plan(
        &g,
        &s,
        &LinkCosts {
            local_latency_ns: 0,
            upload_latency_ns: 0,
            gpu_run_ns: 0,
            ..Default::default()
        },
    )
    .unwrap();
    check_plan(&g, &s, &p);
    assert_eq!(p.placement[1].index, 1);
    assert_ne!(p.op_chunk[0], p.op_chunk[3]);
}

#[test]
fn a_one_node_snapshot_gives_the_single_node_plan_whatever_the_node_is_called() {
    let mut rng = Rng(0x5eed);
    for _ in 0..50 {
        let g = random_graph(&mut rng, 30);
        let devs: Vec<DeviceInventory> = random_snapshot(&mut rng)
            .nodes
            .into_values()
            .next()
            .unwrap();
        let single = plan(
            &g,
            &Snapshot::single("local", devs.clone()),
            &LinkCosts::default(),
        );
        let mut cluster = Snapshot::single("n7", devs);
        cluster.version = 0;
        let one = plan(&g, &cluster, &LinkCosts::default());
        match (single, one) {
            (Ok(a), Ok(b)) => {
                let idx = |p: &Plan| p.placement.iter().map(|d| d.index).collect::<Vec<_>>();
                assert_eq!(idx(&a), idx(&b));
                assert_eq!(a.op_chunk, b.op_chunk);
                assert_eq!(a.transfers, b.transfers);
                assert!(b.transfers.iter().all(|t| !t.cross_host));
                let ops = |p: &Plan| p.chunks.iter().map(|c| c.ops.clone()).collect::<Vec<_>>();
                assert_eq!(ops(&a), ops(&b));
                assert_eq!(
                    a.memory.values().collect::<Vec<_>>(),
                    b.memory.values().collect::<Vec<_>>()
                );
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("one plans and the other does not: {a:?} / {b:?}"),
        }
    }
}

/// A GPU and a CPU with the test rates (GPU: 2 us + 1 flop/ps per op; CPU: 0.5 us + 5 flops/ns).
fn gpu_and_cpu() -> Snapshot {
    Snapshot::single(
        "n",
        vec![
            device("vulkan:0", DeviceKind::Gpu, 1 << 30),
            device("cpu", DeviceKind::Cpu, 1 << 30),
        ],
    )
}

fn with_flops(mut g: CostGraph, flops: &[u64]) -> CostGraph {
    for (op, &f) in g.ops.iter_mut().zip(flops) {
        op.flops = f;
    }
    g
}

#[test]
fn a_tiny_model_runs_on_the_cpu_alone() {
    // Two ops of 60,000 flops. Greedy puts the first on the GPU (2.06 + 10 upload = 12.06 us
    // against the CPU's 0.5 + 12 = 12.5) and the second follows; but that plan pays a GPU
    // submission (20 us) per run: 2 * 2.06 + 10 + 20 = 34.1 us, against 2 * 12.5 = 25 us on
    // the CPU alone.
    let g = with_flops(chain(2, 64), &[60_000, 60_000]);
    let s = gpu_and_cpu();
    let p = plan(&g, &s, &LinkCosts::default()).unwrap();
    check_plan(&g, &s, &p);
    assert!(p.placement.iter().all(|d| d.index == 1), "{p:?}");
    // Ten times the work: the GPU plan (2 * 2.6 + 30 = 35.2 us) beats the CPU's 241 us.
    let g = with_flops(chain(2, 64), &[600_000, 600_000]);
    let p = plan(&g, &s, &LinkCosts::default()).unwrap();
    assert!(p.placement.iter().all(|d| d.index == 0), "{p:?}");
}

#[test]
fn a_cheap_first_op_does_not_keep_a_model_off_the_gpu() {
    // Greedy runs the tiny first op on the CPU (0.52 us against 2 + 10 upload) and moves to
    // the GPU for the heavy rest, paying a transfer (30 us): 0.52 + 3 * 2.2 + 30 + 20 = 57.1
    // us. All on the GPU: 2 + 3 * 2.2 + 10 + 20 = 38.6 us.
    let g = with_flops(chain(4, 64), &[100, 200_000, 200_000, 200_000]);
    let s = gpu_and_cpu();
    let p = plan(&g, &s, &LinkCosts::default()).unwrap();
    check_plan(&g, &s, &p);
    assert!(p.placement.iter().all(|d| d.index == 0), "{p:?}");
    assert!(p.transfers.is_empty());
}

/// One view from the caller's input to the caller's output: free on any device, so a plain
/// CPU may take it (no upload), but a fallback CPU takes only what no other device can run.
#[test]
fn a_fallback_device_takes_no_view_a_gpu_can_hold() {
    let mut g = CostGraph::default();
    for (kind, output) in [(ValueKind::Input, false), (ValueKind::Computed, true)] {
        g.values.push(ValueCost {
            bytes: 96,
            kind,
            output,
        });
    }
    g.ops.push(OpCost {
        name: "reshape".into(),
        inputs: vec![0],
        outputs: vec![1],
        flops: 0,
        gpu: true,
        gpu_needs: 0,
        view: true,
    });
    let placed_on = |cpu_overhead_ns: u64| {
        let s = Snapshot::single(
            "n",
            vec![
                device("vulkan:0", DeviceKind::Gpu, 1 << 20),
                DeviceInventory {
                    op_overhead_ns: cpu_overhead_ns,
                    ..device("cpu", DeviceKind::Cpu, 1 << 20)
                },
            ],
        );
        let p = plan(&g, &s, &LinkCosts::default()).unwrap();
        check_plan(&g, &s, &p);
        p.placement[0].index
    };
    assert_eq!(placed_on(500), 1, "a plain CPU saves the upload");
    assert_eq!(
        placed_on(FALLBACK_OVERHEAD_NS),
        0,
        "a fallback is the last resort"
    );
}
