//! A protobuf mutator that knows the wire format but no schema: it parses a message into
//! fields, edits one (a varint to an edge value, a nested message recursively, a string to a
//! hostile one), drops, repeats or adds fields, and writes it back. It works on every message
//! of the protocol, present and future, and keeps most of a message valid so that the edit
//! reaches code past the decoder.

use arbitrary::{Result, Unstructured};

use crate::edge;

#[derive(Clone, Debug)]
enum Field {
    Varint(u32, u64),
    Fixed64(u32, u64),
    Bytes(u32, Vec<u8>),
    Fixed32(u32, u32),
}

fn varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn parse(data: &[u8]) -> Option<Vec<Field>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < data.len() {
        let key = varint(data, &mut at)?;
        let num = u32::try_from(key >> 3).ok().filter(|&n| n > 0)?;
        out.push(match key & 7 {
            0 => Field::Varint(num, varint(data, &mut at)?),
            1 => {
                let b = data.get(at..at + 8)?;
                at += 8;
                Field::Fixed64(num, u64::from_le_bytes(b.try_into().ok()?))
            }
            2 => {
                let len = usize::try_from(varint(data, &mut at)?).ok()?;
                let b = data.get(at..at.checked_add(len)?)?;
                at += len;
                Field::Bytes(num, b.to_vec())
            }
            5 => {
                let b = data.get(at..at + 4)?;
                at += 4;
                Field::Fixed32(num, u32::from_le_bytes(b.try_into().ok()?))
            }
            _ => return None,
        });
    }
    Some(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn write(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        match f {
            Field::Varint(n, v) => {
                put_varint(&mut out, u64::from(*n) << 3);
                put_varint(&mut out, *v);
            }
            Field::Fixed64(n, v) => {
                put_varint(&mut out, (u64::from(*n) << 3) | 1);
                out.extend(v.to_le_bytes());
            }
            Field::Bytes(n, b) => {
                put_varint(&mut out, (u64::from(*n) << 3) | 2);
                put_varint(&mut out, b.len() as u64);
                out.extend(b);
            }
            Field::Fixed32(n, v) => {
                put_varint(&mut out, (u64::from(*n) << 3) | 5);
                out.extend(v.to_le_bytes());
            }
        }
    }
    out
}

/// One edit of an encoded message, nested messages included (to `depth` levels).
pub fn mutate(u: &mut Unstructured, body: &[u8], depth: u32) -> Result<Vec<u8>> {
    let Some(mut fields) = parse(body) else {
        return bytes(u, body.to_vec());
    };
    if fields.is_empty() || u.ratio(1, 6)? {
        fields.push(new_field(u)?);
        return Ok(write(&fields));
    }
    let i = u.choose_index(fields.len())?;
    match u.int_in_range(0..=5u8)? {
        0 => {
            fields.remove(i);
        }
        1 => {
            let f = fields[i].clone();
            fields.insert(i, f);
        }
        _ => {
            fields[i] = match std::mem::replace(&mut fields[i], Field::Varint(1, 0)) {
                Field::Varint(n, _) => Field::Varint(n, edge::int(u)? as u64),
                Field::Fixed64(n, _) => Field::Fixed64(n, edge::float(u)?.to_bits()),
                Field::Fixed32(n, _) => Field::Fixed32(n, (edge::float(u)? as f32).to_bits()),
                Field::Bytes(n, b) => {
                    let nested = depth > 0 && !b.is_empty() && parse(&b).is_some();
                    if nested && u.ratio(3, 4)? {
                        Field::Bytes(n, mutate(u, &b, depth - 1)?)
                    } else {
                        Field::Bytes(n, bytes(u, b)?)
                    }
                }
            };
        }
    }
    Ok(write(&fields))
}

fn new_field(u: &mut Unstructured) -> Result<Field> {
    let n = u.int_in_range(1..=20)?;
    Ok(match u.int_in_range(0..=2u8)? {
        0 => Field::Varint(n, edge::int(u)? as u64),
        1 => Field::Bytes(n, edge::name(u, &[])?.into_bytes()),
        _ => Field::Fixed32(n, u.arbitrary()?),
    })
}

/// A string or bytes field replaced: a hostile name, truncated, or bits flipped.
fn bytes(u: &mut Unstructured, mut b: Vec<u8>) -> Result<Vec<u8>> {
    match u.int_in_range(0..=2u8)? {
        0 => Ok(edge::name(u, &[])?.into_bytes()),
        1 => {
            let keep = u.int_in_range(0..=b.len())?;
            b.truncate(keep);
            Ok(b)
        }
        _ => {
            if !b.is_empty() {
                let at = u.choose_index(b.len())?;
                b[at] ^= 1 << u.int_in_range(0..=7)?;
            }
            Ok(b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_write_are_inverse_on_a_prost_message() {
        use prost::Message;
        let m = crate::proto::TensorProto {
            dims: vec![2, 3, -1],
            data_type: 7,
            name: "x".into(),
            float_data: vec![1.5, f32::NAN],
            raw_data: vec![1, 2, 3],
            ..Default::default()
        };
        let bytes = m.encode_to_vec();
        let fields = parse(&bytes).expect("a valid encoding parses");
        assert_eq!(write(&fields), bytes);
    }

    #[test]
    fn mutation_changes_the_message_and_keeps_it_decodable_mostly() {
        use prost::Message;
        let m = crate::proto::TensorProto {
            dims: vec![2, 3],
            data_type: 1,
            name: "weights".into(),
            ..Default::default()
        };
        let bytes = m.encode_to_vec();
        let mut changed = 0;
        let mut decodable = 0;
        for seed in 0u8..200 {
            let data: Vec<u8> = (0..64u8)
                .map(|i| i.wrapping_mul(31).wrapping_add(seed))
                .collect();
            let out = mutate(&mut Unstructured::new(&data), &bytes, 2).expect("bytes enough");
            changed += usize::from(out != bytes);
            decodable += usize::from(crate::proto::TensorProto::decode(out.as_slice()).is_ok());
        }
        assert!(
            changed > 150,
            "only {changed} of 200 mutations changed the message"
        );
        assert!(
            decodable > 100,
            "only {decodable} of 200 mutations still decode"
        );
    }
}
