//! Printing where a plan puts a model: per node and device, and the values crossing nodes.

use vkml_protocol::pb;

pub fn bytes(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    if f >= KIB * KIB * KIB {
        format!("{:.2} GiB", f / (KIB * KIB * KIB))
    } else if f >= KIB * KIB {
        format!("{:.2} MiB", f / (KIB * KIB))
    } else if f >= KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{b} B")
    }
}

/// Nanoseconds as microseconds, for estimates.
fn micros(ns: u64) -> String {
    format!("{:.1} us", ns as f64 / 1000.0)
}

pub fn render(p: &pb::Placement) -> String {
    let nodes: std::collections::BTreeSet<&str> = p.parts.iter().map(|x| x.node.as_str()).collect();
    let mut out = format!(
        "plan {:016x}: {} node(s), {} chunk(s), {} value(s) crossing nodes per run\n",
        p.plan_hash,
        nodes.len(),
        p.chunks,
        p.edges.len()
    );
    let w = p
        .parts
        .iter()
        .map(|x| x.node.len())
        .max()
        .unwrap_or(4)
        .max(4);
    out.push_str(&format!(
        "  {:<w$}  {:<10} {:>6} {:>12} {:>12}\n",
        "node", "device", "ops", "memory", "est. busy"
    ));
    for part in &p.parts {
        out.push_str(&format!(
            "  {:<w$}  {:<10} {:>6} {:>12} {:>12}\n",
            part.node,
            part.device,
            part.ops,
            bytes(part.memory_bytes),
            micros(part.busy_ns)
        ));
    }
    // With several devices the plan is a pipeline: under load the busiest sets its pace.
    let busiest = p.parts.iter().max_by_key(|x| x.busy_ns);
    if let (true, Some(b)) = (p.parts.len() > 1, busiest) {
        let per_s = 1e9 / b.busy_ns.max(1) as f64;
        out.push_str(&format!(
            "bottleneck: {} {} at {} a run, at most {per_s:.0} runs/s with many in flight (estimated)\n",
            b.node,
            b.device,
            micros(b.busy_ns)
        ));
    }
    if !p.edges.is_empty() {
        out.push_str("cut edges (value: from -> to, size):\n");
        for e in &p.edges {
            out.push_str(&format!(
                "  {}: {} -> {}, {}\n",
                e.value,
                e.from_node,
                e.to_node,
                bytes(e.bytes)
            ));
        }
        let total: u64 = p.edges.iter().map(|e| e.bytes).sum();
        out.push_str(&format!("  total {} per run\n", bytes(total)));
    }
    out
}
