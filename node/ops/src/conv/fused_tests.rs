//! com.microsoft FusedConv against the Conv reference of tests.rs with Z and the activation
//! applied in f64 from their definitions (written here, not taken from the unary ops), in f32
//! and f64, on shapes that take each CPU path (direct kernel, im2col + GEMM, depthwise) and
//! outputs large enough for the planes to be finished on rayon; and its input errors.

use super::tests::{Case, data, tensors};
use crate::testkit::{Rng, assert_within, node_in, run, tensor};
use crate::{AttrValue, MS_DOMAIN};

/// (name, params, the definition).
type Act = (&'static str, Vec<f32>, fn(f64, &[f64]) -> f64);

fn activations() -> Vec<Act> {
    vec![
        ("Relu", vec![], |x, _| x.max(0.0)),
        ("Tanh", vec![], |x, _| x.tanh()),
        ("Sigmoid", vec![], |x, _| 1.0 / (1.0 + (-x).exp())),
        ("Silu", vec![], |x, _| x / (1.0 + (-x).exp())),
        (
            "LeakyRelu",
            vec![0.125],
            |x, p| if x < 0.0 { p[0] * x } else { x },
        ),
        ("HardSigmoid", vec![0.25, 0.375], |x, p| {
            (p[0] * x + p[1]).clamp(0.0, 1.0)
        }),
        ("Clip", vec![-0.75, 0.5], |x, p| x.clamp(p[0], p[1])),
    ]
}

fn fused_op(case: &Case, act: &Act, z: bool) -> Box<dyn crate::Op> {
    let mut attrs = case.attrs();
    attrs.push(("activation", AttrValue::String(act.0.into())));
    if !act.1.is_empty() {
        attrs.push(("activation_params", AttrValue::Floats(act.1.clone())));
    }
    node_in(MS_DOMAIN, "FusedConv", 1, attrs, (3 + z as usize, 1)).unwrap()
}

fn check(case: &Case, act: &Act, with_z: bool, rng: &mut Rng) {
    let d = data(case, rng);
    let (shape, conv, mag) = case.reference(&d.x, &d.w, d.b.as_deref());
    let z = rng.values(conv.len());
    let params: Vec<f64> = act.1.iter().map(|&p| p as f64).collect();
    let want: Vec<f64> = conv
        .iter()
        .zip(&z)
        .map(|(&c, &zv)| (act.2)(if with_z { c + zv } else { c }, &params))
        .collect();
    let op = fused_op(case, act, with_z);
    for f64_dtype in [false, true] {
        let mut t = tensors(case, &d, f64_dtype);
        if !case.bias {
            // B omitted, Z (if any) still fourth.
            t.insert(2, tensor(&[0], &[], f64_dtype));
        }
        if with_z {
            t.push(tensor(&shape, &z, f64_dtype));
        }
        let mut inputs: Vec<Option<&crate::Tensor>> = t.iter().map(Some).collect();
        if !case.bias {
            inputs[2] = None;
        }
        let y = &run(op.as_ref(), &inputs).unwrap_or_else(|e| panic!("{case:?} {}: {e}", act.0))[0];
        assert_eq!(y.shape(), shape);
        // The activations change an error by at most their slope (about 1.1 for SiLU); f32's
        // own rounding of the activation adds a few ulps of the result.
        let eps = if f64_dtype { 1e-13 } else { 2e-6 };
        let tol: Vec<f64> = mag
            .iter()
            .zip(&want)
            .map(|(m, w)| 1.2 * eps * (1.0 + m + 1.0) + 4.0 * eps * w.abs())
            .collect();
        let what = format!("{case:?} {} z={with_z} f64={f64_dtype}", act.0);
        assert_within(&y.to_f64_vec().unwrap(), &want, &tol, &what);
    }
}

#[test]
fn every_activation_with_and_without_z_matches_the_definition() {
    let mut rng = Rng::new(41);
    let cases = [
        // The direct kernel's shape (eight or more output channels).
        Case::plain(1, 3, 8, &[7, 6], &[3, 3]),
        // im2col + GEMM, no bias, strided.
        Case {
            strides: vec![2, 1],
            bias: false,
            ..Case::plain(1, 5, 3, &[9, 8], &[3, 2])
        },
        // Depthwise (the whole-plane kernel), 1-D grouped.
        Case::plain(4, 1, 1, &[6, 6], &[3, 3]),
        Case::plain(2, 2, 3, &[11], &[3]),
    ];
    for case in &cases {
        for act in &activations() {
            for z in [false, true] {
                check(case, act, z, &mut rng);
            }
        }
    }
}

#[test]
fn large_outputs_are_finished_plane_by_plane_in_parallel() {
    let mut rng = Rng::new(43);
    // 16 x 128 x 128 outputs: two rayon tasks' worth of planes and more.
    let acts = activations();
    let relu = &acts[0];
    check(
        &Case::plain(1, 2, 16, &[128, 128], &[1, 1]),
        relu,
        true,
        &mut rng,
    );
    check(
        &Case {
            pads: vec![1, 1, 1, 1],
            ..Case::plain(16, 1, 1, &[128, 128], &[3, 3])
        },
        &acts[4],
        true,
        &mut rng,
    );
}

#[test]
fn bad_inputs_and_attributes_are_named() {
    let case = Case::plain(1, 2, 3, &[5, 5], &[3, 3]);
    let x = tensor(&case.x_shape(), &vec![0.5; 50], false);
    let w = tensor(&case.w_shape(), &vec![0.25; 54], false);
    let b = tensor(&[3], &[0.0; 3], false);
    let z_bad = tensor(&[1, 3, 2, 2], &[0.0; 12], false);
    let op = fused_op(&case, &activations()[0], true);
    let err = run(op.as_ref(), &[Some(&x), Some(&w), Some(&b), Some(&z_bad)]).unwrap_err();
    assert!(
        err.to_string().contains("Z must be the output's type"),
        "{err}"
    );
    // Plain Conv takes no fourth input.
    let plain = crate::testkit::node("Conv", 22, case.attrs(), 4, 1);
    assert!(plain.is_err());
    let build = |act: &str, params: Vec<f32>| {
        let mut attrs = case.attrs();
        attrs.push(("activation", AttrValue::String(act.into())));
        attrs.push(("activation_params", AttrValue::Floats(params)));
        node_in(MS_DOMAIN, "FusedConv", 1, attrs, (3, 1))
    };
    let unknown = build("Elu", vec![1.0]).unwrap_err().to_string();
    assert!(
        unknown.contains("'Elu'") && unknown.contains("LeakyRelu"),
        "{unknown}"
    );
    let count = build("Clip", vec![0.0]).unwrap_err().to_string();
    assert!(
        count.contains("takes 2 activation_params, got 1"),
        "{count}"
    );
    // No activation: a Conv plus Z.
    assert!(node_in(MS_DOMAIN, "FusedConv", 1, case.attrs(), (4, 1)).is_ok());
}
