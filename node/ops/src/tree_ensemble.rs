//! ai.onnx.ml TreeEnsemble (opset 5): X [N, F] to Y [N, n_targets], each row walking every
//! tree from its root to a leaf whose weight goes to the leaf's target, then aggregated (sum,
//! average, min or max) and post-transformed. On the GPU one thread walks one row; the trees
//! are uploaded once as tables.

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use crate::attrs::Attrs;
use crate::tensor::{DType, Tensor};
use vkml_shaders::tree_ensemble as shader;

/// A branch's target: another interior node or a leaf (indices into their lists).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    Node(usize),
    Leaf(usize),
}

/// BRANCH_LEQ .. BRANCH_MEMBER, the attribute's codes (the shader's too).
const MODES: usize = 7;
const NEQ: u8 = 5;
const MEMBER: u8 = 6;

#[derive(Debug, Clone)]
struct Branch {
    feature: usize,
    mode: u8,
    split: f64,
    nan_true: bool,
    yes: Next,
    no: Next,
    /// The member set of a BRANCH_MEMBER node: a range of `members`.
    set: (usize, usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Post {
    None,
    Softmax,
    Logistic,
    SoftmaxZero,
}

#[derive(Debug)]
pub(crate) struct TreeEnsemble {
    nodes: Vec<Branch>,
    roots: Vec<usize>,
    leaf_targets: Vec<usize>,
    leaf_weights: Vec<f64>,
    members: Vec<f64>,
    targets: usize,
    aggregate: Aggregate,
    post: Post,
    /// The element type of the attribute tensors: the GPU compares in X's type, which is
    /// exact only when they agree.
    values_dtype: DType,
}

fn ints<'a>(a: &'a Attrs, name: &str) -> Result<&'a [i64], OpError> {
    a.ints_opt(name)?.ok_or_else(|| {
        OpError::invalid(format!(
            "TreeEnsemble needs the ints attribute '{name}'; add it to the node"
        ))
    })
}

fn floats(a: &Attrs, name: &str) -> Result<Option<(Vec<f64>, DType)>, OpError> {
    let Some(t) = a.tensor_opt(name)? else {
        return Ok(None);
    };
    let v = t
        .to_f64_vec()
        .map_err(|e| OpError::invalid(format!("TreeEnsemble attribute '{name}': {e}")))?;
    Ok(Some((v, t.dtype())))
}

fn index(v: i64, len: usize, what: &str) -> Result<usize, OpError> {
    usize::try_from(v).ok().filter(|&i| i < len).ok_or_else(|| {
        OpError::invalid(format!(
            "TreeEnsemble: {what} {v} is out of range (there are {len}); fix the model's trees"
        ))
    })
}

fn tensor_attr(a: &Attrs, name: &str) -> Result<(Vec<f64>, DType), OpError> {
    floats(a, name)?.ok_or_else(|| {
        OpError::invalid(format!(
            "TreeEnsemble needs the tensor attribute '{name}'; add it to the node"
        ))
    })
}

pub(crate) fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let (weights, _) = tensor_attr(a, "leaf_weights")?;
    let leaf_targets = ints(a, "leaf_targetids")?;
    if leaf_targets.len() != weights.len() {
        return Err(OpError::invalid(
            "TreeEnsemble: leaf_targetids and leaf_weights must have one entry per leaf",
        ));
    }
    let targets = a.int_opt("n_targets")?.ok_or_else(|| {
        OpError::invalid("TreeEnsemble needs the int attribute 'n_targets'; add it to the node")
    })?;
    let targets = usize::try_from(targets)
        .ok()
        .filter(|&t| t > 0)
        .ok_or_else(|| {
            OpError::invalid(format!("TreeEnsemble: n_targets {targets} is not positive"))
        })?;
    let leaf_targets = leaf_targets
        .iter()
        .map(|&t| index(t, targets, "leaf target id"))
        .collect::<Result<Vec<_>, _>>()?;
    let members = a
        .tensor_opt("membership_values")?
        .map(|t| t.to_f64_vec())
        .transpose()
        .map_err(|e| OpError::invalid(format!("TreeEnsemble membership_values: {e}")))?
        .unwrap_or_default();
    let (nodes, values_dtype) = branches(a, weights.len(), &members)?;
    let roots = ints(a, "tree_roots")?
        .iter()
        .map(|&r| index(r, nodes.len(), "tree root"))
        .collect::<Result<Vec<_>, _>>()?;
    if roots.is_empty() {
        return Err(OpError::invalid("TreeEnsemble: tree_roots is empty"));
    }
    check_acyclic(&nodes)?;
    let (aggregate, post) = aggregate_and_post(a)?;
    Ok(Box::new(TreeEnsemble {
        nodes,
        roots,
        leaf_targets,
        leaf_weights: weights,
        members,
        targets,
        aggregate,
        post,
        values_dtype,
    }))
}

/// The interior nodes from the nodes_* attributes, and the element type of their splits.
fn branches(a: &Attrs, leaves: usize, members: &[f64]) -> Result<(Vec<Branch>, DType), OpError> {
    let (splits, values_dtype) = tensor_attr(a, "nodes_splits")?;
    let (modes, _) = tensor_attr(a, "nodes_modes")?;
    let features = ints(a, "nodes_featureids")?;
    let yes = ints(a, "nodes_truenodeids")?;
    let no = ints(a, "nodes_falsenodeids")?;
    let yes_leaf = ints(a, "nodes_trueleafs")?;
    let no_leaf = ints(a, "nodes_falseleafs")?;
    let nan_true = a.ints_opt("nodes_missing_value_tracks_true")?;
    let n = splits.len();
    let lists = [
        features.len(),
        yes.len(),
        no.len(),
        yes_leaf.len(),
        no_leaf.len(),
    ];
    if modes.len() != n || lists.iter().any(|&l| l != n) || nan_true.is_some_and(|v| v.len() != n) {
        return Err(OpError::invalid(
            "TreeEnsemble: the nodes_* attributes must all have one entry per interior node",
        ));
    }
    let mut sets = member_sets(members);
    let next = |is_leaf: i64, id: i64| -> Result<Next, OpError> {
        Ok(if is_leaf != 0 {
            Next::Leaf(index(id, leaves, "leaf id")?)
        } else {
            Next::Node(index(id, n, "node id")?)
        })
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mode = modes[i];
        if !((0.0..MODES as f64).contains(&mode) && mode.fract() == 0.0) {
            return Err(OpError::invalid(format!(
                "TreeEnsemble: node {i}'s mode {mode} is not one of 0 (LEQ) .. 6 (MEMBER)"
            )));
        }
        let mode = mode as u8;
        let set = if mode == MEMBER {
            sets.next().ok_or_else(|| {
                OpError::invalid(format!(
                    "TreeEnsemble: node {i} tests set membership but membership_values has no \
                     set left for it (one NaN-terminated set per BRANCH_MEMBER node)"
                ))
            })?
        } else {
            (0, 0)
        };
        nodes.push(Branch {
            feature: usize::try_from(features[i]).map_err(|_| {
                OpError::invalid(format!("TreeEnsemble: node {i}'s feature id is negative"))
            })?,
            mode,
            split: splits[i],
            nan_true: nan_true.is_some_and(|v| v[i] != 0),
            yes: next(yes_leaf[i], yes[i])?,
            no: next(no_leaf[i], no[i])?,
            set,
        });
    }
    Ok((nodes, values_dtype))
}

fn aggregate_and_post(a: &Attrs) -> Result<(Aggregate, Post), OpError> {
    let aggregate = match a.int("aggregate_function", 1)? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        v => {
            return Err(OpError::invalid(format!(
                "TreeEnsemble aggregate_function {v} is unknown (0 AVERAGE, 1 SUM, 2 MIN, 3 MAX)"
            )));
        }
    };
    let post = match a.int("post_transform", 0)? {
        0 => Post::None,
        1 => Post::Softmax,
        2 => Post::Logistic,
        3 => Post::SoftmaxZero,
        4 => {
            return Err(OpError::unsupported(
                "TreeEnsemble post_transform 4 (PROBIT); apply it after the node instead",
            ));
        }
        v => {
            return Err(OpError::invalid(format!(
                "TreeEnsemble post_transform {v} is unknown (0 NONE .. 4 PROBIT)"
            )));
        }
    };
    Ok((aggregate, post))
}

/// The NaN-terminated sets of membership_values, as ranges; a last set without its NaN ends
/// with the list.
fn member_sets(members: &[f64]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= members.len() {
            return None;
        }
        let len = members[start..]
            .iter()
            .position(|v| v.is_nan())
            .unwrap_or(members.len() - start);
        let set = (start, len);
        start += len + 1;
        Some(set)
    })
}

/// Refuses a node reachable from itself, which would send a walk round forever.
fn check_acyclic(nodes: &[Branch]) -> Result<(), OpError> {
    // 0 unseen, 1 on the current path, 2 done.
    let mut state = vec![0u8; nodes.len()];
    for start in 0..nodes.len() {
        if state[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0u8)];
        state[start] = 1;
        while let Some(top) = stack.len().checked_sub(1) {
            let (i, side) = stack[top];
            stack[top].1 += 1;
            let child = match side {
                0 => nodes[i].yes,
                1 => nodes[i].no,
                _ => {
                    state[i] = 2;
                    stack.pop();
                    continue;
                }
            };
            if let Next::Node(c) = child {
                match state[c] {
                    0 => {
                        state[c] = 1;
                        stack.push((c, 0));
                    }
                    1 => {
                        return Err(OpError::invalid(format!(
                            "TreeEnsemble: node {c} is reachable from itself; the trees must \
                             not have cycles"
                        )));
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

impl Branch {
    /// Whether `x` (the row) takes the true branch. NaN compares false, as in C and numpy,
    /// so it fails every test but BRANCH_NEQ unless the node sends missing values to true.
    fn test(&self, x: f64, members: &[f64]) -> bool {
        if x.is_nan() {
            return self.nan_true || self.mode == NEQ;
        }
        let s = self.split;
        match self.mode {
            0 => x <= s,
            1 => x < s,
            2 => x >= s,
            3 => x > s,
            4 => x == s,
            NEQ => x != s,
            _ => members[self.set.0..self.set.0 + self.set.1].contains(&x),
        }
    }
}

impl TreeEnsemble {
    /// The leaf a row reaches in the tree at `root`.
    fn leaf(&self, root: usize, row: &[f64]) -> usize {
        let mut at = root;
        loop {
            let b = &self.nodes[at];
            let x = row.get(b.feature).copied().unwrap_or(f64::NAN);
            match if b.test(x, &self.members) {
                b.yes
            } else {
                b.no
            } {
                Next::Leaf(l) => return l,
                Next::Node(n) => at = n,
            }
        }
    }

    fn features(&self) -> usize {
        self.nodes.iter().map(|b| b.feature + 1).max().unwrap_or(0)
    }
}

/// Rounds to f32 after each step when the output is f32, so the sums are what an f32
/// accumulator (the GPU's) gets; f64 holds the sum of two f32s exactly before rounding.
fn round_to(dtype: DType, v: f64) -> f64 {
    if dtype == DType::F32 {
        v as f32 as f64
    } else {
        v
    }
}

fn post_transform(post: Post, row: &mut [f64]) {
    match post {
        Post::None => {}
        Post::Logistic => row.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        Post::Softmax | Post::SoftmaxZero => {
            let zero = post == Post::SoftmaxZero;
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for v in row.iter_mut() {
                // SOFTMAX_ZERO leaves zero scores at zero.
                *v = if zero && *v == 0.0 {
                    0.0
                } else {
                    (*v - max).exp()
                };
                sum += *v;
            }
            if sum > 0.0 {
                row.iter_mut().for_each(|v| *v /= sum);
            }
        }
    }
}

impl Op for TreeEnsemble {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !matches!(x.dtype, DType::F32 | DType::F64) {
            return Err(OpError::unsupported(format!(
                "TreeEnsemble input of type {}; cast X to float or double",
                x.dtype
            )));
        }
        let [rows, f] = x.shape[..] else {
            return Err(OpError::invalid(format!(
                "TreeEnsemble: X must be [N, F], found {x}"
            )));
        };
        if self.features() > f {
            return Err(OpError::invalid(format!(
                "TreeEnsemble: the trees test feature {} but X has {f} features",
                self.features() - 1
            )));
        }
        Ok(vec![ValueType::new(x.dtype, vec![rows, self.targets])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let dtype = outputs[0].dtype;
        let f = x.shape().get(1).copied().unwrap_or(0);
        let xs = x
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("TreeEnsemble: {e}")))?;
        let start = match self.aggregate {
            Aggregate::Min => f64::MAX,
            Aggregate::Max => f64::MIN,
            _ => 0.0,
        };
        let start = if dtype == DType::F32 {
            start.clamp(f64::from(f32::MIN), f64::from(f32::MAX))
        } else {
            start
        };
        let rows = outputs[0].shape[0];
        let mut y = vec![start; rows * self.targets];
        for r in 0..rows {
            let row = &xs[r * f..(r + 1) * f];
            let out = &mut y[r * self.targets..(r + 1) * self.targets];
            for &root in &self.roots {
                let l = self.leaf(root, row);
                let (t, w) = (self.leaf_targets[l], self.leaf_weights[l]);
                out[t] = match self.aggregate {
                    Aggregate::Sum | Aggregate::Average => round_to(dtype, out[t] + w),
                    Aggregate::Min => out[t].min(round_to(dtype, w)),
                    Aggregate::Max => out[t].max(round_to(dtype, w)),
                };
            }
            if self.aggregate == Aggregate::Average {
                let n = self.roots.len() as f64;
                out.iter_mut().for_each(|v| *v = round_to(dtype, *v / n));
            }
            post_transform(self.post, out);
        }
        Ok(vec![super::numeric::from_f64(
            dtype,
            outputs[0].shape.clone(),
            y,
        )?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        if x.dtype != self.values_dtype || self.post != Post::None {
            return None;
        }
        let variant = by_dtype!(x.dtype, shader::Variant, [F32, F64])?;
        let rows = outputs.first()?.shape[0];
        let dispatches = if rows == 0 {
            Vec::new()
        } else {
            let (tab, vals, params) = self.tables(x)?;
            vec![Dispatch::new(
                variant,
                shader::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                    tab: BufRef::Table(tab),
                    vals: BufRef::Table(vals),
                },
                params,
                groups_1d(rows, 64),
            )]
        };
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        let rows = outputs.first().map_or(0, |o| o.shape[0]);
        (rows * self.roots.len() * 8) as u64
    }
}

const LEAF_BIT: u32 = 1 << 31;

impl TreeEnsemble {
    /// The shader's two tables and parameters: u32 words (roots, nodes, leaf targets) and
    /// values in X's type (splits, leaf weights, members).
    fn tables(&self, x: &ValueType) -> Option<(Vec<u32>, Vec<u32>, shader::Params)> {
        let u = |v: usize| u32::try_from(v).ok();
        let next = |n: Next| match n {
            Next::Node(i) => u(i),
            Next::Leaf(l) => u(l).filter(|&l| l < LEAF_BIT).map(|l| l | LEAF_BIT),
        };
        let mut tab: Vec<u32> = Vec::new();
        for &r in &self.roots {
            tab.push(u(r)?);
        }
        let nodes_at = tab.len();
        for b in &self.nodes {
            let flags = u32::from(b.mode) | (u32::from(b.nan_true) << 8);
            let set = [u(b.set.0)?, u(b.set.1)?];
            tab.extend([
                u(b.feature)?,
                flags,
                next(b.yes)?,
                next(b.no)?,
                set[0],
                set[1],
            ]);
        }
        let leaves_at = tab.len();
        for &t in &self.leaf_targets {
            tab.push(u(t)?);
        }
        let values: Vec<f64> = self
            .nodes
            .iter()
            .map(|b| b.split)
            .chain(self.leaf_weights.iter().copied())
            .chain(self.members.iter().copied())
            .collect();
        let vals: Vec<u32> = match x.dtype {
            DType::F32 => values.iter().map(|&v| (v as f32).to_bits()).collect(),
            _ => values
                .iter()
                .flat_map(|v| {
                    let b = v.to_bits();
                    [b as u32, (b >> 32) as u32]
                })
                .collect(),
        };
        let params = shader::Params {
            rows: u(x.shape[0])?,
            features: u(x.shape[1])?,
            targets: u(self.targets)?,
            trees: u(self.roots.len())?,
            nodes: u(self.nodes.len())?,
            aggregate: self.aggregate as u32,
            nodes_at: u(nodes_at)?,
            leaves_at: u(leaves_at)?,
            weights_at: u(self.nodes.len())?,
            members_at: u(self.nodes.len() + self.leaf_weights.len())?,
        };
        Some((tab, vals, params))
    }
}

#[cfg(test)]
#[path = "tree_ensemble_tests.rs"]
mod tests;
