//! Sequence, optional and map values, from protos built by hand: the declared type decides the
//! message, and a file that contradicts its declaration is an error saying how.

use bytes::Bytes;
use prost::Message;

use super::value::{MapKeys, Value, decode_value};
use crate::onnx::DeclaredType;
use crate::onnx::proto::{MapProto, OptionalProto, SequenceProto, TensorProto, ValueKind};
use crate::tensor::{DType, Tensor};

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const STRING: i32 = 8;

fn f32_tensor(values: &[f32], dims: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: FLOAT,
        float_data: values.to_vec(),
        ..Default::default()
    }
}

fn tensor_of(elem_type: i32) -> DeclaredType {
    DeclaredType::Tensor { elem_type }
}

fn seq_of(t: DeclaredType) -> DeclaredType {
    DeclaredType::Sequence(Box::new(t))
}

fn opt_of(t: DeclaredType) -> DeclaredType {
    DeclaredType::Optional(Box::new(t))
}

fn decode(msg: &impl Message, declared: &DeclaredType) -> Result<(String, Value), String> {
    decode_value(Bytes::from(msg.encode_to_vec()), declared, None)
}

fn float_seq(name: &str) -> SequenceProto {
    SequenceProto {
        name: name.into(),
        elem_type: ValueKind::Tensor as i32,
        tensor_values: vec![f32_tensor(&[1.0, 2.0], &[2]), f32_tensor(&[-3.5], &[1, 1])],
        ..Default::default()
    }
}

#[test]
fn a_sequence_of_tensors_keeps_order_shapes_and_name() {
    let (name, v) = decode(&float_seq("seq_in"), &seq_of(tensor_of(FLOAT))).unwrap();
    assert_eq!(name, "seq_in");
    assert_eq!(
        v,
        Value::Sequence(vec![
            Value::Tensor(Tensor::from_vec(vec![2], vec![1.0f32, 2.0])),
            Value::Tensor(Tensor::from_vec(vec![1, 1], vec![-3.5f32])),
        ])
    );
    assert_eq!(v.kind(), "sequence");
    assert!(v.as_tensor().is_none());
}

#[test]
fn an_empty_sequence_may_leave_its_kind_undefined() {
    let p = SequenceProto {
        name: "empty".into(),
        ..Default::default()
    };
    let (_, v) = decode(&p, &seq_of(tensor_of(FLOAT))).unwrap();
    assert_eq!(v, Value::Sequence(vec![]));
}

#[test]
fn nested_sequences_decode_recursively() {
    let p = SequenceProto {
        elem_type: ValueKind::Sequence as i32,
        sequence_values: vec![float_seq("a"), SequenceProto::default()],
        ..Default::default()
    };
    let (_, v) = decode(&p, &seq_of(seq_of(tensor_of(FLOAT)))).unwrap();
    let Value::Sequence(outer) = v else {
        panic!("not a sequence")
    };
    assert_eq!(outer.len(), 2);
    assert!(matches!(&outer[0], Value::Sequence(s) if s.len() == 2));
    assert_eq!(outer[1], Value::Sequence(vec![]));
}

#[test]
fn a_sequence_of_the_wrong_element_type_is_refused() {
    let e = decode(&float_seq("s"), &seq_of(tensor_of(INT64))).unwrap_err();
    assert!(
        e.contains("declares tensor(int64)") && e.contains("tensor(float)"),
        "{e}"
    );
    let e = decode(&float_seq("s"), &seq_of(seq_of(tensor_of(FLOAT)))).unwrap_err();
    assert!(e.contains("the file holds tensors"), "{e}");
}

#[test]
fn optionals_empty_and_full() {
    let empty = OptionalProto {
        name: "o".into(),
        ..Default::default()
    };
    let (name, v) = decode(&empty, &opt_of(tensor_of(FLOAT))).unwrap();
    assert_eq!((name.as_str(), v), ("o", Value::Optional(None)));

    let full = OptionalProto {
        elem_type: ValueKind::Tensor as i32,
        tensor_value: Some(TensorProto {
            dims: vec![3],
            data_type: INT64,
            int64_data: vec![4, -5, 6],
            ..Default::default()
        }),
        ..Default::default()
    };
    let (_, v) = decode(&full, &opt_of(tensor_of(INT64))).unwrap();
    assert_eq!(
        v,
        Value::Optional(Some(Box::new(Value::Tensor(Tensor::from_vec(
            vec![3],
            vec![4i64, -5, 6]
        )))))
    );

    let of_seq = OptionalProto {
        elem_type: ValueKind::Sequence as i32,
        sequence_value: Some(float_seq("inner")),
        ..Default::default()
    };
    let (_, v) = decode(&of_seq, &opt_of(seq_of(tensor_of(FLOAT)))).unwrap();
    assert!(
        matches!(v, Value::Optional(Some(b)) if matches!(*b, Value::Sequence(ref s) if s.len() == 2))
    );
}

#[test]
fn an_optional_that_says_tensor_but_has_none_is_an_error() {
    let p = OptionalProto {
        elem_type: ValueKind::Tensor as i32,
        ..Default::default()
    };
    let e = decode(&p, &opt_of(tensor_of(FLOAT))).unwrap_err();
    assert!(e.contains("has no value"), "{e}");
}

#[test]
fn maps_with_integer_and_string_keys() {
    let m = MapProto {
        name: "m".into(),
        key_type: INT64,
        keys: vec![10, -2],
        values: Some(SequenceProto {
            elem_type: ValueKind::Tensor as i32,
            tensor_values: vec![f32_tensor(&[0.5], &[1]), f32_tensor(&[0.25], &[1])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let declared = DeclaredType::Map {
        key_type: INT64,
        value: Box::new(tensor_of(FLOAT)),
    };
    let (name, v) = decode(&m, &declared).unwrap();
    assert_eq!(name, "m");
    let Value::Map { keys, values } = v else {
        panic!("not a map")
    };
    assert_eq!(
        keys,
        MapKeys::Ints {
            dtype: DType::I64,
            keys: vec![10, -2]
        }
    );
    assert_eq!(
        values[1],
        Value::Tensor(Tensor::from_vec(vec![1], vec![0.25f32]))
    );

    let s = MapProto {
        key_type: STRING,
        string_keys: vec![Bytes::from_static(b"cat")],
        values: Some(SequenceProto {
            elem_type: ValueKind::Tensor as i32,
            tensor_values: vec![f32_tensor(&[1.0], &[])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let declared = DeclaredType::Map {
        key_type: STRING,
        value: Box::new(tensor_of(FLOAT)),
    };
    let (_, v) = decode(&s, &declared).unwrap();
    assert!(matches!(v, Value::Map { keys: MapKeys::Strings(ref k), .. } if k == &["cat"]));
}

#[test]
fn a_map_with_more_keys_than_values_is_an_error() {
    let m = MapProto {
        key_type: INT64,
        keys: vec![1, 2],
        values: Some(SequenceProto {
            elem_type: ValueKind::Tensor as i32,
            tensor_values: vec![f32_tensor(&[1.0], &[1])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let declared = DeclaredType::Map {
        key_type: INT64,
        value: Box::new(tensor_of(FLOAT)),
    };
    let e = decode(&m, &declared).unwrap_err();
    assert!(e.contains("2 keys and 1 values"), "{e}");
}

#[test]
fn a_tensor_declared_as_tensor_decodes_and_a_wrong_dtype_is_named() {
    let t = f32_tensor(&[7.0], &[1]);
    let (_, v) = decode(&t, &tensor_of(FLOAT)).unwrap();
    assert_eq!(v, Value::Tensor(Tensor::from_vec(vec![1], vec![7.0f32])));
    let e = decode(&t, &tensor_of(INT64)).unwrap_err();
    assert!(
        e.contains("tensor(int64)") && e.contains("tensor(float)"),
        "{e}"
    );
}

#[test]
fn sparse_declarations_are_refused_by_name() {
    let e = decode(
        &f32_tensor(&[1.0], &[1]),
        &DeclaredType::SparseTensor { elem_type: FLOAT },
    )
    .unwrap_err();
    assert!(e.contains("sparse_tensor(float)"), "{e}");
}
