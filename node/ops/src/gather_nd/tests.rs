//! Cases from the ONNX operator documentation (hand-checked), then GPU against CPU.

use super::*;
use crate::AttrValue;
use crate::testkit::*;

fn t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

#[test]
fn gather_elements_spec_examples() {
    let ge = |axis, d: &Tensor, i: &Tensor| {
        run_node(
            "GatherElements",
            13,
            vec![("axis", AttrValue::Int(axis))],
            &[Some(d), Some(i)],
        )
    };
    let y = ge(1, &t(&[2, 2], &[1, 2, 3, 4]), &t(&[2, 2], &[0, 0, 1, 0])).unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [1, 1, 4, 3]);
    let d = t(&[3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let y = ge(0, &d, &t(&[2, 3], &[1, 2, 0, 2, 0, 0])).unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [4, 8, 3, 7, 2, 3]);
    // Negative indices count from the back.
    let y = ge(0, &d, &t(&[2, 3], &[-1, -2, 0, -2, 0, 0])).unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [7, 5, 3, 4, 2, 3]);
    assert_err(ge(0, &d, &t(&[1, 1], &[3])), false, "out of range");
}

#[test]
fn gather_nd_spec_examples() {
    let nd = |b, d: &Tensor, i: &Tensor| {
        run_node(
            "GatherND",
            13,
            vec![("batch_dims", AttrValue::Int(b))],
            &[Some(d), Some(i)],
        )
        .unwrap()
    };
    let d = t(&[2, 2], &[0, 1, 2, 3]);
    assert_eq!(
        nd(0, &d, &t(&[2, 2], &[0, 0, 1, 1])).to_i64_vec().unwrap(),
        [0, 3]
    );
    let y = nd(0, &d, &t(&[2, 1], &[1, 0]));
    assert_eq!(
        (y.shape(), y.to_i64_vec().unwrap()),
        (&[2, 2][..], vec![2, 3, 0, 1])
    );
    let d3 = t(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7]);
    let y = nd(0, &d3, &t(&[2, 1, 2], &[0, 1, 1, 0]));
    assert_eq!(
        (y.shape(), y.to_i64_vec().unwrap()),
        (&[2, 1, 2][..], vec![2, 3, 4, 5])
    );
    let y = nd(1, &d3, &t(&[2, 1], &[1, 0]));
    assert_eq!(
        (y.shape(), y.to_i64_vec().unwrap()),
        (&[2, 2][..], vec![2, 3, 4, 5])
    );
    assert_err(
        run_node(
            "GatherND",
            13,
            vec![],
            &[Some(&d), Some(&t(&[1, 3], &[0, 0, 0]))],
        ),
        false,
        "longer",
    );
}

#[test]
fn gpu_gathers_match_cpu() {
    use crate::tensor::DType;
    let ge = op("GatherElements", 13, vec![("axis", AttrValue::Int(-2))], 2).unwrap();
    let nd = op("GatherND", 13, vec![("batch_dims", AttrValue::Int(1))], 2).unwrap();
    let g = op("Gather", 13, vec![("axis", AttrValue::Int(1))], 2).unwrap();
    for dtype in [DType::U8, DType::I16, DType::F32, DType::F64] {
        let data = random_tensor(dtype, &[3, 5, 3], 1);
        let idx: Vec<i64> = (0..3 * 4 * 3).map(|k| (k * 7 % 10) - 5).collect();
        let i64s = t(&[3, 4, 3], &idx);
        let i32s = Tensor::from_vec(vec![3, 4, 3], idx.iter().map(|&v| v as i32).collect());
        for i in [&i64s, &i32s] {
            gpu_same_bytes(ge.as_ref(), &[Some(&data), Some(i)], "GatherElements");
        }
        let ndi = t(&[3, 2, 2], &[0, 1, 4, -1, 2, 2, -5, 0, 1, 1, 3, 2]);
        gpu_same_bytes(nd.as_ref(), &[Some(&data), Some(&ndi)], "GatherND");
        // Gather of 3 bytes: the element-sized fallback of gather.comp.
        let small = random_tensor(dtype, &[1, 3], 2);
        gpu_same_bytes(
            g.as_ref(),
            &[Some(&small), Some(&t(&[3], &[2, -1, 0]))],
            "Gather",
        );
    }
}

/// The host-side check the runtime makes where a GPU kernel would clamp: each index against
/// its axis, negative ones counting from the end, with only the indices' value known.
#[test]
fn indices_out_of_range_are_found_before_a_gpu_clamps_them() {
    let data = ValueType::new(DType::F32, vec![2, 3]);
    let check = |op_type: &str, v: &[i64]| {
        let o = op(op_type, 13, vec![("axis", AttrValue::Int(1))], 3).unwrap();
        let i = t(&[2, 1], v);
        let ity = ValueType::of(&i);
        let u = ValueType::new(DType::F32, vec![2, 1]);
        let ins = [
            Some(crate::InferInput {
                ty: &data,
                value: None,
            }),
            Some(crate::InferInput {
                ty: &ity,
                value: Some(&i),
            }),
            Some(crate::InferInput {
                ty: &u,
                value: None,
            }),
        ];
        o.check_values(&ins[..if op_type == "GatherElements" { 2 } else { 3 }])
    };
    for op_type in ["GatherElements", "ScatterElements"] {
        check(op_type, &[2, -3]).unwrap();
        assert_err(check(op_type, &[3, 0]), false, "index 3 is out of range");
        assert_err(check(op_type, &[0, -4]), false, "index -4 is out of range");
    }
}

/// GatherND and ScatterND check each entry of an index tuple against its own axis.
#[test]
fn nd_index_tuples_out_of_range_are_found_before_a_gpu_clamps_them() {
    let data = ValueType::new(DType::F32, vec![2, 3]);
    let u = ValueType::new(DType::F32, vec![2]);
    let check = |op_type: &str, v: &[i64]| {
        let n = if op_type == "GatherND" { 2 } else { 3 };
        let o = op(op_type, 13, vec![], n).unwrap();
        let i = t(&[2, 2], v);
        let ity = ValueType::of(&i);
        let known = |ty, value| Some(crate::InferInput { ty, value });
        let ins = [known(&data, None), known(&ity, Some(&i)), known(&u, None)];
        o.check_values(&ins[..n])
    };
    for op_type in ["GatherND", "ScatterND"] {
        check(op_type, &[1, 2, -2, -3]).unwrap();
        // 2 is within the second axis (3) but not the first (2).
        assert_err(
            check(op_type, &[2, 0, 0, 0]),
            false,
            "index 2 is out of range",
        );
        assert_err(
            check(op_type, &[0, 3, 0, 0]),
            false,
            "index 3 is out of range",
        );
    }
}
