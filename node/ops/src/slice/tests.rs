use super::*;
use crate::AttrValue;
use crate::testkit::*;

fn i64_vals(t: &Tensor) -> Vec<i64> {
    t.to_i64_vec().unwrap()
}

fn grid() -> Tensor {
    Tensor::from_vec(vec![4, 5], (0..20i64).collect())
}

#[test]
fn axis_arithmetic_clamps_as_onnx() {
    assert_eq!(slice_axis(5, 1, 4, 1).len, 3);
    assert_eq!(
        slice_axis(5, -100, 100, 1),
        Range1 {
            start: 0,
            step: 1,
            len: 5
        }
    );
    // x[3:0:-2] on 4 elements: 3, 1.
    assert_eq!(
        slice_axis(4, 3, 0, -2),
        Range1 {
            start: 3,
            step: -2,
            len: 2
        }
    );
    // x[-1:-100:-3] on 4: 3, 0.
    assert_eq!(slice_axis(4, -1, -100, -3).len, 2);
    assert_eq!(
        slice_axis(4, i64::MAX, i64::MIN, -1),
        Range1 {
            start: 3,
            step: -1,
            len: 4
        }
    );
    assert_eq!(slice_axis(4, 2, 2, 1).len, 0);
    assert_eq!(slice_axis(0, 0, 5, -1).len, 0);
}

#[test]
fn negative_steps_and_axes_inputs() {
    // numpy: x[3:0:-2, 1:4] = [[16, 17, 18], [6, 7, 8]].
    let y = run_node(
        "Slice",
        13,
        vec![],
        &[
            Some(&grid()),
            Some(&i64s(&[3, 1])),
            Some(&i64s(&[0, 4])),
            Some(&i64s(&[0, -1])),
            Some(&i64s(&[-2, 1])),
        ],
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(i64_vals(&y), [16, 17, 18, 6, 7, 8]);
}

#[test]
fn slice_1_takes_attributes() {
    let y = run_node(
        "Slice",
        1,
        vec![
            ("starts", ints(&[1])),
            ("ends", ints(&[1000])),
            ("axes", ints(&[1])),
        ],
        &[Some(&grid())],
    )
    .unwrap();
    assert_eq!(y.shape(), &[4, 4]);
    assert_eq!(i64_vals(&y)[..4], [1, 2, 3, 4]);
}

#[test]
fn slice_errors_name_the_problem() {
    let op = op("Slice", 13, vec![], 5).unwrap();
    let x = grid();
    let bad_step = [
        Some(&x),
        Some(&i64s(&[0])),
        Some(&i64s(&[1])),
        None,
        Some(&i64s(&[0])),
    ];
    assert_err(run_one(op.as_ref(), &bad_step), false, "must not be 0");
    let twice = [
        Some(&x),
        Some(&i64s(&[0, 0])),
        Some(&i64s(&[1, 1])),
        Some(&i64s(&[1, -1])),
    ];
    assert_err(run_one(op.as_ref(), &twice), false, "twice");
    // Starts known only at run time: the rule asks for the value.
    let r = infer_partly(
        op.as_ref(),
        &[Some(&x), Some(&i64s(&[0])), Some(&i64s(&[1]))],
        &[0, 2],
    );
    assert_eq!(r.unwrap_err(), OpError::NeedsValue(1));
}

#[test]
fn split_even_uneven_and_by_sizes() {
    let x = Tensor::from_vec(vec![7], (0..7i64).collect());
    let op = |opset, n, attrs| {
        crate::build(&crate::NodeSpec {
            name: "t",
            op_type: "Split",
            attrs: &crate::Attrs(attrs),
            opset,
            num_inputs: 2,
            num_outputs: n,
        })
        .unwrap()
    };
    let run_all = |op: &dyn Op, inputs: &[Option<&Tensor>]| {
        let types = infer_known(op, inputs).unwrap();
        op.run_cpu(inputs, &types).unwrap()
    };
    // Opset 18, num_outputs 3 on 7: chunks of ceil(7 / 3) = 3, the last holds 1.
    let mut attrs = std::collections::BTreeMap::new();
    attrs.insert("num_outputs".to_string(), AttrValue::Int(3));
    let o = op(18, 3, attrs);
    let ys = run_all(o.as_ref(), &[Some(&x)]);
    let got: Vec<Vec<i64>> = ys.iter().map(i64_vals).collect();
    assert_eq!(got, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
    // Before 18 the parts must be equal.
    let o = op(13, 3, Default::default());
    let types = infer_known(o.as_ref(), &[Some(&x)]);
    assert_err(types, false, "does not divide");
    // Sizes as an input (13) and as an attribute (11).
    let ys = run_all(o.as_ref(), &[Some(&x), Some(&i64s(&[2, 0, 5]))]);
    assert_eq!(ys[1].shape(), &[0]);
    assert_eq!(i64_vals(&ys[2]), [2, 3, 4, 5, 6]);
    let mut attrs = std::collections::BTreeMap::new();
    attrs.insert("split".to_string(), ints(&[4, 3]));
    let o = op(11, 2, attrs);
    let ys = run_all(o.as_ref(), &[Some(&x)]);
    assert_eq!(i64_vals(&ys[1]), [4, 5, 6]);
}

#[test]
fn gpu_slice_and_split_match_cpu_for_every_size() {
    use crate::tensor::DType;
    let slice = op("Slice", 13, vec![], 5).unwrap();
    let slice1 = op(
        "Slice",
        9,
        vec![
            ("starts", ints(&[-1, 0])),
            ("ends", ints(&[0, 7])),
            ("axes", ints(&[0, 2])),
        ],
        1,
    )
    .unwrap();
    for dtype in [DType::U8, DType::F16, DType::F32, DType::I64, DType::Bool] {
        let x = random_tensor(dtype, &[5, 3, 7], 7);
        let ins = [
            Some(&i64s(&[4, -2])),
            Some(&i64s(&[0, 0])),
            Some(&i64s(&[0, -1])),
            Some(&i64s(&[-2, -3])),
        ];
        let all = [Some(&x), ins[0], ins[1], ins[2], ins[3]];
        gpu_same_bytes(slice.as_ref(), &all, &format!("Slice {dtype}"));
        let x32 = Tensor::from_vec(vec![2], vec![1i32, 3]);
        let st = Tensor::from_vec(vec![2], vec![0i32, 1]);
        let s2 = [Some(&x), Some(&x32), Some(&st)];
        gpu_same_bytes(slice.as_ref(), &s2, &format!("Slice int32 {dtype}"));
        gpu_same_bytes(slice1.as_ref(), &[Some(&x)], &format!("Slice-1 {dtype}"));
        let mut attrs = std::collections::BTreeMap::new();
        attrs.insert("axis".to_string(), AttrValue::Int(-1));
        attrs.insert("num_outputs".to_string(), AttrValue::Int(2));
        let split = crate::build(&crate::NodeSpec {
            name: "t",
            op_type: "Split",
            attrs: &crate::Attrs(attrs),
            opset: 18,
            num_inputs: 1,
            num_outputs: 2,
        })
        .unwrap();
        gpu_same_bytes(split.as_ref(), &[Some(&x)], &format!("Split {dtype}"));
    }
}

/// A scalar has no axis to slice: taking axis 0 of one indexed an empty list (a panic the
/// fuzzer found); now it is an error.
#[test]
fn a_scalar_cannot_be_sliced() {
    let x = Tensor::scalar(1f32);
    let (s, e) = (i64s(&[0]), i64s(&[1]));
    assert_err(
        run_node("Slice", 13, vec![], &[Some(&x), Some(&s), Some(&e)]),
        false,
        "rank 1 or more",
    );
}

/// Split, Compress and Pad along axis 0 of a scalar indexed an empty shape; now each is an
/// error naming the scalar.
#[test]
fn a_scalar_has_no_axis_to_split_compress_or_pad() {
    let x = Tensor::scalar(1f32);
    let split = run_node("Split", 13, vec![("axis", AttrValue::Int(0))], &[Some(&x)]);
    assert_err(split, false, "of a scalar");
    let keep = Tensor::from_bytes(crate::tensor::DType::Bool, vec![1], vec![1u8].into()).unwrap();
    let compress = run_node(
        "Compress",
        11,
        vec![("axis", AttrValue::Int(0))],
        &[Some(&x), Some(&keep)],
    );
    assert_err(compress, false, "of a scalar");
    let (pads, axes) = (i64s(&[1, 1]), i64s(&[0]));
    let pad = run_node(
        "Pad",
        18,
        vec![],
        &[Some(&x), Some(&pads), None, Some(&axes)],
    );
    assert_err(pad, false, "of a scalar");
}
