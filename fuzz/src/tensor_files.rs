//! Tensor files (.npy and .pb) built field by field: a header whose every part may be wrong
//! (magic, version, header length, dtype, order, shape) over data of any length.

use arbitrary::{Result, Unstructured};
use prost::Message;

use crate::proto::TensorProto;
use crate::{edge, mutate, values};

/// A file name (its extension picks the reader) and its bytes.
pub fn make(u: &mut Unstructured) -> Result<(&'static str, Vec<u8>)> {
    if u.ratio(1, 2)? {
        Ok(("input.npy", npy(u)?))
    } else {
        Ok(("input.pb", pb(u)?))
    }
}

fn npy(u: &mut Unstructured) -> Result<Vec<u8>> {
    let descr = *u.choose(&[
        "<f4", "<f8", "<f2", "|u1", "|i1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "|b1", "<V2",
        ">f4", "<c8", "<U4", "|O", "", "<f4'", "f4",
    ])?;
    let fortran = *u.choose(&["False", "True", "0", ""])?;
    let rank = u.int_in_range(0..=4)?;
    let dims = (0..rank)
        .map(|_| edge::dim(u))
        .collect::<Result<Vec<_>>>()?;
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!(
            "({})",
            dims.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
    if u.ratio(1, 8)? {
        dict = dict.replace('\'', "\"");
    }
    if u.ratio(1, 8)? {
        let cut = u.int_in_range(0..=dict.len())?;
        dict.truncate(cut);
    }
    dict.push('\n');
    let major: u8 = *u.choose(&[1, 2, 3, 0, 9])?;
    let mut out = b"\x93NUMPY".to_vec();
    if u.ratio(1, 16)? {
        out[1] = b'X';
    }
    out.extend([major, 0]);
    let len = if u.ratio(7, 8)? {
        dict.len() as u64
    } else {
        edge::int(u)? as u64
    };
    if major == 1 {
        out.extend((len as u16).to_le_bytes());
    } else {
        out.extend((len as u32).to_le_bytes());
    }
    out.extend(dict.as_bytes());
    let n = dims
        .iter()
        .map(|&d| d.clamp(0, 16) as usize)
        .product::<usize>()
        .min(values::MAX_ELEMENTS);
    let data = values::elements(u, vkml::DType::F32, n)?;
    let keep = if u.ratio(3, 4)? {
        data.len()
    } else {
        u.int_in_range(0..=data.len())?
    };
    out.extend(&data[..keep]);
    Ok(out)
}

fn pb(u: &mut Unstructured) -> Result<Vec<u8>> {
    let dtype = values::dtype(u)?;
    let shape = values::shape(u)?;
    let n = shape.iter().product::<usize>();
    let mut t = TensorProto {
        name: edge::name(u, &[])?,
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: dtype.onnx_code(),
        raw_data: vkml::lowp::pack(dtype, &values::elements(u, dtype, n)?),
        ..Default::default()
    };
    for _ in 0..u.int_in_range(0..=3)? {
        mutate::tensor(u, &mut t)?;
    }
    Ok(t.encode_to_vec())
}
