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
