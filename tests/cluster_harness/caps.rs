//! Memory caps that make the planner split a model over three CPU nodes: shared by the
//! cluster tests and benches/cluster.rs (which includes this file by path).

use std::path::Path;

/// The device figures file every node the tests and benches start shares (`--probe-cache`):
/// in the temp folder, which exists wherever the binaries run.
pub fn probe_cache() -> std::path::PathBuf {
    std::env::temp_dir().join("vkml-test-devices.json")
}

/// The snapshot real CPU-only nodes with these caps advertise: with the figures they measured
/// (or will: measured here first if the file has none yet).
fn cpu_cluster(caps: &[u64]) -> vkml_planner::Snapshot {
    let cpu = [vkml::exec::Device::Cpu];
    let figures = vkml::exec::probe::figures(&cpu, Some(&probe_cache()), &vkml::Tuning::default());
    let mut s = vkml_planner::Snapshot::default();
    for (i, &cap) in caps.iter().enumerate() {
        let devs = vkml::exec::inventory_measured(&cpu, Some(cap), &figures)
            .nodes
            .into_values()
            .next()
            .unwrap();
        s.nodes.insert(format!("n{}", i + 1), devs);
    }
    s
}

fn nodes_used(model: &Path, caps: &[u64]) -> Option<usize> {
    let tuning = vkml::Tuning::default();
    let r =
        vkml::distributed::offline::plan_model(model, &cpu_cluster(caps), None, &tuning).ok()?;
    Some(
        r.placement
            .parts
            .iter()
            .map(|p| &p.node)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
    )
}

/// The planner uses all three nodes, and no two of them could hold the model: the planner may
/// spread a model that two nodes hold over three for throughput, which would leave the
/// failure tests' survivors room they are meant not to have.
fn needs_three(model: &Path, caps: &[u64; 3]) -> bool {
    nodes_used(model, caps) == Some(3)
        && (0..3).all(|drop| {
            let two: Vec<u64> = (0..3).filter(|&i| i != drop).map(|i| caps[i]).collect();
            nodes_used(model, &two).is_none()
        })
}

/// Memory caps (per node, for nodes n1, n2, n3 serving their CPU) under which the planner
/// must use all three nodes (and no two hold the model): the smallest equal cap that fits; when one part is so large
/// that equal caps leave a node idle, smaller caps for the first two nodes (the smallest pair
/// that works, on a grid 10% apart).
pub fn caps_for_three(model: &Path) -> Vec<u64> {
    let mut c = 1024u64;
    while nodes_used(model, &[c, c, c]).is_none() {
        c = c * 11 / 10 + 1;
        assert!(c < 1 << 32, "{}: no cap fits", model.display());
    }
    if needs_three(model, &[c, c, c]) {
        return vec![c, c, c];
    }
    let mut grid = vec![256u64];
    while *grid.last().unwrap() < c {
        let g = *grid.last().unwrap();
        grid.push(g * 11 / 10 + 1);
    }
    for (i, &a) in grid.iter().enumerate() {
        for &b in &grid[..=i] {
            for caps in [[a, b, c], [b, a, c], [a, c, b], [c, a, b]] {
                if needs_three(model, &caps) {
                    return caps.to_vec();
                }
            }
        }
    }
    panic!(
        "{}: no caps split the model over three nodes",
        model.display()
    );
}
