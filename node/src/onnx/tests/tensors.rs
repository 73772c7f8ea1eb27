//! TensorProto -> Tensor for every dtype, raw and typed, and the errors of bad tensors.
//! Expected bytes are written out by hand from the IEEE / two's-complement encodings.

use super::super::{LoadError, tensor_from_proto};
use super::raw_tensor;
use crate::onnx::proto::TensorProto;
use crate::tensor::DType;

fn typed(dtype: i32, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: "t".into(),
        data_type: dtype,
        dims: dims.to_vec(),
        ..Default::default()
    }
}

fn ok(t: &TensorProto) -> crate::tensor::Tensor {
    tensor_from_proto(t, None).unwrap_or_else(|e| panic!("{e}"))
}

fn err(t: &TensorProto) -> String {
    tensor_from_proto(t, None).unwrap_err().to_string()
}

#[test]
fn raw_data_every_dtype() {
    // (onnx code, dtype, dims, raw bytes). The bytes are arbitrary: raw_data is taken as is,
    // and the size must match shape x element size.
    let cases: &[(i32, DType, &[i64], &[u8])] = &[
        (1, DType::F32, &[2], &[0, 0, 0xC0, 0x3F, 0, 0, 0, 0xC0]),
        (2, DType::U8, &[3], &[0, 7, 255]),
        (3, DType::I8, &[1, 2], &[0x80, 0x7F]),
        (4, DType::U16, &[1], &[0xFF, 0xFF]),
        (5, DType::I16, &[2], &[0xFE, 0xFF, 0x2C, 0x01]),
        (6, DType::I32, &[1], &[0xFF, 0xFF, 0xFF, 0xFF]),
        (
            7,
            DType::I64,
            &[1],
            &[0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
        ),
        (9, DType::Bool, &[2], &[1, 0]),
        (10, DType::F16, &[1], &[0x00, 0x3C]),
        (11, DType::F64, &[], &[0, 0, 0, 0, 0, 0, 0xF8, 0x3F]),
        (12, DType::U32, &[1], &[1, 0, 0, 0x80]),
        (13, DType::U64, &[1], &[1, 0, 0, 0, 0, 0, 0, 0x80]),
        (16, DType::BF16, &[1], &[0x80, 0x3F]),
    ];
    for &(code, dtype, dims, raw) in cases {
        let t = ok(&raw_tensor("t", code, dims, raw));
        assert_eq!(t.dtype(), dtype, "code {code}");
        let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        assert_eq!(t.shape(), &shape[..]);
        assert_eq!(&t.bytes()[..], raw, "{dtype}");
    }
    // Spot checks that the bytes mean what the hand encodings say.
    assert_eq!(
        ok(&raw_tensor(
            "t",
            1,
            &[2],
            &[0, 0, 0xC0, 0x3F, 0, 0, 0, 0xC0]
        ))
        .view::<f32>()
        .unwrap()[..],
        [1.5, -2.0]
    );
    assert_eq!(
        ok(&raw_tensor("t", 11, &[], &[0, 0, 0, 0, 0, 0, 0xF8, 0x3F]))
            .to_f64_vec()
            .unwrap(),
        [1.5]
    );
    assert_eq!(
        ok(&raw_tensor("t", 16, &[1], &[0x80, 0x3F]))
            .to_f64_vec()
            .unwrap(),
        [1.0]
    );
}

#[test]
fn typed_fields_every_dtype() {
    let mut t = typed(1, &[2]);
    t.float_data = vec![1.5, -2.0];
    assert_eq!(&ok(&t).bytes()[..], &[0, 0, 0xC0, 0x3F, 0, 0, 0, 0xC0]);

    let mut t = typed(11, &[1]);
    t.double_data = vec![1.5];
    assert_eq!(&ok(&t).bytes()[..], &[0, 0, 0, 0, 0, 0, 0xF8, 0x3F]);

    let mut t = typed(7, &[2]);
    t.int64_data = vec![-8, 1 << 40];
    assert_eq!(
        &ok(&t).bytes()[..],
        &[
            0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0
        ]
    );

    let mut t = typed(13, &[1]);
    t.uint64_data = vec![u64::MAX];
    assert_eq!(&ok(&t).bytes()[..], &[0xFF; 8]);

    // uint32 lives in uint64_data.
    let mut t = typed(12, &[2]);
    t.uint64_data = vec![4_294_967_295, 258];
    assert_eq!(&ok(&t).bytes()[..], &[0xFF, 0xFF, 0xFF, 0xFF, 2, 1, 0, 0]);

    // Everything narrower than 32 bits lives in int32_data, one element per entry.
    let int32_cases: &[(i32, &[i32], &[u8])] = &[
        (6, &[-1, 256], &[0xFF, 0xFF, 0xFF, 0xFF, 0, 1, 0, 0]),
        (5, &[-2, 300], &[0xFE, 0xFF, 0x2C, 0x01]),
        (3, &[-128, 127], &[0x80, 0x7F]),
        (4, &[65535, 1], &[0xFF, 0xFF, 1, 0]),
        (2, &[255, 0], &[0xFF, 0]),
        // Any non-zero is true.
        (9, &[0, 1], &[0, 1]),
        // float16 bits: 1.0 = 0x3C00, -2.0 = 0xC000.
        (10, &[0x3C00, 0xC000], &[0x00, 0x3C, 0x00, 0xC0]),
        // bfloat16 bits: 1.0 = 0x3F80, 3.140625 = 0x4049.
        (16, &[0x3F80, 0x4049], &[0x80, 0x3F, 0x49, 0x40]),
    ];
    for &(code, values, bytes) in int32_cases {
        let mut t = typed(code, &[2]);
        t.int32_data = values.to_vec();
        assert_eq!(&ok(&t).bytes()[..], bytes, "code {code}");
    }
    let mut t = typed(9, &[3]);
    t.int32_data = vec![0, 5, -1];
    assert_eq!(ok(&t).view_bool().unwrap(), [false, true, true]);
    let mut t = typed(10, &[2]);
    t.int32_data = vec![0x3C00, 0xC000];
    assert_eq!(ok(&t).to_f64_vec().unwrap(), [1.0, -2.0]);
}

#[test]
fn raw_booleans_become_zero_or_one() {
    let t = ok(&raw_tensor("b", 9, &[3], &[0, 2, 255]));
    assert_eq!(&t.bytes()[..], &[0, 1, 1]);
}

#[test]
fn empty_tensor_needs_no_data() {
    let t = ok(&typed(1, &[0, 3]));
    assert_eq!(t.shape(), &[0, 3]);
    assert!(t.bytes().is_empty());
}

#[test]
fn bad_tensors_are_errors_naming_the_tensor() {
    // Too few typed values.
    let mut t = typed(1, &[3]);
    t.float_data = vec![1.0, 2.0];
    let e = err(&t);
    assert!(
        e.contains("'t'") && e.contains("float_data") && e.contains("found 2"),
        "{e}"
    );

    // Typed data in the wrong field counts as missing.
    let mut t = typed(1, &[1]);
    t.int32_data = vec![1];
    assert!(err(&t).contains("float_data"));

    // raw_data of the wrong size.
    let e = err(&raw_tensor("w", 1, &[2, 2], &[0; 12]));
    assert!(
        e.contains("'w'") && e.contains("12 bytes") && e.contains("16"),
        "{e}"
    );

    // Values that do not fit the element type.
    let mut t = typed(3, &[1]);
    t.int32_data = vec![200];
    assert!(err(&t).contains("200 does not fit in int8"), "{}", err(&t));
    let mut t = typed(12, &[1]);
    t.uint64_data = vec![1 << 32];
    assert!(err(&t).contains("does not fit in uint32"));
    let mut t = typed(10, &[1]);
    t.int32_data = vec![70000];
    assert!(err(&t).contains("70000"));

    let e = err(&raw_tensor("n", 1, &[-1], &[]));
    assert!(e.contains("negative dimension -1"), "{e}");

    // A shape whose byte size overflows is an error, not a panic.
    let e = err(&typed(1, &[i64::MAX, i64::MAX]));
    assert!(e.contains("too large"), "{e}");
}

#[test]
fn unsupported_and_unknown_dtypes_name_the_tensor() {
    let mut s = typed(15, &[1]);
    s.name = "labels".into();
    let e = tensor_from_proto(&s, None).unwrap_err();
    assert!(matches!(e, LoadError::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("'labels'") && e.to_string().contains("complex128"));

    // Strings load from string_data, and must be UTF-8 and as many as the shape says.
    let mut s = typed(8, &[2]);
    s.string_data = vec![
        bytes::Bytes::from_static(b"cat"),
        bytes::Bytes::from_static("é".as_bytes()),
    ];
    let t = tensor_from_proto(&s, None).unwrap();
    assert_eq!(t.strings().unwrap(), ["cat", "é"]);
    s.string_data[1] = bytes::Bytes::from_static(b"\xff");
    let e = tensor_from_proto(&s, None).unwrap_err().to_string();
    assert!(e.contains("UTF-8"), "{e}");
    s.string_data.pop();
    let e = tensor_from_proto(&s, None).unwrap_err().to_string();
    assert!(e.contains("needs 2 values in string_data"), "{e}");

    let e = tensor_from_proto(&typed(14, &[1]), None).unwrap_err();
    assert!(e.to_string().contains("complex64"), "{e}");

    let e = tensor_from_proto(&typed(99, &[1]), None).unwrap_err();
    assert!(
        matches!(&e, LoadError::UnknownDType { tensor, code: 99 } if tensor == "t"),
        "{e:?}"
    );
}

#[test]
fn segmented_tensor_is_unsupported() {
    let mut t = raw_tensor("seg", 1, &[1], &[0; 4]);
    t.segment = Some(crate::onnx::proto::tensor_proto::Segment { begin: 0, end: 1 });
    let e = err(&t);
    assert!(e.contains("'seg'") && e.contains("segments"), "{e}");
}
