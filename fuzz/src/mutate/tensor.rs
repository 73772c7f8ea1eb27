//! Mutations of stored tensors (initializers, tensor attributes) and of where their data
//! lives (external data files).

use arbitrary::{Result, Unstructured};

use crate::proto::{GraphProto, StringStringEntryProto, TensorProto};
use crate::{edge, values};

/// A file the mutated model refers to, made next to it before the case runs.
#[derive(Debug, Clone)]
pub enum SideFile {
    Bytes {
        name: String,
        data: Vec<u8>,
    },
    /// A named pipe: opening it for reading blocks until someone writes.
    Fifo {
        name: String,
    },
}

pub fn initializer(u: &mut Unstructured, g: &mut GraphProto) -> Result<()> {
    if g.initializer.is_empty() {
        return Ok(());
    }
    let i = u.choose_index(g.initializer.len())?;
    tensor(u, &mut g.initializer[i])
}

/// Dims that disagree with the data, another type, truncated or extended data, data moved
/// between the typed fields and `raw_data`, edge values in place.
pub fn tensor(u: &mut Unstructured, t: &mut TensorProto) -> Result<()> {
    match u.int_in_range(0..=6u8)? {
        0 => {
            if t.dims.is_empty() || u.ratio(1, 3)? {
                t.dims.push(edge::dim(u)?);
            } else {
                let i = u.choose_index(t.dims.len())?;
                t.dims[i] = edge::dim(u)?;
            }
        }
        1 => t.dims.clear(),
        2 => t.data_type = values::dtype_code(u)?,
        3 => {
            let keep = u.int_in_range(0..=t.raw_data.len())?;
            t.raw_data.truncate(keep);
        }
        4 => {
            let extra = u.int_in_range(1..=16)?;
            t.raw_data.extend(std::iter::repeat_n(0xa5, extra));
        }
        5 => {
            // The values, refilled: typed fields when the type has one, else raw bytes.
            let n = t
                .dims
                .iter()
                .map(|&d| d.clamp(0, 64) as usize)
                .product::<usize>();
            let n = n.min(values::MAX_ELEMENTS);
            match vkml::DType::from_onnx_code(t.data_type) {
                Some(dtype) => {
                    t.raw_data = vkml::lowp::pack(dtype, &values::elements(u, dtype, n)?);
                    t.float_data.clear();
                    t.int64_data.clear();
                    t.int32_data.clear();
                    t.double_data.clear();
                    t.uint64_data.clear();
                }
                None => t.int64_data = (0..n).map(|_| edge::int(u)).collect::<Result<_>>()?,
            }
        }
        _ => {
            // Both kinds of storage at once, disagreeing.
            t.float_data.push(edge::float(u)? as f32);
            t.int64_data.push(edge::int(u)?);
        }
    }
    Ok(())
}

/// Moves an initializer's data to an external file with a layout drawn from the edges:
/// offsets and lengths past the end or overflowing, paths that leave the model's folder,
/// a missing file, a directory, a named pipe.
pub fn external(u: &mut Unstructured, g: &mut GraphProto, files: &mut Vec<SideFile>) -> Result<()> {
    if g.initializer.is_empty() {
        return Ok(());
    }
    let i = u.choose_index(g.initializer.len())?;
    let t = &mut g.initializer[i];
    let data = std::mem::take(&mut t.raw_data);
    let pad = u.int_in_range(0..=64usize)?;
    let mut file = vec![0u8; pad];
    file.extend(&data);
    if u.ratio(1, 4)? {
        file.truncate(u.int_in_range(0..=file.len())?);
    }
    let location: String = match u.int_in_range(0..=9u8)? {
        0 => "missing.bin".into(),
        1 => "../weights.bin".into(),
        2 => "/etc/hostname".into(),
        3 => ".".into(),
        4 => {
            files.push(SideFile::Fifo {
                name: "pipe.bin".into(),
            });
            "pipe.bin".into()
        }
        5 => "weights.bin\0x".into(),
        _ => "weights.bin".into(),
    };
    files.push(SideFile::Bytes {
        name: "weights.bin".into(),
        data: file,
    });
    let offset = if u.ratio(3, 4)? {
        pad as i64
    } else {
        edge::int(u)?
    };
    let length = if u.ratio(3, 4)? {
        data.len() as i64
    } else {
        edge::int(u)?
    };
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    t.data_location = 1;
    t.external_data = vec![entry("location", location)];
    if u.ratio(7, 8)? {
        t.external_data.push(entry("offset", offset.to_string()));
    }
    if u.ratio(7, 8)? {
        t.external_data.push(entry("length", length.to_string()));
    }
    if u.ratio(1, 8)? {
        t.external_data.push(entry("offset", "twelve".into()));
    }
    Ok(())
}
