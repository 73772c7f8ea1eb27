use super::*;
use crate::AttrValue;
use crate::testkit::*;

fn pad(mode: &str, x: &Tensor, pads: &[i64], value: Option<&Tensor>) -> Tensor {
    let m = AttrValue::String(mode.into());
    run_node(
        "Pad",
        19,
        vec![("mode", m)],
        &[Some(x), Some(&i64s(pads)), value],
    )
    .unwrap()
}

#[test]
fn modes_match_numpy() {
    let x = Tensor::from_vec(vec![3], vec![0i64, 1, 2]);
    let v = |t: Tensor| t.to_i64_vec().unwrap();
    assert_eq!(
        v(pad("reflect", &x, &[4, 5], None)),
        [0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1]
    );
    assert_eq!(
        v(pad("wrap", &x, &[4, 5], None)),
        [2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1]
    );
    assert_eq!(v(pad("edge", &x, &[2, 2], None)), [0, 0, 0, 1, 2, 2, 2]);
    let nine = Tensor::scalar(9i64);
    assert_eq!(
        v(pad("constant", &x, &[1, 1], Some(&nine))),
        [9, 0, 1, 2, 9]
    );
}

#[test]
fn negative_pads_crop_and_axes_select() {
    // [[0,1,2],[3,4,5]] with pads (1, 0) on axis 0 and (-1, 2) on axis 1, constant 9.
    let x = Tensor::from_vec(vec![2, 3], (0..6i32).collect());
    let y = pad("constant", &x, &[1, -1, 0, 2], Some(&Tensor::scalar(9i32)));
    assert_eq!(y.shape(), &[3, 4]);
    assert_eq!(
        y.to_i64_vec().unwrap(),
        [9, 9, 9, 9, 1, 2, 9, 9, 4, 5, 9, 9]
    );
    // Opset 18 axes input: pad only the last axis.
    let y = run_node(
        "Pad",
        18,
        vec![],
        &[Some(&x), Some(&i64s(&[0, 1])), None, Some(&i64s(&[-1]))],
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [0, 1, 2, 0, 3, 4, 5, 0]);
}

#[test]
fn pad_2_attributes_and_value() {
    let x = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
    let y = run_node(
        "Pad",
        2,
        vec![("pads", ints(&[1, 0])), ("value", AttrValue::Float(1.5))],
        &[Some(&x)],
    )
    .unwrap();
    assert_eq!(y.view::<f32>().unwrap().to_vec(), [1.5, 1.0, 2.0]);
    assert_err(
        op(
            "Pad",
            18,
            vec![("mode", AttrValue::String("wrap".into()))],
            2,
        ),
        false,
        "not one of",
    );
}

#[test]
fn gpu_pad_matches_cpu() {
    use crate::tensor::DType;
    for mode in ["constant", "reflect", "edge", "wrap"] {
        let m = || vec![("mode", AttrValue::String(mode.into()))];
        let op19 = op("Pad", 19, m(), 4).unwrap();
        // Wrap exists from opset 19 only.
        let op2 = op(
            "Pad",
            2,
            [m(), vec![("pads", ints(&[0, 2, 1, 1, 3, 0]))]].concat(),
            1,
        )
        .ok();
        for dtype in [DType::U8, DType::F16, DType::F32, DType::F64] {
            let x = random_tensor(dtype, &[3, 4, 5], 3);
            let c = random_tensor(dtype, &[], 4);
            let pads = i64s(&[1, -1, 2, 3]);
            let axes = i64s(&[0, 2]);
            let ins = [Some(&x), Some(&pads), Some(&c), Some(&axes)];
            gpu_same_bytes(op19.as_ref(), &ins, &format!("Pad {mode} {dtype}"));
            let full = i64s(&[2, 0, 1, 0, 1, 2]);
            gpu_same_bytes(
                op19.as_ref(),
                &[Some(&x), Some(&full)],
                &format!("Pad {mode}"),
            );
            if let Some(op2) = &op2 {
                gpu_same_bytes(op2.as_ref(), &[Some(&x)], &format!("Pad-2 {mode} {dtype}"));
            }
        }
    }
}
