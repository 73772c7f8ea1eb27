//! Hand-derived cases (numpy's triu/tril/eye/arange/nonzero semantics), then GPU against CPU.

use super::*;
use crate::AttrValue;
use crate::testkit::*;

#[test]
fn size_and_constant_of_shape() {
    let x = Tensor::zeros(DType::U8, vec![2, 3, 4]);
    let y = run_node("Size", 13, vec![], &[Some(&x)]).unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [24]);
    let op = op("Size", 13, vec![], 1).unwrap();
    assert_eq!(
        op.known_outputs(&[Some(&ValueType::of(&x))]).unwrap()[0],
        Tensor::scalar(24i64)
    );
    let v = AttrValue::Tensor(Tensor::from_vec(vec![1], vec![7i32]));
    let y = run_node(
        "ConstantOfShape",
        9,
        vec![("value", v)],
        &[Some(&i64s(&[2, 2]))],
    )
    .unwrap();
    assert_eq!(
        (y.dtype(), y.to_i64_vec().unwrap()),
        (DType::I32, vec![7, 7, 7, 7])
    );
    let y = run_node("ConstantOfShape", 9, vec![], &[Some(&i64s(&[0]))]).unwrap();
    assert_eq!((y.dtype(), y.shape()), (DType::F32, &[0][..]));
}

#[test]
fn range_counts_like_arange() {
    let r = |s: Tensor, l: Tensor, d: Tensor| {
        run_node("Range", 11, vec![], &[Some(&s), Some(&l), Some(&d)])
    };
    let y = r(
        Tensor::scalar(10i32),
        Tensor::scalar(4i32),
        Tensor::scalar(-3i32),
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [10, 7]);
    let y = r(
        Tensor::scalar(1f32),
        Tensor::scalar(2f32),
        Tensor::scalar(0.25f32),
    )
    .unwrap();
    assert_eq!(y.view::<f32>().unwrap().to_vec(), [1.0, 1.25, 1.5, 1.75]);
    let y = r(
        Tensor::scalar(5i64),
        Tensor::scalar(1i64),
        Tensor::scalar(1i64),
    )
    .unwrap();
    assert_eq!(y.shape(), &[0]);
    assert_err(
        r(
            Tensor::scalar(0i64),
            Tensor::scalar(1i64),
            Tensor::scalar(0i64),
        ),
        false,
        "must not be 0",
    );
}

#[test]
fn eye_like_offsets_and_types() {
    let x = Tensor::zeros(DType::F32, vec![3, 4]);
    let y = run_node(
        "EyeLike",
        9,
        vec![("k", AttrValue::Int(1)), ("dtype", AttrValue::Int(7))],
        &[Some(&x)],
    )
    .unwrap();
    assert_eq!(y.dtype(), DType::I64);
    assert_eq!(
        y.to_i64_vec().unwrap(),
        [0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]
    );
    let y = run_node("EyeLike", 9, vec![("k", AttrValue::Int(-2))], &[Some(&x)]).unwrap();
    assert_eq!(
        y.to_f64_vec().unwrap(),
        [0., 0., 0., 0., 0., 0., 0., 0., 1., 0., 0., 0.]
    );
}

#[test]
fn trilu_keeps_triangles() {
    let x = Tensor::from_vec(vec![3, 3], (1..=9i64).collect());
    let tri = |upper, k: Option<i64>| {
        let kt = k.map(Tensor::scalar);
        run_node(
            "Trilu",
            14,
            vec![("upper", AttrValue::Int(upper))],
            &[Some(&x), kt.as_ref()],
        )
        .unwrap()
        .to_i64_vec()
        .unwrap()
    };
    // np.triu(x), np.triu(x, 1), np.tril(x), np.tril(x, -1)
    assert_eq!(tri(1, None), [1, 2, 3, 0, 5, 6, 0, 0, 9]);
    assert_eq!(tri(1, Some(1)), [0, 2, 3, 0, 0, 6, 0, 0, 0]);
    assert_eq!(tri(0, None), [1, 0, 0, 4, 5, 0, 7, 8, 9]);
    assert_eq!(tri(0, Some(-1)), [0, 0, 0, 4, 0, 0, 7, 8, 0]);
}

#[test]
fn one_hot_axes_and_negative_indices() {
    let idx = Tensor::from_vec(vec![3], vec![0i64, -1, 5]);
    let values = Tensor::from_vec(vec![2], vec![0i32, 1]);
    let depth = Tensor::scalar(3i64);
    let y = run_node(
        "OneHot",
        11,
        vec![],
        &[Some(&idx), Some(&depth), Some(&values)],
    )
    .unwrap();
    assert_eq!(y.shape(), &[3, 3]);
    // 5 is out of range: a row of "off".
    assert_eq!(y.to_i64_vec().unwrap(), [1, 0, 0, 0, 0, 1, 0, 0, 0]);
    let y = run_node(
        "OneHot",
        11,
        vec![("axis", AttrValue::Int(0))],
        &[Some(&idx), Some(&depth), Some(&values)],
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [1, 0, 0, 0, 0, 0, 0, 1, 0]);
}

#[test]
fn non_zero_lists_positions() {
    let x = Tensor::from_vec(vec![2, 2], vec![1.0f32, 0.0, -0.0, 3.0]);
    let y = run_node("NonZero", 13, vec![], &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_i64_vec().unwrap(), [0, 1, 0, 1]);
    let op = op("NonZero", 13, vec![], 1).unwrap();
    assert_eq!(
        infer_partly(op.as_ref(), &[Some(&x)], &[]).unwrap_err(),
        OpError::NeedsValue(0)
    );
}

#[test]
fn gpu_trilu_and_one_hot_match_cpu() {
    let up = op("Trilu", 14, vec![], 2).unwrap();
    let low = op("Trilu", 14, vec![("upper", AttrValue::Int(0))], 2).unwrap();
    let oh = op("OneHot", 11, vec![("axis", AttrValue::Int(1))], 3).unwrap();
    let oh9 = op("OneHot", 9, vec![], 3).unwrap();
    for dtype in [DType::U8, DType::F16, DType::F32, DType::I64] {
        let x = random_tensor(dtype, &[2, 5, 7], 4);
        let k = Tensor::scalar(-2i64);
        gpu_same_bytes(up.as_ref(), &[Some(&x), Some(&k)], "Trilu upper");
        gpu_same_bytes(low.as_ref(), &[Some(&x)], "Trilu lower");
        let idx = Tensor::from_vec(vec![2, 3], vec![0i32, 4, -1, -5, 7, 2]);
        let values = random_tensor(dtype, &[2], 5);
        let depth = Tensor::scalar(5i64);
        gpu_same_bytes(
            oh.as_ref(),
            &[Some(&idx), Some(&depth), Some(&values)],
            "OneHot",
        );
        // Opset 9: negative indices are out of range (a row of "off").
        let ins = [Some(&idx), Some(&depth), Some(&values)];
        gpu_same_bytes(oh9.as_ref(), &ins, "OneHot-9");
        // Float indices are truncated toward zero, as ONNX casts them.
        let fidx = Tensor::from_vec(vec![2, 3], vec![0.7f32, 4.2, -1.9, -5.0, 7.5, 2.0]);
        let ins = [Some(&fidx), Some(&depth), Some(&values)];
        gpu_same_bytes(oh.as_ref(), &ins, "OneHot of float indices");
    }
}

/// Range's length is a checked size: an infinite or NaN limit, or the whole int64 range, is an
/// error (it allocated until the process died, or gave an empty range), and the ends of the
/// int64 range are read exactly.
#[test]
fn ranges_that_do_not_fit_are_errors() {
    let r = |s: Tensor, l: Tensor, d: Tensor| {
        run_node("Range", 11, vec![], &[Some(&s), Some(&l), Some(&d)])
    };
    let one = || Tensor::scalar(1f32);
    assert_err(
        r(Tensor::scalar(0f32), Tensor::scalar(f32::INFINITY), one()),
        false,
        "finite",
    );
    assert_err(
        r(Tensor::scalar(0f32), Tensor::scalar(f32::NAN), one()),
        false,
        "finite",
    );
    assert_err(
        r(
            Tensor::scalar(f64::NAN),
            Tensor::scalar(1f64),
            Tensor::scalar(1f64),
        ),
        false,
        "finite",
    );
    let e = r(
        Tensor::scalar(i64::MIN),
        Tensor::scalar(i64::MAX),
        Tensor::scalar(1i64),
    );
    assert_err(e, false, "18446744073709551615");
    let y = r(
        Tensor::scalar(i64::MAX - 2),
        Tensor::scalar(i64::MAX),
        Tensor::scalar(1i64),
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [i64::MAX - 2, i64::MAX - 1]);
    let y = r(
        Tensor::scalar(i64::MAX),
        Tensor::scalar(i64::MIN),
        Tensor::scalar(i64::MIN),
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [i64::MAX, -1]);
    // The rule gives the length alone: 2^40 elements are typed, not computed.
    let range = op("Range", 11, vec![], 3).unwrap();
    let (s, l, d) = (
        Tensor::scalar(0i64),
        Tensor::scalar(1i64 << 40),
        Tensor::scalar(1i64),
    );
    let ty = infer_known(range.as_ref(), &[Some(&s), Some(&l), Some(&d)]).unwrap();
    assert_eq!(ty[0].shape, [1usize << 40]);
}

/// ConstantOfShape [2^62 + 1, 4] has 2^64 + 4 elements, which wrapped to 4: it wrote an .npy
/// of 4 elements claiming that shape. Now the rule refuses it.
#[test]
fn constant_of_shape_refuses_shapes_that_wrap() {
    let cos = op("ConstantOfShape", 9, vec![], 1).unwrap();
    let shape = i64s(&[(1 << 62) + 1, 4]);
    let e = infer_known(cos.as_ref(), &[Some(&shape)]);
    assert_err(e, false, "ConstantOfShape's shape");
    let e = infer_known(cos.as_ref(), &[Some(&i64s(&[1 << 32, 1 << 32]))]);
    assert_err(e, false, "element count");
    let e = infer_known(cos.as_ref(), &[Some(&i64s(&[-1]))]);
    assert_err(e, false, "negative");
    let onehot = op("OneHot", 11, vec![], 3).unwrap();
    let (i, d, v) = (
        i64s(&[0]),
        Tensor::scalar(f32::INFINITY),
        Tensor::from_vec(vec![2], vec![0f32, 1.0]),
    );
    assert_err(
        infer_known(onehot.as_ref(), &[Some(&i), Some(&d), Some(&v)]),
        false,
        "depth",
    );
}
