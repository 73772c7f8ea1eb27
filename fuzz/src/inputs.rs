//! Inputs for a mutated model: the seed's own where they still fit, else made from the
//! declared types; then, sometimes, wrong ones (edge values, other shapes and types, missing
//! or unknown names).

use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use vkml::{DType, Tensor};

use crate::proto::tensor_shape_proto::dimension;
use crate::proto::type_proto::Value;
use crate::proto::{GraphProto, ValueInfoProto};
use crate::values;

pub fn make(
    u: &mut Unstructured,
    graph: Option<&GraphProto>,
    seed: Option<&[Tensor]>,
) -> Result<Vec<(String, Tensor)>> {
    let Some(g) = graph else {
        return Ok(Vec::new());
    };
    let stored: std::collections::BTreeSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut out = Vec::new();
    for (i, v) in g
        .input
        .iter()
        .filter(|v| !stored.contains(v.name.as_str()))
        .enumerate()
    {
        let t = match seed.and_then(|s| s.get(i)) {
            Some(t) if u.ratio(3, 4)? => t.clone(),
            _ => declared(u, v)?,
        };
        out.push((v.name.clone(), t));
    }
    if u.ratio(1, 3)? {
        wrong(u, &mut out)?;
    }
    Ok(out)
}

fn tensor(u: &mut Unstructured, dtype: DType, shape: Vec<usize>) -> Result<Tensor> {
    let n = shape.iter().product::<usize>();
    if dtype == DType::String {
        let words = ["", "a", "Monday", "naïve", " two  words ", "x-y-z"];
        let text = (0..n)
            .map(|_| u.choose(&words).copied())
            .collect::<Result<Vec<_>>>()?;
        return Ok(Tensor::from_strings(shape, &text));
    }
    let data = values::elements(u, dtype, n)?;
    Ok(Tensor::from_bytes(dtype, shape, Bytes::from(data)).expect("sizes agree by construction"))
}

/// A tensor of the declared type, symbolic and absurd sizes replaced by small ones.
fn declared(u: &mut Unstructured, v: &ValueInfoProto) -> Result<Tensor> {
    let Some(Value::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        let dtype = values::dtype(u)?;
        let shape = values::shape(u)?;
        return tensor(u, dtype, shape);
    };
    let dtype = DType::from_onnx_code(t.elem_type).unwrap_or(DType::F32);
    let shape = match &t.shape {
        None => values::shape(u)?,
        Some(s) => {
            let mut shape = Vec::new();
            for d in &s.dim {
                shape.push(match d.value {
                    Some(dimension::Value::DimValue(n)) if (0..=64).contains(&n) => n as usize,
                    _ => u.int_in_range(1..=4)?,
                });
            }
            if shape.iter().product::<usize>() > values::MAX_ELEMENTS {
                shape.iter_mut().for_each(|d| *d = (*d).min(2));
            }
            shape
        }
    };
    tensor(u, dtype, shape)
}

fn wrong(u: &mut Unstructured, inputs: &mut Vec<(String, Tensor)>) -> Result<()> {
    if inputs.is_empty() {
        let dtype = values::dtype(u)?;
        inputs.push(("unknown".into(), tensor(u, dtype, vec![1])?));
        return Ok(());
    }
    let i = u.choose_index(inputs.len())?;
    let (name, t) = &mut inputs[i];
    match u.int_in_range(0..=5u8)? {
        // A string's bytes are offsets and text: its edge values are other strings.
        0 if t.dtype() == DType::String => {
            *t = tensor(u, DType::String, t.shape().to_vec())?;
        }
        0 => {
            // Edge values in place: indices out of range, NaN, the limits of the type.
            let mut data = t.bytes().to_vec();
            let size = t.dtype().size();
            for _ in 0..u.int_in_range(1..=4)? {
                if data.is_empty() {
                    break;
                }
                let at = u.choose_index(data.len() / size)? * size;
                data[at..at + size].copy_from_slice(&values::element(u, t.dtype())?);
            }
            *t = Tensor::from_bytes(t.dtype(), t.shape().to_vec(), Bytes::from(data))
                .expect("same size");
        }
        1 => {
            let shape = values::shape(u)?;
            *t = tensor(u, t.dtype(), shape)?;
        }
        2 => {
            let dtype = values::dtype(u)?;
            *t = tensor(u, dtype, t.shape().to_vec())?;
        }
        3 => {
            inputs.remove(i);
        }
        4 => *name = crate::edge::name(u, &[])?,
        _ => {
            let extra = inputs[i].1.clone();
            inputs.push((inputs[i].0.clone(), extra));
        }
    }
    Ok(())
}
