//! Cases from the ONNX operator documentation and numpy's unique, hand-checked.

use super::*;
use crate::AttrValue;
use crate::testkit::*;

#[test]
fn compress_along_an_axis_and_flattened() {
    let x = Tensor::from_vec(vec![3, 2], vec![1i64, 2, 3, 4, 5, 6]);
    let c = Tensor::from_bools(vec![3], vec![false, true, true]);
    let y = run_node(
        "Compress",
        11,
        vec![("axis", AttrValue::Int(0))],
        &[Some(&x), Some(&c)],
    )
    .unwrap();
    assert_eq!(
        (y.shape(), y.to_i64_vec().unwrap()),
        (&[2, 2][..], vec![3, 4, 5, 6])
    );
    let c = Tensor::from_bools(vec![2], vec![false, true]);
    let y = run_node("Compress", 11, vec![], &[Some(&x), Some(&c)]).unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [2]);
}

#[test]
fn unique_sorted_unsorted_and_by_axis() {
    let x = Tensor::from_vec(vec![6], vec![2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0]);
    let op = |attrs: Vec<(&str, AttrValue)>| {
        let attrs = crate::Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        crate::build(&crate::NodeSpec {
            name: "t",
            op_type: "Unique",
            attrs: &attrs,
            opset: 11,
            num_inputs: 1,
            num_outputs: 4,
        })
        .unwrap()
    };
    let all = |o: &dyn Op, x: &Tensor| {
        let types = infer_known(o, &[Some(x)]).unwrap();
        o.run_cpu(&[Some(x)], &types).unwrap()
    };
    let o = op(vec![("sorted", AttrValue::Int(0))]);
    let r = all(o.as_ref(), &x);
    assert_eq!(r[0].view::<f32>().unwrap().to_vec(), [2.0, 1.0, 3.0, 4.0]);
    assert_eq!(r[1].to_i64_vec().unwrap(), [0, 1, 3, 4]);
    assert_eq!(r[2].to_i64_vec().unwrap(), [0, 1, 1, 2, 3, 2]);
    assert_eq!(r[3].to_i64_vec().unwrap(), [1, 2, 2, 1]);
    let o = op(vec![]);
    let r = all(o.as_ref(), &x);
    assert_eq!(r[0].view::<f32>().unwrap().to_vec(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(r[1].to_i64_vec().unwrap(), [1, 0, 3, 4]);
    assert_eq!(r[2].to_i64_vec().unwrap(), [1, 0, 0, 2, 3, 2]);
    // np.unique([[1, 0, 0], [1, 0, 0], [2, 3, 4]], axis=0)
    let m = Tensor::from_vec(vec![3, 3], vec![1i64, 0, 0, 1, 0, 0, 2, 3, 4]);
    let o = op(vec![("axis", AttrValue::Int(0))]);
    let r = all(o.as_ref(), &m);
    assert_eq!(r[0].shape(), &[2, 3]);
    assert_eq!(r[0].to_i64_vec().unwrap(), [1, 0, 0, 2, 3, 4]);
    assert_eq!(r[3].to_i64_vec().unwrap(), [2, 1]);
}

#[test]
fn reverse_sequence_per_batch_lengths() {
    // time_axis 0, batch_axis 1: columns are sequences.
    let x = Tensor::from_vec(vec![4, 4], (0..16i64).collect());
    let lens = i64s(&[4, 3, 2, 1]);
    let y = run_node("ReverseSequence", 10, vec![], &[Some(&x), Some(&lens)]).unwrap();
    assert_eq!(
        y.to_i64_vec().unwrap(),
        [12, 9, 6, 3, 8, 5, 2, 7, 4, 1, 10, 11, 0, 13, 14, 15]
    );
    let y = run_node(
        "ReverseSequence",
        10,
        vec![
            ("batch_axis", AttrValue::Int(0)),
            ("time_axis", AttrValue::Int(1)),
        ],
        &[Some(&x), Some(&lens)],
    )
    .unwrap();
    assert_eq!(
        y.to_i64_vec().unwrap(),
        [3, 2, 1, 0, 6, 5, 4, 7, 9, 8, 10, 11, 12, 13, 14, 15]
    );
}

#[test]
fn gpu_reverse_sequence_matches_cpu() {
    use crate::tensor::DType;
    let tb = op("ReverseSequence", 10, vec![], 2).unwrap();
    let bt = op(
        "ReverseSequence",
        10,
        vec![
            ("batch_axis", AttrValue::Int(0)),
            ("time_axis", AttrValue::Int(1)),
        ],
        2,
    )
    .unwrap();
    for dtype in [DType::Bool, DType::F16, DType::F32, DType::I64] {
        let x = random_tensor(dtype, &[5, 3, 3], 9);
        gpu_same_bytes(
            tb.as_ref(),
            &[Some(&x), Some(&i64s(&[5, 0, 2]))],
            "time-major",
        );
        let x = random_tensor(dtype, &[3, 5, 2], 10);
        gpu_same_bytes(
            bt.as_ref(),
            &[Some(&x), Some(&i64s(&[1, 4, 5]))],
            "batch-major",
        );
    }
}

#[test]
fn gpu_compress_matches_cpu() {
    use crate::tensor::DType;
    let by_axis = op("Compress", 11, vec![("axis", AttrValue::Int(-2))], 2).unwrap();
    let flat = op("Compress", 11, vec![], 2).unwrap();
    for dtype in [DType::U8, DType::F16, DType::F32, DType::F64] {
        let x = random_tensor(dtype, &[2, 5, 3], 21);
        let c = Tensor::from_bools(vec![4], vec![true, false, true, true]);
        gpu_same_bytes(by_axis.as_ref(), &[Some(&x), Some(&c)], "Compress axis");
        let c = Tensor::from_bools(vec![7], vec![false, true, true, false, false, true, true]);
        gpu_same_bytes(flat.as_ref(), &[Some(&x), Some(&c)], "Compress flat");
    }
}
