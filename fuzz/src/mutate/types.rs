//! Mutations of declared types (graph inputs, outputs, value infos) and of the model's
//! header (opsets, local functions).

use arbitrary::{Result, Unstructured};

use super::Pools;
use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::type_proto::{self, Value};
use crate::proto::{
    FunctionProto, GraphProto, ModelProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
};
use crate::{edge, values};

pub fn value_info(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    let lists = [g.input.len(), g.output.len(), g.value_info.len()];
    let total: usize = lists.iter().sum();
    if total == 0 {
        return Ok(());
    }
    let k = u.choose_index(total)?;
    let v = if k < lists[0] {
        &mut g.input[k]
    } else if k < lists[0] + lists[1] {
        &mut g.output[k - lists[0]]
    } else {
        &mut g.value_info[k - lists[0] - lists[1]]
    };
    let ty = v.r#type.get_or_insert_with(TypeProto::default);
    match u.int_in_range(0..=5u8)? {
        0 => v.r#type = None,
        1 => {
            ty.value = Some(Value::SequenceType(Box::new(type_proto::Sequence {
                elem_type: Some(Box::new(ty.clone())),
            })));
        }
        _ => {
            let tensor = match &mut ty.value {
                Some(Value::TensorType(t)) => t,
                _ => {
                    ty.value = Some(Value::TensorType(type_proto::Tensor::default()));
                    let Some(Value::TensorType(t)) = &mut ty.value else {
                        unreachable!("just set")
                    };
                    t
                }
            };
            if u.ratio(1, 3)? {
                tensor.elem_type = values::dtype_code(u)?;
            } else {
                let shape = tensor.shape.get_or_insert_with(TensorShapeProto::default);
                let dim = Dimension {
                    value: Some(match u.int_in_range(0..=3u8)? {
                        0 => dimension::Value::DimParam(edge::name(u, &[])?),
                        _ => dimension::Value::DimValue(edge::dim(u)?),
                    }),
                    ..Default::default()
                };
                if shape.dim.is_empty() || u.ratio(1, 4)? {
                    shape.dim.push(dim);
                } else if u.ratio(1, 4)? {
                    shape.dim.pop();
                } else {
                    let i = u.choose_index(shape.dim.len())?;
                    shape.dim[i] = dim;
                }
            }
        }
    }
    Ok(())
}

pub fn opset(u: &mut Unstructured, model: &mut ModelProto) -> Result<()> {
    match u.int_in_range(0..=4u8)? {
        0 => model.opset_import.clear(),
        1 => model.ir_version = edge::int(u)?,
        2 => model.opset_import.push(OperatorSetIdProto {
            domain: (*u.choose(&["", "ai.onnx", "ai.onnx.ml", "com.microsoft", "??"])?).into(),
            version: edge::int(u)?,
        }),
        _ => {
            if let Some(o) = model.opset_import.first_mut() {
                o.version = if u.ratio(1, 2)? {
                    u.int_in_range(1..=24)?
                } else {
                    edge::int(u)?
                };
            }
        }
    }
    Ok(())
}

/// A model-local function named like a node's op, so that the node calls it.
pub fn functions(u: &mut Unstructured, model: &mut ModelProto, pools: &Pools) -> Result<()> {
    let Some(g) = model.graph.as_mut() else {
        return Ok(());
    };
    if g.node.is_empty() || pools.nodes.is_empty() {
        return Ok(());
    }
    let i = u.choose_index(g.node.len())?;
    let body = u.choose(&pools.nodes)?.clone();
    g.node[i].domain = "local".into();
    model.functions.push(FunctionProto {
        name: g.node[i].op_type.clone(),
        domain: "local".into(),
        input: body.input.clone(),
        output: body.output.clone(),
        node: vec![body],
        ..Default::default()
    });
    Ok(())
}
