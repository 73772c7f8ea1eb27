//! ai.onnx.ml LabelEncoder (versions 1 to 4): each element looked up among the keys and
//! replaced by the value at the same position, or by the default. Keys and values are
//! strings, int64s, floats or (version 4) tensors of any of those types; CPU only, as the
//! lookup is a hash of arbitrary keys.

use std::collections::BTreeMap;

use super::ml::ML_DOMAIN;
use super::util::req;
use super::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::attrs::AttrValue;
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add_in(ML_DOMAIN, "LabelEncoder", LabelEncoder::build);
}

/// A key as compared: floats by their bits, every NaN one key (as ONNX asks).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    S(String),
    I(i64),
    F(u64),
}

fn float_key(x: f64) -> Key {
    Key::F(if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        (x + 0.0).to_bits()
    })
}

#[derive(Debug)]
struct LabelEncoder {
    keys_dtype: DType,
    index: BTreeMap<Key, usize>,
    /// The values, then the default: one tensor, so the output gathers from it.
    values: Tensor,
}

/// A typed list among `names` (strings, int64s, floats, tensor), as a tensor.
fn list(a: &crate::Attrs, names: [&str; 4]) -> Result<Option<Tensor>, OpError> {
    let [s, i, f, t] = names;
    Ok(match (a.get(s), a.get(i), a.get(f), a.get(t)) {
        (Some(AttrValue::Strings(v)), ..) => Some(Tensor::from_strings(vec![v.len()], v)),
        (_, Some(AttrValue::Ints(v)), ..) => Some(Tensor::from_vec(vec![v.len()], v.clone())),
        (_, _, Some(AttrValue::Floats(v)), _) => Some(Tensor::from_vec(vec![v.len()], v.clone())),
        (_, _, _, Some(AttrValue::Tensor(t))) => {
            let n = t.shape().iter().product();
            Some(
                t.reshaped(vec![n])
                    .map_err(|e| OpError::invalid(e.to_string()))?,
            )
        }
        _ => None,
    })
}

fn keys_of(t: &Tensor) -> Result<Vec<Key>, OpError> {
    let bad = |e: crate::TensorError| OpError::invalid(format!("LabelEncoder: {e}"));
    Ok(match t.dtype() {
        DType::String => t
            .strings()
            .map_err(bad)?
            .into_iter()
            .map(|s| Key::S(s.into()))
            .collect(),
        d if d.is_float() => t
            .to_f64_vec()
            .map_err(bad)?
            .into_iter()
            .map(float_key)
            .collect(),
        _ => t
            .to_i64_vec()
            .map_err(bad)?
            .into_iter()
            .map(Key::I)
            .collect(),
    })
}

/// The default for values of `dtype`: the attribute's, else ONNX's ("_Unused", -1, -0.0).
fn default_of(a: &crate::Attrs, dtype: DType) -> Result<Tensor, OpError> {
    if let Some(t) = a.tensor_opt("default_tensor")? {
        if t.dtype() != dtype || t.shape().iter().product::<usize>() != 1 {
            return Err(OpError::invalid(format!(
                "LabelEncoder: default_tensor is {t:?}; it must be one {dtype}"
            )));
        }
        return t
            .reshaped(vec![1])
            .map_err(|e| OpError::invalid(e.to_string()));
    }
    Ok(match dtype {
        DType::String => Tensor::from_strings(vec![1], &[a.string("default_string", "_Unused")?]),
        DType::F32 => Tensor::from_vec(vec![1], vec![a.float("default_float", -0.0)?]),
        d if d.is_float() => super::numeric::from_f64(d, vec![1], vec![-0.0])?,
        d => super::numeric::from_i64(d, vec![1], vec![a.int("default_int64", -1)?])?,
    })
}

/// `values` with `default` after them (both 1-D, of one type).
fn append(values: &Tensor, default: &Tensor) -> Result<Tensor, OpError> {
    let bad = |e: crate::TensorError| OpError::invalid(format!("LabelEncoder: {e}"));
    let n = values.shape()[0] + 1;
    Ok(match values.dtype() {
        DType::String => {
            let mut v = values.strings().map_err(bad)?;
            v.extend(default.strings().map_err(bad)?);
            Tensor::from_strings(vec![n], &v)
        }
        d if d.is_float() => {
            let mut v = values.to_f64_vec().map_err(bad)?;
            v.extend(default.to_f64_vec().map_err(bad)?);
            super::numeric::from_f64(d, vec![n], v)?
        }
        d => {
            let mut v = values.to_i64_vec().map_err(bad)?;
            v.extend(default.to_i64_vec().map_err(bad)?);
            super::numeric::from_i64(d, vec![n], v)?
        }
    })
}

impl LabelEncoder {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let a = spec.attrs;
        let keys = list(
            a,
            ["keys_strings", "keys_int64s", "keys_floats", "keys_tensor"],
        )?
        .ok_or_else(|| OpError::invalid("LabelEncoder has no keys"))?;
        let values = list(
            a,
            [
                "values_strings",
                "values_int64s",
                "values_floats",
                "values_tensor",
            ],
        )?
        .ok_or_else(|| OpError::invalid("LabelEncoder has no values"))?;
        let (nk, nv) = (keys.shape()[0], values.shape()[0]);
        if nk != nv {
            return Err(OpError::invalid(format!(
                "LabelEncoder has {nk} keys and {nv} values; they pair up one to one"
            )));
        }
        let mut index = BTreeMap::new();
        for (i, k) in keys_of(&keys)?.into_iter().enumerate() {
            // The first of repeated keys wins.
            index.entry(k).or_insert(i);
        }
        let default = default_of(a, values.dtype())?;
        let values = append(&values, &default)?;
        Ok(Box::new(LabelEncoder {
            keys_dtype: keys.dtype(),
            index,
            values,
        }))
    }
}

impl Op for LabelEncoder {
    fn strings(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let same = x.dtype == self.keys_dtype
            || (x.dtype.is_float() && self.keys_dtype.is_float())
            || (!matches!(x.dtype, DType::String)
                && !x.dtype.is_float()
                && self.keys_dtype == DType::I64);
        if !same {
            return Err(OpError::invalid(format!(
                "LabelEncoder: X is {}, its keys are {}",
                x.dtype, self.keys_dtype
            )));
        }
        Ok(vec![ValueType::new(self.values.dtype(), x.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let missing = self.values.shape()[0] - 1;
        let at: Vec<usize> = keys_of(req(inputs, 0)?)?
            .iter()
            .map(|k| self.index.get(k).copied().unwrap_or(missing))
            .collect();
        let shape = outputs[0].shape.clone();
        let bad = |e: crate::TensorError| OpError::invalid(format!("LabelEncoder: {e}"));
        let y = match self.values.dtype() {
            DType::String => {
                let v = self.values.strings().map_err(bad)?;
                Tensor::from_strings(shape, &at.iter().map(|&i| v[i]).collect::<Vec<_>>())
            }
            d if d.is_float() => {
                let v = self.values.to_f64_vec().map_err(bad)?;
                super::numeric::from_f64(d, shape, at.iter().map(|&i| v[i]).collect())?
            }
            d => {
                let v = self.values.to_i64_vec().map_err(bad)?;
                super::numeric::from_i64(d, shape, at.iter().map(|&i| v[i]).collect())?
            }
        };
        Ok(vec![y])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attrs;

    fn encode(attrs: Vec<(&str, AttrValue)>, x: &Tensor) -> Tensor {
        let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect());
        let spec = NodeSpec {
            name: "le",
            op_type: "LabelEncoder",
            attrs: &attrs,
            opset: 4,
            num_inputs: 1,
            num_outputs: 1,
        };
        let o = LabelEncoder::build(&spec).unwrap();
        let ty = ValueType::of(x);
        let out = o
            .infer(&[Some(InferInput {
                ty: &ty,
                value: None,
            })])
            .unwrap();
        o.run_cpu(&[Some(x)], &out).unwrap().remove(0)
    }

    #[test]
    fn strings_to_ints_with_a_default() {
        let attrs = vec![
            (
                "keys_strings",
                AttrValue::Strings(vec!["a".into(), "b".into()]),
            ),
            ("values_int64s", AttrValue::Ints(vec![7, 8])),
        ];
        let x = Tensor::from_strings(vec![2, 2], &["b", "z", "a", "b"]);
        let y = encode(attrs, &x);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_i64_vec().unwrap(), vec![8, -1, 7, 8]);
    }

    #[test]
    fn float_keys_match_nan_and_give_strings() {
        let attrs = vec![
            ("keys_floats", AttrValue::Floats(vec![f32::NAN, 1.5])),
            (
                "values_strings",
                AttrValue::Strings(vec!["nan".into(), "x".into()]),
            ),
            ("default_string", AttrValue::String("?".into())),
        ];
        let x = Tensor::from_vec(vec![3], vec![1.5f32, f32::NAN, 2.0]);
        let y = encode(attrs, &x);
        assert_eq!(y.strings().unwrap(), ["x", "nan", "?"]);
    }
}
