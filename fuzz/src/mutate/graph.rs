//! Mutations of a graph's nodes: attributes, wiring, arity, op types, order.

use arbitrary::{Result, Unstructured};

use super::Pools;
use crate::edge;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};

fn pick_node<'g>(u: &mut Unstructured, g: &'g mut GraphProto) -> Result<Option<&'g mut NodeProto>> {
    if g.node.is_empty() {
        return Ok(None);
    }
    let i = u.choose_index(g.node.len())?;
    Ok(Some(&mut g.node[i]))
}

fn pick_attr<'n>(
    u: &mut Unstructured,
    n: &'n mut NodeProto,
    types: &[AttributeType],
) -> Result<Option<&'n mut AttributeProto>> {
    let matching: Vec<usize> = (0..n.attribute.len())
        .filter(|&i| types.iter().any(|t| *t as i32 == n.attribute[i].r#type))
        .collect();
    if matching.is_empty() {
        return Ok(None);
    }
    Ok(Some(&mut n.attribute[*u.choose(&matching)?]))
}

/// Every value name the graph knows: inputs, initializers, node outputs.
pub fn value_names(g: &GraphProto) -> Vec<String> {
    g.input
        .iter()
        .map(|v| v.name.clone())
        .chain(g.initializer.iter().map(|t| t.name.clone()))
        .chain(g.node.iter().flat_map(|n| n.output.iter().cloned()))
        .collect()
}

pub fn attr_int(u: &mut Unstructured, g: &mut GraphProto, focus: &mut String) -> Result<()> {
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    *focus = n.op_type.clone();
    let Some(a) = pick_attr(u, n, &[AttributeType::Int, AttributeType::Ints])? else {
        return Ok(());
    };
    if a.r#type == AttributeType::Int as i32 {
        a.i = edge::int(u)?;
        return Ok(());
    }
    match u.int_in_range(0..=3u8)? {
        0 if !a.ints.is_empty() => {
            let keep = u.choose_index(a.ints.len())?;
            a.ints.truncate(keep);
        }
        1 => {
            for _ in 0..u.int_in_range(1..=3)? {
                a.ints.push(edge::int(u)?);
            }
        }
        _ if !a.ints.is_empty() => {
            let i = u.choose_index(a.ints.len())?;
            a.ints[i] = edge::int(u)?;
        }
        _ => a.ints.push(edge::int(u)?),
    }
    Ok(())
}

pub fn attr_float(u: &mut Unstructured, g: &mut GraphProto, focus: &mut String) -> Result<()> {
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    *focus = n.op_type.clone();
    let Some(a) = pick_attr(u, n, &[AttributeType::Float, AttributeType::Floats])? else {
        return Ok(());
    };
    if a.r#type == AttributeType::Float as i32 {
        a.f = edge::float(u)? as f32;
    } else if a.floats.is_empty() || u.ratio(1, 4)? {
        a.floats.push(edge::float(u)? as f32);
    } else {
        let i = u.choose_index(a.floats.len())?;
        a.floats[i] = edge::float(u)? as f32;
    }
    Ok(())
}

/// Drops, adds or retypes an attribute, or changes its name or string value.
pub fn attr_edit(
    u: &mut Unstructured,
    g: &mut GraphProto,
    pools: &Pools,
    focus: &mut String,
) -> Result<()> {
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    *focus = n.op_type.clone();
    match u.int_in_range(0..=4u8)? {
        0 if !n.attribute.is_empty() => {
            let i = u.choose_index(n.attribute.len())?;
            n.attribute.remove(i);
        }
        1 if !pools.attrs.is_empty() => n.attribute.push(u.choose(&pools.attrs)?.clone()),
        2 if !n.attribute.is_empty() => {
            let i = u.choose_index(n.attribute.len())?;
            // A type that disagrees with the payload, or no type at all.
            n.attribute[i].r#type = u.int_in_range(0..=15)?;
        }
        3 if !n.attribute.is_empty() => {
            let i = u.choose_index(n.attribute.len())?;
            let a = &mut n.attribute[i];
            a.s = match u.int_in_range(0..=3u8)? {
                0 => Vec::new(),
                1 => vec![0xff, 0xfe],
                2 => b"NOTSET_nonsense".to_vec(),
                _ => (*u.choose(&[
                    &b"constant"[..],
                    b"reflect",
                    b"edge",
                    b"wrap",
                    b"SAME_UPPER",
                    b"VALID",
                    b"linear",
                    b"cubic",
                    b"nearest",
                    b"half_pixel",
                    b"asymmetric",
                    b"tf_crop_and_resize",
                    b"DCR",
                    b"CRD",
                    b"sum",
                    b"max",
                    b"none",
                ])?)
                .to_vec(),
            };
        }
        _ if !n.attribute.is_empty() => {
            let i = u.choose_index(n.attribute.len())?;
            n.attribute[i].name = edge::name(u, &[])?;
        }
        _ => {}
    }
    Ok(())
}

/// Edits a tensor-valued attribute (Constant's and ConstantOfShape's `value`).
pub fn attr_tensor(u: &mut Unstructured, g: &mut GraphProto, focus: &mut String) -> Result<()> {
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    *focus = n.op_type.clone();
    let Some(a) = pick_attr(u, n, &[AttributeType::Tensor])? else {
        return Ok(());
    };
    let t = a.t.get_or_insert_with(TensorProto::default);
    super::tensor::tensor(u, t)
}

/// Points a node input at another value, at nothing, or at a value defined later.
pub fn rewire(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    let names = value_names(g);
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    if n.input.is_empty() {
        n.input.push(edge::name(u, &names)?);
        return Ok(());
    }
    let i = u.choose_index(n.input.len())?;
    n.input[i] = if u.ratio(1, 4)? {
        // Its own output: a cycle.
        n.output.first().cloned().unwrap_or_default()
    } else {
        edge::name(u, &names)?
    };
    Ok(())
}

/// Adds or removes inputs and outputs of a node.
pub fn arity(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    let names = value_names(g);
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    match u.int_in_range(0..=4u8)? {
        0 => {
            n.input.pop();
        }
        1 => {
            for _ in 0..u.int_in_range(1..=3)? {
                n.input.push(edge::name(u, &names)?);
            }
        }
        2 if !n.input.is_empty() => {
            // An optional input left out, whether or not the op allows it.
            let i = u.choose_index(n.input.len())?;
            n.input[i] = String::new();
        }
        3 => {
            n.output.pop();
        }
        _ => {
            let extra = format!("{}_extra{}", n.name, n.output.len());
            n.output.push(extra);
        }
    }
    Ok(())
}

pub fn op_swap(
    u: &mut Unstructured,
    g: &mut GraphProto,
    pools: &Pools,
    focus: &mut String,
) -> Result<()> {
    let Some(n) = pick_node(u, g)? else {
        return Ok(());
    };
    match u.int_in_range(0..=7u8)? {
        0 => n.op_type = (*u.choose(&["", "NoSuchOp", "add", "Add\0"])?).into(),
        1 => n.domain = (*u.choose(&["ai.onnx.ml", "com.microsoft", "ai.onnx", "x.y"])?).into(),
        _ if !pools.ops.is_empty() => n.op_type = u.choose(&pools.ops)?.clone(),
        _ => {}
    }
    *focus = n.op_type.clone();
    Ok(())
}

/// Two of something that must be unique: a node's output, an initializer, an input, an output.
pub fn duplicate(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    match u.int_in_range(0..=3u8)? {
        0 if !g.node.is_empty() => {
            let i = u.choose_index(g.node.len())?;
            let n = g.node[i].clone();
            g.node.push(n);
        }
        1 if !g.initializer.is_empty() => {
            let i = u.choose_index(g.initializer.len())?;
            let mut t = g.initializer[i].clone();
            super::tensor::tensor(u, &mut t)?;
            g.initializer.push(t);
        }
        2 if !g.input.is_empty() => {
            let i = u.choose_index(g.input.len())?;
            let v = g.input[i].clone();
            g.input.push(v);
        }
        _ if !g.output.is_empty() => {
            let i = u.choose_index(g.output.len())?;
            let v = g.output[i].clone();
            g.output.push(v);
        }
        _ => {}
    }
    Ok(())
}

/// Renames a value everywhere it is used, to a name output files or logs trip on, or renames
/// one use only (a dangling reference).
pub fn names(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    let names = value_names(g);
    if names.is_empty() {
        return Ok(());
    }
    let from = u.choose(&names)?.clone();
    let to = edge::name(u, &names)?;
    let everywhere = u.ratio(3, 4)?;
    let rename = |s: &mut String| {
        if *s == from {
            *s = to.clone();
        }
    };
    for n in &mut g.node {
        n.input.iter_mut().for_each(rename);
        if everywhere {
            n.output.iter_mut().for_each(rename);
        }
    }
    if everywhere {
        g.input.iter_mut().for_each(|v| rename(&mut v.name));
        g.initializer.iter_mut().for_each(|t| rename(&mut t.name));
        g.output.iter_mut().for_each(|v| rename(&mut v.name));
    }
    Ok(())
}

/// Appends a node of another seed, fed from this graph's values, its output made a graph
/// output: operators meet inputs their tests never gave them.
pub fn splice(
    u: &mut Unstructured,
    g: &mut GraphProto,
    pools: &Pools,
    focus: &mut String,
) -> Result<()> {
    if pools.nodes.is_empty() {
        return Ok(());
    }
    let names = value_names(g);
    let mut n = u.choose(&pools.nodes)?.clone();
    for input in &mut n.input {
        if !input.is_empty() && !names.is_empty() {
            *input = u.choose(&names)?.clone();
        }
    }
    for (i, out) in n.output.iter_mut().enumerate() {
        *out = format!("spliced_{}_{i}", g.node.len());
    }
    if let Some(first) = n.output.first() {
        g.output.push(crate::proto::ValueInfoProto {
            name: first.clone(),
            ..Default::default()
        });
    }
    *focus = n.op_type.clone();
    g.node.push(n);
    Ok(())
}

/// Swaps two nodes, breaking the topological order a producer must keep.
pub fn reorder(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    if g.node.len() >= 2 {
        let a = u.choose_index(g.node.len())?;
        let b = u.choose_index(g.node.len())?;
        g.node.swap(a, b);
    }
    Ok(())
}

/// Feeds a node input from an op whose output size comes from data: ConstantOfShape of an
/// edge shape, Range of edge bounds, Expand or Tile by edge counts. The runtime must refuse
/// sizes past its budget before allocating anything.
pub fn sizer(u: &mut Unstructured, g: &mut GraphProto, focus: &mut String) -> Result<()> {
    let id = g.node.len();
    let out = format!("sized_{id}");
    let int_const = |name: &str, dims: Vec<i64>, values: Vec<i64>| TensorProto {
        name: name.into(),
        dims,
        data_type: 7,
        int64_data: values,
        ..Default::default()
    };
    let (op, inputs, consts) = match u.int_in_range(0..=3u8)? {
        0 => {
            let rank = u.int_in_range(1..=3)?;
            let dims = (0..rank)
                .map(|_| edge::dim(u))
                .collect::<Result<Vec<_>>>()?;
            let shape = int_const(&format!("shape_{id}"), vec![rank], dims);
            ("ConstantOfShape", vec![shape.name.clone()], vec![shape])
        }
        1 => {
            let mut scalars = Vec::new();
            let float = u.ratio(1, 2)?;
            for k in ["start", "limit", "delta"] {
                let name = format!("{k}_{id}");
                scalars.push(if float {
                    TensorProto {
                        name,
                        data_type: 1,
                        float_data: vec![edge::float(u)? as f32],
                        ..Default::default()
                    }
                } else {
                    int_const(&name, vec![], vec![edge::int(u)?])
                });
            }
            let names = scalars.iter().map(|t| t.name.clone()).collect();
            ("Range", names, scalars)
        }
        op => {
            let data = TensorProto {
                name: format!("data_{id}"),
                dims: vec![2, 2],
                data_type: 1,
                float_data: vec![1.0, 2.0, 3.0, 4.0],
                ..Default::default()
            };
            let rank = if u.ratio(3, 4)? {
                2
            } else {
                u.int_in_range(0..=4)?
            };
            let counts = (0..rank)
                .map(|_| edge::dim(u))
                .collect::<Result<Vec<_>>>()?;
            let counts = int_const(&format!("counts_{id}"), vec![rank], counts);
            let name = if op == 2 { "Expand" } else { "Tile" };
            (
                name,
                vec![data.name.clone(), counts.name.clone()],
                vec![data, counts],
            )
        }
    };
    g.initializer.extend(consts);
    g.node.push(NodeProto {
        op_type: op.into(),
        name: format!("sizer_{id}"),
        input: inputs,
        output: vec![out.clone()],
        ..Default::default()
    });
    g.output.push(crate::proto::ValueInfoProto {
        name: out,
        ..Default::default()
    });
    *focus = op.into();
    Ok(())
}
