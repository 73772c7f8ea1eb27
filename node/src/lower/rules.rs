//! How each sequence and optional op lowers: to the tensors it chooses, to tensor ops, or to
//! its body inlined.

use super::engine::{LowerError, Lowerer, Scope, Sym, node_error};
use crate::error::Error;
use crate::model::{GraphDef, NodeDef};
use crate::ops::AttrValue;
use crate::tensor::{DType, Tensor};

/// The most iterations of a Loop unrolled because it carries a sequence or an optional.
const MAX_UNROLL: i64 = 4096;

type Lowered = Result<Option<Vec<Sym>>, LowerError>;

/// The symbols a structural node makes, or `None` for a node to copy as it is.
pub(super) fn lower(lw: &mut Lowerer<'_>, scope: &Scope<'_>, n: &NodeDef, prefix: &str) -> Lowered {
    if !n.domain.is_empty() {
        return Ok(None);
    }
    let one = |s: Sym| Ok(Some(vec![s]));
    match n.op_type.as_str() {
        "SequenceEmpty" => {
            let code = n.attrs.int("dtype", 1).map_err(|e| op_error(n, e))?;
            let dtype = i32::try_from(code)
                .ok()
                .and_then(DType::from_onnx_code)
                .ok_or_else(|| {
                    node_error(n, format!("dtype {code} is no element type vkml has"))
                })?;
            one(Sym::Seq(Some(dtype), Vec::new()))
        }
        "SequenceConstruct" => {
            let items = (0..n.inputs.len())
                .map(|k| tensor(scope, n, k))
                .collect::<Result<Vec<_>, _>>()?;
            let dtype = match items.first() {
                Some(t) => Some(lw.facts(t)?.0.dtype),
                None => None,
            };
            one(Sym::Seq(dtype, items))
        }
        "SequenceLength" => {
            let (_, items) = sequence(scope, n, 0)?;
            let len = Tensor::from_vec(vec![], vec![items.len() as i64]);
            one(Sym::Tensor(
                lw.constant(&format!("{prefix}{}", n.name), len),
            ))
        }
        "SequenceAt" => {
            let (_, items) = sequence(scope, n, 0)?;
            let at = position(lw, scope, n, 1, items.len(), false)?.expect("a required input");
            one(Sym::Tensor(items[at].clone()))
        }
        "SequenceInsert" => {
            let (dtype, mut items) = sequence(scope, n, 0)?;
            let t = tensor(scope, n, 1)?;
            let at = position(lw, scope, n, 2, items.len(), true)?.unwrap_or(items.len());
            items.insert(at, t);
            one(Sym::Seq(dtype, items))
        }
        "SequenceErase" => {
            let (dtype, mut items) = sequence(scope, n, 0)?;
            if items.is_empty() {
                return Err(node_error(n, "erases from an empty sequence").into());
            }
            let at = position(lw, scope, n, 1, items.len(), false)?.unwrap_or(items.len() - 1);
            items.remove(at);
            one(Sym::Seq(dtype, items))
        }
        "SplitToSequence" => split_to_sequence(lw, scope, n, prefix).map(|s| Some(vec![s])),
        "ConcatFromSequence" => concat_from_sequence(lw, scope, n, prefix).map(|s| Some(vec![s])),
        "SequenceMap" => sequence_map(lw, scope, n, prefix).map(Some),
        "Optional" => match input(scope, n, 0)? {
            Some(s) => one(Sym::Opt(Some(Box::new(s)))),
            None => one(Sym::Opt(None)),
        },
        "OptionalHasElement" => {
            let has = !matches!(input(scope, n, 0)?, None | Some(Sym::Opt(None)));
            let t = Tensor::from_bools(vec![], vec![has]);
            one(Sym::Tensor(lw.constant(&format!("{prefix}{}", n.name), t)))
        }
        "OptionalGetElement" => match input(scope, n, 0)? {
            Some(Sym::Opt(Some(s))) => one(*s),
            Some(Sym::Opt(None)) => Err(node_error(n, "the optional is empty").into()),
            Some(s) => one(s),
            None => Err(node_error(n, "has no input").into()),
        },
        "Identity" => match input(scope, n, 0)? {
            Some(s @ (Sym::Seq(..) | Sym::Opt(_))) => one(s),
            _ => Ok(None),
        },
        "If" if carries_structure(scope, n) => if_branch(lw, scope, n, prefix).map(Some),
        "Loop" if carries_structure(scope, n) => unroll(lw, scope, n, prefix).map(Some),
        _ => Ok(None),
    }
}

fn op_error(n: &NodeDef, e: crate::ops::OpError) -> Error {
    node_error(n, e.to_string())
}

/// Input `k`, or `None` when it is omitted.
fn input(scope: &Scope<'_>, n: &NodeDef, k: usize) -> Result<Option<Sym>, Error> {
    match n.inputs.get(k).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(name) => scope
            .get(name)
            .cloned()
            .map(Some)
            .ok_or_else(|| node_error(n, format!("input '{name}' is produced by nothing"))),
    }
}

/// Inputs `ks`, each of which must be given.
fn required(scope: &Scope<'_>, n: &NodeDef, ks: std::ops::Range<usize>) -> Result<Vec<Sym>, Error> {
    ks.map(|k| input(scope, n, k)?.ok_or_else(|| node_error(n, format!("input {k} is missing"))))
        .collect()
}

fn tensor(scope: &Scope<'_>, n: &NodeDef, k: usize) -> Result<String, Error> {
    match input(scope, n, k)? {
        Some(Sym::Tensor(t)) => Ok(t),
        Some(s) => Err(node_error(
            n,
            format!("input {k} is a {}; it must be a tensor", s.kind()),
        )),
        None => Err(node_error(n, format!("input {k} is missing"))),
    }
}

fn sequence(
    scope: &Scope<'_>,
    n: &NodeDef,
    k: usize,
) -> Result<(Option<DType>, Vec<String>), Error> {
    match input(scope, n, k)? {
        Some(Sym::Seq(d, items)) => Ok((d, items)),
        Some(s) => Err(node_error(
            n,
            format!("input {k} is a {}; it must be a sequence", s.kind()),
        )),
        None => Err(node_error(n, format!("input {k} is missing"))),
    }
}

/// One integer of a scalar or one-element tensor.
fn scalar_i64(t: &Tensor) -> Option<i64> {
    let v = t.to_i64_vec().ok()?;
    (v.len() == 1 && !t.dtype().is_float()).then(|| v[0])
}

/// Position input `k` of a sequence of `len` tensors, made non-negative: within
/// `[-len, len - 1]`, or `[-len, len]` where a position may be the end (`end`).
fn position(
    lw: &mut Lowerer<'_>,
    scope: &Scope<'_>,
    n: &NodeDef,
    k: usize,
    len: usize,
    end: bool,
) -> Result<Option<usize>, LowerError> {
    let Some(name) = input(scope, n, k)?
        .map(|_| tensor(scope, n, k))
        .transpose()?
    else {
        return Ok(None);
    };
    let what = format!("the position of node '{}' ({})", n.name, n.op_type);
    let v = lw.value(&name, &what)?;
    let p = scalar_i64(&v)
        .ok_or_else(|| node_error(n, format!("the position is {v:?}; it must be one integer")))?;
    let len = len as i64;
    let top = if end { len } else { len - 1 };
    if p < -len || p > top {
        return Err(node_error(
            n,
            format!(
                "position {p} is outside [{}, {top}] for a sequence of {len}",
                -len
            ),
        )
        .into());
    }
    Ok(Some(if p < 0 { p + len } else { p } as usize))
}

fn int_attr(n: &NodeDef, name: &str, default: i64) -> Result<i64, Error> {
    n.attrs.int(name, default).map_err(|e| op_error(n, e))
}

/// `axis` within `[-rank, rank - 1]`, made non-negative.
fn norm_axis(n: &NodeDef, axis: i64, rank: usize) -> Result<usize, Error> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(node_error(
            n,
            format!("axis {axis} is outside [{}, {}]", -r, r - 1),
        ));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

fn ints(v: &[usize]) -> Tensor {
    Tensor::from_vec(
        vec![v.len()],
        v.iter().map(|&x| x as i64).collect::<Vec<_>>(),
    )
}

/// Slices along the axis (Squeezed by a Reshape when keepdims is 0 and no split is given).
fn split_to_sequence(
    lw: &mut Lowerer<'_>,
    scope: &Scope<'_>,
    n: &NodeDef,
    prefix: &str,
) -> Result<Sym, LowerError> {
    let x = tensor(scope, n, 0)?;
    let (ty, _) = lw.facts(&x)?;
    let axis = norm_axis(n, int_attr(n, "axis", 0)?, ty.shape.len())?;
    let dim = ty.shape[axis];
    let split = match input(scope, n, 1)? {
        Some(_) => {
            let s = tensor(scope, n, 1)?;
            let what = format!("the split of node '{}' (SplitToSequence)", n.name);
            Some(lw.value(&s, &what)?)
        }
        None => None,
    };
    let keepdims = int_attr(n, "keepdims", 1)? != 0;
    let sizes: Vec<usize> = match &split {
        None => vec![1; dim],
        Some(s) if s.shape().is_empty() => {
            let k = scalar_i64(s).filter(|&k| k > 0).ok_or_else(|| {
                node_error(
                    n,
                    format!("split is {s:?}; a scalar split must be positive"),
                )
            })? as usize;
            (0..dim.div_ceil(k)).map(|i| k.min(dim - i * k)).collect()
        }
        Some(s) => {
            let v = s.to_i64_vec().map_err(|e| node_error(n, e.to_string()))?;
            if v.iter().any(|&x| x < 0) || v.iter().sum::<i64>() != dim as i64 {
                return Err(node_error(
                    n,
                    format!("split {v:?} does not divide the {dim} entries of axis {axis}"),
                )
                .into());
            }
            v.iter().map(|&x| x as usize).collect()
        }
    };
    let squeeze = split.is_none() && !keepdims;
    let base = format!("{prefix}{}", n.name);
    let axes = lw.constant(&format!("{base}_axes"), ints(&[axis]));
    let mut squeezed = ty.shape.clone();
    squeezed.remove(axis);
    let mut items = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for size in sizes {
        let s = lw.constant(&format!("{base}_start"), ints(&[start]));
        let e = lw.constant(&format!("{base}_end"), ints(&[start + size]));
        let mut item = lw.emit(
            &base,
            "Slice",
            vec![x.clone(), s, e, axes.clone()],
            Vec::new(),
        )?;
        if squeeze {
            let shape = lw.constant(&format!("{base}_shape"), ints(&squeezed));
            item = lw.emit(&base, "Reshape", vec![item, shape], Vec::new())?;
        }
        items.push(item);
        start += size;
    }
    Ok(Sym::Seq(Some(ty.dtype), items))
}

/// A Concat of the tensors (each Reshaped to take the new axis first, with `new_axis`).
fn concat_from_sequence(
    lw: &mut Lowerer<'_>,
    scope: &Scope<'_>,
    n: &NodeDef,
    prefix: &str,
) -> Result<Sym, LowerError> {
    let (_, items) = sequence(scope, n, 0)?;
    let Some(first) = items.first() else {
        return Err(node_error(n, "concatenates an empty sequence, which has no shape").into());
    };
    let (ty, _) = lw.facts(first)?;
    let new_axis = int_attr(n, "new_axis", 0)? != 0;
    let rank = ty.shape.len() + usize::from(new_axis);
    let axis_attr = n
        .attrs
        .int_opt("axis")
        .map_err(|e| op_error(n, e))?
        .ok_or_else(|| node_error(n, "has no 'axis' attribute"))?;
    let axis = norm_axis(n, axis_attr, rank)?;
    let base = format!("{prefix}{}", n.name);
    let mut parts = items.clone();
    if new_axis {
        for p in &mut parts {
            let (t, _) = lw.facts(p)?;
            let mut shape = t.shape.clone();
            shape.insert(axis, 1);
            let s = lw.constant(&format!("{base}_shape"), ints(&shape));
            *p = lw.emit(&base, "Reshape", vec![p.clone(), s], Vec::new())?;
        }
    }
    let attrs = vec![("axis", AttrValue::Int(axis as i64))];
    Ok(Sym::Tensor(lw.emit(&base, "Concat", parts, attrs)?))
}

fn body<'n>(n: &'n NodeDef, name: &str) -> Result<&'n GraphDef, Error> {
    match n.attrs.get(name) {
        Some(AttrValue::Graph(g)) => Ok(g),
        _ => Err(node_error(n, format!("has no '{name}' graph"))),
    }
}

/// The body inlined once per position of the sequences, tensors given whole each time.
fn sequence_map(
    lw: &mut Lowerer<'_>,
    scope: &Scope<'_>,
    n: &NodeDef,
    prefix: &str,
) -> Result<Vec<Sym>, LowerError> {
    let g = body(n, "body")?;
    let (_, first) = sequence(scope, n, 0)?;
    let args = required(scope, n, 0..n.inputs.len())?;
    if g.inputs.len() != args.len() || g.outputs.len() != n.outputs.len() {
        return Err(node_error(
            n,
            "its body must take one value per input and give the outputs",
        )
        .into());
    }
    let mut outs: Vec<Vec<String>> = vec![Vec::new(); g.outputs.len()];
    for i in 0..first.len() {
        let per: Vec<Sym> = args
            .iter()
            .map(|a| match a {
                Sym::Seq(_, items) if items.len() == first.len() => {
                    Ok(Sym::Tensor(items[i].clone()))
                }
                Sym::Seq(_, items) => Err(node_error(
                    n,
                    format!(
                        "its sequences differ in length ({} and {})",
                        first.len(),
                        items.len()
                    ),
                )),
                other => Ok(other.clone()),
            })
            .collect::<Result<_, _>>()?;
        let got = lw.inline(scope, g, per, &format!("{prefix}{}/{i}/", n.name))?;
        push_tensors(n, &mut outs, got, "a body output")?;
    }
    let mut syms = Vec::new();
    for (o, def) in outs.into_iter().zip(&g.outputs) {
        let dtype = match o.first() {
            Some(t) => Some(lw.facts(t)?.0.dtype),
            None => def.dtype,
        };
        syms.push(Sym::Seq(dtype, o));
    }
    Ok(syms)
}

/// Whether an If or a Loop takes or makes a sequence or an optional.
fn carries_structure(scope: &Scope<'_>, n: &NodeDef) -> bool {
    let takes = n
        .inputs
        .iter()
        .any(|i| !i.is_empty() && matches!(scope.get(i), Some(Sym::Seq(..) | Sym::Opt(_))));
    takes
        || n.attrs.0.values().any(|a| match a {
            AttrValue::Graph(g) => g
                .inputs
                .iter()
                .chain(&g.outputs)
                .any(|v| !v.kind.is_tensor()),
            _ => false,
        })
}

fn if_branch(
    lw: &mut Lowerer<'_>,
    scope: &Scope<'_>,
    n: &NodeDef,
    prefix: &str,
) -> Result<Vec<Sym>, LowerError> {
    let cond = tensor(scope, n, 0)?;
    let what = format!(
        "the condition of If '{}', whose branches make sequences or optionals,",
        n.name
    );
    let v = lw.value(&cond, &what)?;
    let b = v
        .view_bool()
        .ok()
        .filter(|b| b.len() == 1)
        .map(|b| b[0])
        .ok_or_else(|| node_error(n, format!("the condition is {v:?}; it must be one bool")))?;
    let (attr, tag) = if b {
        ("then_branch", "then")
    } else {
        ("else_branch", "else")
    };
    lw.inline(
        scope,
        body(n, attr)?,
        Vec::new(),
        &format!("{prefix}{}/{tag}/", n.name),
    )
}

/// A Loop carrying a sequence or an optional, unrolled: its trip count and condition must be
/// known when planning, and so must the condition each iteration gives back.
fn unroll(
    lw: &mut Lowerer<'_>,
    scope: &Scope<'_>,
    n: &NodeDef,
    prefix: &str,
) -> Result<Vec<Sym>, LowerError> {
    let g = body(n, "body")?;
    let carried = n.inputs.len().saturating_sub(2);
    if g.inputs.len() != carried + 2 || g.outputs.len() < carried + 1 {
        return Err(node_error(
            n,
            "its body must take the iteration, the condition and the carried values",
        )
        .into());
    }
    let scans = g.outputs.len() - 1 - carried;
    let what = |x: &str| {
        format!(
            "the {x} of Loop '{}', which carries a sequence or an optional,",
            n.name
        )
    };
    let trip = match input(scope, n, 0)? {
        Some(_) => {
            let t = lw.value(&tensor(scope, n, 0)?, &what("trip count"))?;
            Some(
                scalar_i64(&t)
                    .ok_or_else(|| node_error(n, "the trip count must be one integer"))?,
            )
        }
        None => None,
    };
    let mut cond = match input(scope, n, 1)? {
        Some(_) => truth(&lw.value(&tensor(scope, n, 1)?, &what("condition"))?, n)?,
        None => true,
    };
    if trip.is_none() && input(scope, n, 1)?.is_none() {
        return Err(node_error(
            n,
            "has neither a trip count nor a condition, so it never ends",
        )
        .into());
    }
    let mut state = required(scope, n, 2..n.inputs.len())?;
    let mut stacked: Vec<Vec<String>> = vec![Vec::new(); scans];
    let mut i = 0i64;
    while cond && trip.is_none_or(|m| i < m) {
        if i >= MAX_UNROLL {
            return Err(node_error(
                n,
                format!("carries a sequence or an optional and runs more than {MAX_UNROLL} iterations, which vkml unrolls no further"),
            )
            .into());
        }
        let base = format!("{prefix}{}/{i}/", n.name);
        let iter = lw.constant(
            &format!("{base}iteration"),
            Tensor::from_vec(vec![], vec![i]),
        );
        let c = lw.constant(
            &format!("{base}condition"),
            Tensor::from_bools(vec![], vec![cond]),
        );
        let mut args = vec![Sym::Tensor(iter), Sym::Tensor(c)];
        args.append(&mut state);
        let mut got = lw.inline(scope, g, args, &base)?.into_iter();
        let c = match got.next() {
            Some(Sym::Tensor(t)) => t,
            _ => return Err(node_error(n, "its body's condition must be a tensor").into()),
        };
        cond = truth(&lw.value(&c, &what("condition each iteration gives"))?, n)?;
        state = got.by_ref().take(carried).collect();
        push_tensors(n, &mut stacked, got, "a scan output")?;
        i += 1;
    }
    for s in stacked {
        state.push(Sym::Tensor(stack(lw, n, prefix, &s)?));
    }
    Ok(state)
}

/// Appends each of `got` (one per list) to its list; `what` names them when one is not a
/// tensor.
fn push_tensors(
    n: &NodeDef,
    lists: &mut [Vec<String>],
    got: impl IntoIterator<Item = Sym>,
    what: &str,
) -> Result<(), Error> {
    for (list, s) in lists.iter_mut().zip(got) {
        match s {
            Sym::Tensor(t) => list.push(t),
            s => {
                return Err(node_error(
                    n,
                    format!("{what} is a {}; it must be a tensor", s.kind()),
                ));
            }
        }
    }
    Ok(())
}

fn truth(t: &Tensor, n: &NodeDef) -> Result<bool, Error> {
    t.view_bool()
        .ok()
        .filter(|b| b.len() == 1)
        .map(|b| b[0])
        .ok_or_else(|| node_error(n, format!("a condition is {t:?}; it must be one bool")))
}

/// A scan output: the iterations' tensors stacked on a new first axis.
fn stack(
    lw: &mut Lowerer<'_>,
    n: &NodeDef,
    prefix: &str,
    items: &[String],
) -> Result<String, LowerError> {
    if items.is_empty() {
        return Err(node_error(n, "ran no iteration, so its scan outputs have no shape").into());
    }
    let base = format!("{prefix}{}_scan", n.name);
    let mut parts = Vec::with_capacity(items.len());
    for t in items {
        let (ty, _) = lw.facts(t)?;
        let mut shape = vec![1];
        shape.extend(&ty.shape);
        let s = lw.constant(&format!("{base}_shape"), ints(&shape));
        parts.push(lw.emit(&base, "Reshape", vec![t.clone(), s], Vec::new())?);
    }
    Ok(lw.emit(&base, "Concat", parts, vec![("axis", AttrValue::Int(0))])?)
}
