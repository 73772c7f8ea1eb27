//! Hand-derived 1-D cases for each sampling rule (checked against ONNX's reference formulas);
//! the ONNX node tests cover the combinations.

use super::*;
use crate::AttrValue;
use crate::testkit::*;

fn f32s(t: &Tensor) -> Vec<f32> {
    t.view::<f32>().unwrap().to_vec()
}

fn resize(
    attrs: Vec<(&str, AttrValue)>,
    x: &Tensor,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
) -> Tensor {
    let s = scales.map(|s| Tensor::from_vec(vec![s.len()], s.to_vec()));
    let z = sizes.map(i64s);
    run_node(
        "Resize",
        19,
        attrs,
        &[Some(x), None, s.as_ref(), z.as_ref()],
    )
    .unwrap()
}

fn s(v: &str) -> AttrValue {
    AttrValue::String(v.into())
}

#[test]
fn nearest_modes_round_as_named() {
    let x = Tensor::from_vec(vec![4], vec![1.0f32, 2.0, 3.0, 4.0]);
    // half_pixel, scale 0.6 -> 2 outputs at x = (y + 0.5) / 0.6 - 0.5 = 0.333, 2.0.
    let y = resize(vec![], &x, Some(&[0.6]), None);
    assert_eq!(f32s(&y), [1.0, 3.0]);
    // Upsampling by 2 with asymmetric: x = y / 2 = 0, 0.5, 1, 1.5...
    let up = |m: &str| {
        f32s(&resize(
            vec![
                ("coordinate_transformation_mode", s("asymmetric")),
                ("nearest_mode", s(m)),
            ],
            &x,
            Some(&[2.0]),
            None,
        ))
    };
    assert_eq!(up("round_prefer_floor"), [1., 1., 2., 2., 3., 3., 4., 4.]);
    assert_eq!(up("round_prefer_ceil"), [1., 2., 2., 3., 3., 4., 4., 4.]);
    assert_eq!(up("floor"), [1., 1., 2., 2., 3., 3., 4., 4.]);
    assert_eq!(up("ceil"), [1., 2., 2., 3., 3., 4., 4., 4.]);
}

#[test]
fn linear_and_cubic_weights() {
    let x = Tensor::from_vec(vec![2], vec![0.0f32, 4.0]);
    // half_pixel x2: x = -0.25, 0.25, 0.75, 1.25 -> clamped edges.
    let y = resize(vec![("mode", s("linear"))], &x, Some(&[2.0]), None);
    assert_eq!(f32s(&y), [0.0, 1.0, 3.0, 4.0]);
    // align_corners to 3: x = 0, 0.5, 1.
    let y = resize(
        vec![
            ("mode", s("linear")),
            ("coordinate_transformation_mode", s("align_corners")),
        ],
        &x,
        None,
        Some(&[3]),
    );
    assert_eq!(f32s(&y), [0.0, 2.0, 4.0]);
    // Cubic at a half step, A = -0.75: weights -0.09375, 0.59375, 0.59375, -0.09375 on
    // elements [0, 0, 4, 4] (edges clamp) -> 2.0.
    let y = resize(
        vec![
            ("mode", s("cubic")),
            ("coordinate_transformation_mode", s("align_corners")),
        ],
        &x,
        None,
        Some(&[3]),
    );
    assert!((f32s(&y)[1] - 2.0).abs() < 1e-6);
    // With exclude_outside the outside taps drop and the rest renormalise: still symmetric.
    let x4 = Tensor::from_vec(vec![4], vec![0.0f32, 1.0, 2.0, 3.0]);
    let y = resize(
        vec![("mode", s("cubic")), ("exclude_outside", AttrValue::Int(1))],
        &x4,
        Some(&[0.5]),
        None,
    );
    // half_pixel 0.5: x = 0.5 and 2.5; taps -1..2 around 0: -1 excluded.
    let w = [0.59375f64, 0.59375, -0.09375];
    let first = (w[0] * 0.0 + w[1] * 1.0 + w[2] * 2.0) / w.iter().sum::<f64>();
    assert!((f32s(&y)[0] as f64 - first).abs() < 1e-6);
}

#[test]
fn tf_crop_and_resize_extrapolates() {
    let x = Tensor::from_vec(vec![3], vec![10.0f32, 20.0, 30.0]);
    let roi = Tensor::from_vec(vec![2], vec![0.5f32, 1.5]);
    let sizes = i64s(&[3]);
    let y = run_node(
        "Resize",
        13,
        vec![
            ("mode", s("linear")),
            ("coordinate_transformation_mode", s("tf_crop_and_resize")),
            ("extrapolation_value", AttrValue::Float(-1.0)),
        ],
        &[Some(&x), Some(&roi), None, Some(&sizes)],
    )
    .unwrap();
    // x = y * (1.5 - 0.5) * 2 / 2 + 0.5 * 2 = 1, 2, 3: the last is outside.
    assert_eq!(f32s(&y), [20.0, 30.0, -1.0]);
}

#[test]
fn sizes_with_aspect_policy_and_axes() {
    let x = Tensor::zeros(DType::F32, vec![1, 4, 6]);
    let op = |p: &str| {
        op(
            "Resize",
            18,
            vec![("keep_aspect_ratio_policy", s(p)), ("axes", ints(&[1, 2]))],
            4,
        )
        .unwrap()
    };
    let sizes = i64s(&[8, 8]);
    let shape = |p: &str| {
        infer_known(op(p).as_ref(), &[Some(&x), None, None, Some(&sizes)]).unwrap()[0]
            .shape
            .clone()
    };
    assert_eq!(shape("stretch"), [1, 8, 8]);
    // Scales 2 and 1.333: not_larger takes 1.333 -> round(5.33) = 5, 8.
    assert_eq!(shape("not_larger"), [1, 5, 8]);
    assert_eq!(shape("not_smaller"), [1, 8, 12]);
}

#[test]
fn upsample_repeats_and_integers_round() {
    let x = Tensor::from_vec(vec![1, 2], vec![1u8, 3]);
    let y = run_node(
        "Upsample",
        7,
        vec![("scales", AttrValue::Floats(vec![1.0, 2.0]))],
        &[Some(&x)],
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [1, 1, 3, 3]);
    // Linear on uint8: 1, 2, 3, 3 (asymmetric x = 0, 0.5, 1, 1.5 clamped).
    let y = run_node(
        "Upsample",
        9,
        vec![("mode", s("linear"))],
        &[
            Some(&x),
            Some(&Tensor::from_vec(vec![2], vec![1.0f32, 2.0])),
        ],
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [1, 2, 3, 3]);
}

/// GPU against CPU within float tolerance (the shader computes coordinates in f32, the
/// reference in f64).
#[track_caller]
fn gpu_close(op: &dyn Op, inputs: &[Option<&Tensor>], what: &str) {
    let types = infer_known(op, inputs).unwrap();
    let cpu = op.run_cpu(inputs, &types).unwrap();
    let gpu = match crate::testkit::gpu::run_op(op, inputs, &types) {
        Err(e) if e == "skipped" => return,
        Err(e) => panic!("{what}: {e}"),
        Ok(g) => g,
    };
    let (c, g) = (cpu[0].to_f64_vec().unwrap(), gpu[0].to_f64_vec().unwrap());
    let tol = if cpu[0].dtype() == DType::F16 {
        1e-2
    } else {
        1e-4
    };
    for (k, (a, b)) in c.iter().zip(&g).enumerate() {
        // Integers may round the other way where float and f64 sums straddle a half.
        let ok = if cpu[0].dtype().is_float() {
            (a - b).abs() <= tol * (1.0 + a.abs())
        } else {
            (a - b).abs() <= 1.0
        };
        assert!(ok, "{what}: element {k}: cpu {a}, gpu {b}");
    }
}

#[test]
fn gpu_resize_matches_cpu() {
    let modes: [(&str, Vec<(&str, AttrValue)>); 5] = [
        ("nearest", vec![]),
        (
            "nearest",
            vec![
                ("nearest_mode", s("ceil")),
                ("coordinate_transformation_mode", s("asymmetric")),
            ],
        ),
        (
            "linear",
            vec![("coordinate_transformation_mode", s("align_corners"))],
        ),
        ("cubic", vec![("exclude_outside", AttrValue::Int(1))]),
        (
            "linear",
            vec![("coordinate_transformation_mode", s("pytorch_half_pixel"))],
        ),
    ];
    let x = Tensor::from_vec(
        vec![2, 3, 5, 7],
        (0..210).map(|i| ((i * 37) % 23) as f32 - 11.0).collect(),
    );
    let xh = Tensor::from_vec(
        vec![2, 3, 5, 7],
        x.view::<f32>()
            .unwrap()
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect(),
    );
    for (mode, extra) in modes {
        let attrs = [vec![("mode", s(mode))], extra].concat();
        let o = op("Resize", 19, attrs, 4).unwrap();
        let scales = Tensor::from_vec(vec![4], vec![1.0f32, 1.0, 1.6, 0.6]);
        let sizes = i64s(&[2, 3, 9, 4]);
        let xu = Tensor::from_vec(
            vec![2, 3, 5, 7],
            x.view::<f32>()
                .unwrap()
                .iter()
                .map(|&v| (v * 11.0 + 128.0) as u8)
                .collect(),
        );
        for t in [&x, &xh, &xu] {
            gpu_close(
                o.as_ref(),
                &[Some(t), None, Some(&scales)],
                &format!("{mode} scales"),
            );
            gpu_close(
                o.as_ref(),
                &[Some(t), None, None, Some(&sizes)],
                &format!("{mode} sizes"),
            );
        }
    }
    let crop = op(
        "Resize",
        19,
        vec![
            ("mode", s("linear")),
            ("coordinate_transformation_mode", s("tf_crop_and_resize")),
            ("extrapolation_value", AttrValue::Float(7.0)),
            ("axes", ints(&[2, 3])),
            ("keep_aspect_ratio_policy", s("not_larger")),
        ],
        4,
    )
    .unwrap();
    let roi = Tensor::from_vec(vec![4], vec![0.2f32, -0.3, 1.2, 0.9]);
    gpu_close(
        crop.as_ref(),
        &[Some(&x), Some(&roi), None, Some(&i64s(&[8, 8]))],
        "crop",
    );
}

#[test]
fn roi_is_needed_only_for_tf_crop_and_resize() {
    let x = Tensor::zeros(DType::F32, vec![1, 4]);
    let roi = Tensor::from_vec(vec![4], vec![0f32, 0.0, 1.0, 1.0]);
    let scales = Tensor::from_vec(vec![2], vec![1f32, 2.0]);
    let ins = [Some(&x), Some(&roi), Some(&scales)];
    let plain = op("Resize", 13, vec![], 3).unwrap();
    assert_eq!(
        infer_partly(plain.as_ref(), &ins, &[0, 2]).unwrap()[0].shape,
        [1, 8]
    );
    let crop = op(
        "Resize",
        13,
        vec![("coordinate_transformation_mode", s("tf_crop_and_resize"))],
        3,
    )
    .unwrap();
    assert_eq!(
        infer_partly(crop.as_ref(), &ins, &[0, 2]).unwrap_err(),
        OpError::NeedsValue(1)
    );
    assert_eq!(
        infer_partly(plain.as_ref(), &ins, &[0, 1]).unwrap_err(),
        OpError::NeedsValue(2)
    );
}

#[test]
fn gpu_antialias_matches_cpu() {
    let x = Tensor::from_vec(
        vec![1, 2, 12, 9],
        (0..216).map(|i| ((i * 29) % 31) as f32 - 15.0).collect(),
    );
    for mode in ["linear", "cubic"] {
        let o = op(
            "Resize",
            18,
            vec![("mode", s(mode)), ("antialias", AttrValue::Int(1))],
            4,
        )
        .unwrap();
        // Cubic's kernel is twice as wide: shrink it less to stay within the shader's taps.
        let h = if mode == "linear" { 0.3f32 } else { 0.5 };
        let scales = Tensor::from_vec(vec![4], vec![1.0f32, 1.0, h, 0.6]);
        gpu_close(
            o.as_ref(),
            &[Some(&x), None, Some(&scales)],
            "antialias scales",
        );
        let sizes = i64s(&[1, 2, 5, 4]);
        gpu_close(
            o.as_ref(),
            &[Some(&x), None, None, Some(&sizes)],
            "antialias sizes",
        );
    }
    // Shrinking 12 -> 1 with cubic needs more taps than the shader holds: CPU only.
    let o = op(
        "Resize",
        18,
        vec![("mode", s("cubic")), ("antialias", AttrValue::Int(1))],
        4,
    )
    .unwrap();
    let types = [ValueType::of(&x), ValueType::new(DType::I64, vec![4])];
    let out = [ValueType::new(DType::F32, vec![1, 2, 1, 9])];
    assert!(
        o.gpu(&[Some(&types[0]), None, None, Some(&types[1])], &out)
            .is_none()
    );
}
