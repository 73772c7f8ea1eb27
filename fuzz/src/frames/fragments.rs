//! Fragments as a submitter would send them: planned by the library's own functions over the
//! target's snapshot, so that a case starts from one the participant accepts; then mutated,
//! and mostly re-hashed (the participant recomputes the plan and refuses a wrong hash, which
//! would stop every mutation at the first check).

use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use prost::Message as _;
use vkml::cluster::Cluster;
use vkml::distributed::fragment::{self, Skeleton};
use vkml::graph::{Fusion, Graph};
use vkml::model::Dim;
use vkml::ops::ValueType;
use vkml::{Tensor, Tuning};
use vkml_planner::LinkCosts;
use vkml_protocol::{Kind, Message, pb};

use super::talk;
use crate::{edge, protowire};

pub struct Built {
    pub fragment: pb::Fragment,
    /// (value id, weight) in the order they follow the fragment.
    pub weights: Vec<(u64, Tensor)>,
}

/// The target's fragment of `model` (all of it: the cluster is the target alone).
pub fn build(model: &[u8], cluster: &Cluster) -> std::result::Result<Built, String> {
    let model = vkml::onnx::load_from_bytes(Bytes::copy_from_slice(model), None)
        .map_err(|e| e.to_string())?;
    let graph = Graph::from_model(&model).map_err(|e| e.to_string())?;
    let types = graph
        .inputs
        .iter()
        .map(|(_, d)| {
            let shape = d
                .dims
                .iter()
                .flatten()
                .map(|x| match x {
                    Dim::Fixed(n) => *n,
                    Dim::Sym(_) => 1,
                })
                .collect();
            ValueType::new(d.dtype.unwrap_or(vkml::DType::F32), shape)
        })
        .collect::<Vec<_>>();
    let spec = graph
        .specialize_for(&types, &[], Fusion::Off)
        .map_err(|e| format!("{e:?}"))?;
    let tuning = Tuning::default();
    let (cost, _) = vkml::exec::cost_graph(&graph, &spec, &tuning.kernels);
    let snapshot = cluster.snapshot();
    let plan =
        vkml_planner::plan(&cost, &snapshot, &LinkCosts::default()).map_err(|e| e.to_string())?;
    let skeleton = Skeleton::new(&graph, &spec, &cost, &snapshot).map_err(|e| e.to_string())?;
    let (mut f, weights) = skeleton.fragment(
        &graph,
        &spec,
        &plan,
        cluster.name(),
        1,
        "fuzzer",
        &Default::default(),
    );
    f.tuning_fingerprint = tuning.fingerprint();
    f.plan_settings = tuning.plan_settings();
    // Encoded as before weights were shared (no owner, nothing shared): the recorded findings'
    // bytes mutate this encoding, and must still make the frames they made (tests/findings).
    f.shared.clear();
    Ok(Built {
        fragment: f,
        weights: weights.into_iter().map(|(v, t)| (v as u64, t)).collect(),
    })
}

/// The bytes of one fragment conversation (the fragment, then its weights) and the model id
/// it loads under.
pub fn mutated(u: &mut Unstructured, built: &Built) -> Result<(Vec<u8>, u64)> {
    let mut f = built.fragment.clone();
    f.model_id = u.arbitrary::<u64>()? | 1;
    let mut body = f.encode_to_vec();
    for _ in 0..u.int_in_range(0..=3)? {
        body = protowire::mutate(u, &body, 4)?;
    }
    if u.ratio(3, 4)?
        && let Ok(mut g) = pb::Fragment::decode(body.as_slice())
    {
        rehash(&mut g);
        body = g.encode_to_vec();
    }
    let model_id = pb::Fragment::decode(body.as_slice()).map_or(f.model_id, |g| g.model_id);
    let mut out = vec![Kind::Fragment as u8];
    out.extend((body.len() as u32).to_be_bytes());
    out.extend(&body);
    let mut weights = built.weights.clone();
    if u.ratio(1, 8)? {
        weights.pop();
    }
    for (id, t) in &weights {
        let id = if u.ratio(15, 16)? {
            *id
        } else {
            edge::int(u)? as u64
        };
        if u.ratio(3, 4)? {
            let h = vkml::distributed::wire::header(t, pb::TensorRole::Weight, model_id, 0, id);
            out.extend(talk::frame(&Message::Tensor(h)));
            out.extend_from_slice(t.bytes());
        } else {
            out.extend(talk::tensor(
                u,
                t.dtype(),
                t.shape(),
                model_id,
                id,
                pb::TensorRole::Weight,
            )?);
        }
    }
    Ok((out, model_id))
}

/// Sets the plan hash the participant will compute from the fragment's own snapshot and cost
/// graph, when they plan at all.
fn rehash(f: &mut pb::Fragment) {
    let (Some(snapshot), Some(cost)) = (&f.snapshot, &f.cost) else {
        return;
    };
    let snapshot = fragment::snapshot_from_wire(snapshot);
    let Ok(cost) = fragment::cost_from_wire(cost) else {
        return;
    };
    if let Ok(plan) = vkml_planner::plan(&cost, &snapshot, &LinkCosts::default()) {
        f.plan_hash = plan.hash;
    }
}
