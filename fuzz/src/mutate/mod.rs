//! Structure-aware mutation of a seed model. Every choice is drawn from the case's bytes
//! (arbitrary's `Unstructured`), so a case replays exactly and a small change to its bytes is a
//! small change to the model: the driver's corpus evolves cases by editing bytes.

mod graph;
mod tensor;
mod types;

use arbitrary::{Result, Unstructured};
use prost::Message;

use crate::proto::{AttributeProto, GraphProto, ModelProto, NodeProto};
use crate::seeds::Seeds;

pub use tensor::{SideFile, tensor};

/// What mutations draw from: every op type, attribute and node seen in any seed.
pub struct Pools {
    pub ops: Vec<String>,
    pub attrs: Vec<AttributeProto>,
    pub nodes: Vec<NodeProto>,
}

impl Pools {
    pub fn new(seeds: &Seeds) -> Pools {
        let mut ops = std::collections::BTreeSet::new();
        let mut attrs = std::collections::BTreeMap::new();
        let mut nodes = Vec::new();
        for seed in seeds.values() {
            let Some(g) = &seed.model.graph else { continue };
            for n in &g.node {
                ops.insert(n.op_type.clone());
                for a in &n.attribute {
                    // One example per (name, type) keeps the pool small and varied.
                    attrs
                        .entry((a.name.clone(), a.r#type))
                        .or_insert_with(|| a.clone());
                }
                if n.encoded_len() < 4096 {
                    nodes.push(n.clone());
                }
            }
        }
        Pools {
            ops: ops.into_iter().collect(),
            attrs: attrs.into_values().collect(),
            nodes,
        }
    }
}

/// A mutated model: its encoding, the files it refers to, and which ops it touched (for the
/// driver's record of what a case reached).
pub struct Mutated {
    pub model: ModelProto,
    pub files: Vec<SideFile>,
    /// Raw bytes to use instead of encoding `model`, when a byte-level edit was made.
    pub raw: Option<Vec<u8>>,
    pub focus: String,
}

/// One to four mutations of `model`.
pub fn mutate(u: &mut Unstructured, mut model: ModelProto, pools: &Pools) -> Result<Mutated> {
    let mut files = Vec::new();
    let mut focus = String::new();
    let rounds = u.int_in_range(1..=4)?;
    for _ in 0..rounds {
        let what = u.int_in_range(0..=19u8)?;
        match what {
            0 => types::opset(u, &mut model)?,
            1 => types::functions(u, &mut model, pools)?,
            _ => {
                let Some(root) = model.graph.as_mut() else {
                    model.graph = Some(GraphProto::default());
                    continue;
                };
                let count = count_graphs(root);
                // The main graph most of the time; a subgraph (If, Loop, Scan bodies) else.
                let mut k = if u.ratio(3, 4)? {
                    0
                } else {
                    u.int_in_range(0..=count - 1)?
                };
                let mut result = Ok(());
                with_graph(root, &mut k, &mut |g| {
                    result = graph_mutation(u, what, g, pools, &mut files, &mut focus);
                });
                result?;
            }
        }
    }
    let raw = if u.ratio(1, 12)? {
        Some(havoc(u, model.encode_to_vec())?)
    } else {
        None
    };
    if focus.is_empty() {
        focus = first_op(&model);
    }
    Ok(Mutated {
        model,
        files,
        raw,
        focus,
    })
}

fn graph_mutation(
    u: &mut Unstructured,
    what: u8,
    g: &mut GraphProto,
    pools: &Pools,
    files: &mut Vec<SideFile>,
    focus: &mut String,
) -> Result<()> {
    match what {
        2 | 3 => graph::attr_int(u, g, focus),
        4 => graph::attr_float(u, g, focus),
        5 => graph::attr_edit(u, g, pools, focus),
        6 => graph::attr_tensor(u, g, focus),
        7 | 8 => types::value_info(u, g),
        9 => tensor::initializer(u, g),
        10 => graph::rewire(u, g),
        11 => graph::arity(u, g),
        12 => graph::op_swap(u, g, pools, focus),
        13 => graph::duplicate(u, g),
        14 => graph::names(u, g),
        15 => graph::splice(u, g, pools, focus),
        16 => graph::reorder(u, g),
        17 => tensor::external(u, g, files),
        _ => graph::sizer(u, g, focus),
    }
}

fn count_graphs(g: &GraphProto) -> usize {
    1 + g
        .node
        .iter()
        .flat_map(|n| &n.attribute)
        .flat_map(|a| a.g.iter().chain(&a.graphs))
        .map(count_graphs)
        .sum::<usize>()
}

/// Calls `f` on the `k`-th graph in pre-order (the main graph is 0).
fn with_graph(g: &mut GraphProto, k: &mut usize, f: &mut dyn FnMut(&mut GraphProto)) -> bool {
    if *k == 0 {
        f(g);
        return true;
    }
    *k -= 1;
    for n in &mut g.node {
        for a in &mut n.attribute {
            for sub in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                if with_graph(sub, k, f) {
                    return true;
                }
            }
        }
    }
    false
}

fn first_op(model: &ModelProto) -> String {
    model
        .graph
        .as_ref()
        .and_then(|g| g.node.first())
        .map(|n| n.op_type.clone())
        .unwrap_or_default()
}

/// Byte-level edits of the encoding: what a truncated download or a bit flip does.
fn havoc(u: &mut Unstructured, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
    for _ in 0..u.int_in_range(1..=4)? {
        if bytes.is_empty() {
            break;
        }
        let at = u.int_in_range(0..=bytes.len() - 1)?;
        match u.int_in_range(0..=3u8)? {
            0 => bytes[at] ^= 1 << u.int_in_range(0..=7)?,
            1 => bytes[at] = u.arbitrary()?,
            2 => bytes.truncate(at),
            _ => {
                let b: u8 = u.arbitrary()?;
                bytes.insert(at, b);
            }
        }
    }
    Ok(bytes)
}
