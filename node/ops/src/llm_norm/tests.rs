//! The LLM norms against hand-derived values, and the shader against the CPU kernel.

use crate::tensor::Tensor;
use crate::testkit::{Rng, assert_close, f64s, gpu_matches_cpu, run};
use crate::{AttrValue, Attrs, MS_DOMAIN, NodeSpec, Op, OpError};

fn build(
    domain: &str,
    op_type: &str,
    attrs: &[(&str, AttrValue)],
    outs: usize,
) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    crate::build_in(
        domain,
        &NodeSpec {
            name: "t",
            op_type,
            attrs: &attrs,
            opset: 23,
            num_inputs: 5,
            num_outputs: outs,
        },
    )
}

fn op(domain: &str, op_type: &str, attrs: &[(&str, AttrValue)], outs: usize) -> Box<dyn Op> {
    build(domain, op_type, attrs, outs).unwrap()
}

fn t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn eps0() -> [(&'static str, AttrValue); 1] {
    [("epsilon", AttrValue::Float(0.0))]
}

#[test]
fn rms_norm_by_hand() {
    // Row [3, 4, 0, 0]: mean square 25 / 4, so divide by 2.5; row [1, 1, 1, 1]: by 1.
    let x = t(&[2, 4], &[3., 4., 0., 0., 1., 1., 1., 1.]);
    let s = t(&[4], &[1., 2., 1., 1.]);
    let want = [1.2, 3.2, 0., 0., 1., 2., 1., 1.];
    let y = run(
        &*op("", "RMSNormalization", &eps0(), 1),
        &[Some(&x), Some(&s)],
    )
    .unwrap();
    assert_eq!(y.len(), 1);
    assert_close(&f64s(&y[0]), &want, 1e-6);
    // SimplifiedLayerNormalization (either domain) is the same norm, and adds inv_std_var.
    for domain in ["", MS_DOMAIN] {
        let o = op(domain, "SimplifiedLayerNormalization", &eps0(), 2);
        let y = run(&*o, &[Some(&x), Some(&s)]).unwrap();
        assert_close(&f64s(&y[0]), &want, 1e-6);
        assert_eq!(y[1].shape(), &[2, 1]);
        assert_close(&f64s(&y[1]), &[0.4, 1.0], 1e-6);
    }
    // The default epsilon is 1e-5: row [1, 1, 1, 1] divides by sqrt(1 + 1e-5).
    let y = run(&*op("", "RMSNormalization", &[], 1), &[Some(&x), Some(&s)]).unwrap();
    assert_close(&f64s(&y[0])[4..5], &[1.0 / 1.00001f64.sqrt()], 1e-7);
}

#[test]
fn rms_norm_axes_and_broadcast_scales() {
    // axis 0: the whole [[3, 0], [0, 4]] is one row (divide by 2.5); the scale [[1], [2]]
    // varies along the first normalised axis only.
    let x = t(&[2, 2], &[3., 0., 0., 4.]);
    let o = op(
        "",
        "RMSNormalization",
        &[
            ("axis", AttrValue::Int(0)),
            ("epsilon", AttrValue::Float(0.0)),
        ],
        1,
    );
    let y = run(&*o, &[Some(&x), Some(&t(&[2, 1], &[1., 2.]))]).unwrap();
    assert_close(&f64s(&y[0]), &[1.2, 0., 0., 3.2], 1e-6);
    // A scale that varies across rows (it broadcasts to the input, not to one row): row
    // [3, 4] divides by sqrt(12.5) with scale 1, row [6, 8] by sqrt(50) with scale 2.
    let x = t(&[2, 2], &[3., 4., 6., 8.]);
    let s = t(&[2, 1], &[1., 2.]);
    let o = op("", "RMSNormalization", &eps0(), 1);
    let y = run(&*o, &[Some(&x), Some(&s)]).unwrap();
    let (a, b) = (12.5f64.sqrt(), 50f64.sqrt());
    assert_close(&f64s(&y[0]), &[3. / a, 4. / a, 12. / b, 16. / b], 1e-6);
    // The shader takes only scales that are the same for every row.
    let types = [
        Some(crate::ValueType::of(&x)),
        Some(crate::ValueType::of(&s)),
    ];
    let refs: Vec<_> = types.iter().map(Option::as_ref).collect();
    assert!(o.gpu(&refs, &[crate::ValueType::of(&x)]).is_none());
    // A scale of another type gives Y that type.
    let h = Tensor::from_vec(vec![2], vec![half::f16::from_f32(1.0); 2]);
    let y = run(&*o, &[Some(&x), Some(&h)]).unwrap();
    assert_eq!(y[0].dtype(), crate::tensor::DType::F16);
}

#[test]
fn rms_norm_rejects_bad_nodes() {
    let x = t(&[2, 4], &[1.; 8]);
    let o = op("", "RMSNormalization", &[], 1);
    let err = run(&*o, &[Some(&x), Some(&t(&[3], &[1.; 3]))]).unwrap_err();
    assert!(err.to_string().contains("does not broadcast"), "{err}");
    let o = op("", "RMSNormalization", &[("axis", AttrValue::Int(2))], 1);
    assert!(run(&*o, &[Some(&x), Some(&t(&[4], &[1.; 4]))]).is_err());
    assert!(build("", "RMSNormalization", &[], 2).is_err());
    assert!(
        build(
            "",
            "RMSNormalization",
            &[("stash_type", AttrValue::Int(7))],
            1
        )
        .is_err()
    );
}

#[test]
fn skip_norms_by_hand() {
    // v = input + skip (+ bias) = [3, 4] and [1, 1].
    let x = t(&[2, 2], &[1., 2., 0., 2.]);
    let skip = t(&[2, 2], &[2., 2., 1., -1.]);
    let gamma = t(&[2], &[1., 2.]);
    let o = op(MS_DOMAIN, "SkipSimplifiedLayerNormalization", &eps0(), 4);
    let y = run(&*o, &[Some(&x), Some(&skip), Some(&gamma)]).unwrap();
    let a = 12.5f64.sqrt();
    assert_close(&f64s(&y[0]), &[3. / a, 8. / a, 1., 2.], 1e-6);
    assert_eq!(y[1].shape(), &[2, 1]);
    assert_close(&f64s(&y[1]), &[0., 0.], 0.0);
    assert_close(&f64s(&y[2]), &[1. / a, 1.], 1e-6);
    assert_close(&f64s(&y[3]), &[3., 4., 1., 1.], 0.0);
    // Layer norm of [3, 4]: mean 3.5, variance 0.25, so [-1, 1] * gamma + beta; a bias of
    // [1, 1] shifts v (and the mean) but not y. Row [1, 1] has variance 0: epsilon 1 makes
    // it finite.
    let o = op(
        MS_DOMAIN,
        "SkipLayerNormalization",
        &[("epsilon", AttrValue::Float(0.0))],
        4,
    );
    let beta = t(&[2], &[10., 20.]);
    let bias = t(&[2], &[1., 1.]);
    let ins = [
        Some(&x),
        Some(&skip),
        Some(&gamma),
        Some(&beta),
        Some(&bias),
    ];
    let y = run(&*o, &[ins[0], ins[1], ins[2], ins[3], ins[4]]).unwrap();
    assert_close(&f64s(&y[0])[..2], &[9., 22.], 1e-6);
    assert_close(&f64s(&y[1]), &[4.5, 2.], 1e-6);
    assert_close(&f64s(&y[2])[..1], &[2.], 1e-6);
    assert_close(&f64s(&y[3]), &[4., 5., 2., 2.], 0.0);
    let o = op(
        MS_DOMAIN,
        "SkipLayerNormalization",
        &[("epsilon", AttrValue::Float(1.0))],
        1,
    );
    let y = run(&*o, &[Some(&x), Some(&skip), Some(&gamma)]).unwrap();
    assert_eq!(y.len(), 1);
    assert_close(&f64s(&y[0])[2..], &[0., 0.], 1e-6);
    // The skip may lack the batch axis: both batches add the same [2, 2].
    let x3 = t(&[2, 1, 2], &[1., 2., 0., 1.]);
    let o = op(MS_DOMAIN, "SkipSimplifiedLayerNormalization", &eps0(), 4);
    let y = run(
        &*o,
        &[Some(&x3), Some(&t(&[1, 2], &[2., 2.])), Some(&gamma)],
    )
    .unwrap();
    assert_close(&f64s(&y[3]), &[3., 4., 2., 3.], 0.0);
}

#[test]
fn skip_norms_reject_bad_shapes() {
    let x = t(&[1, 2, 2], &[1.; 4]);
    let g = t(&[2], &[1.; 2]);
    let o = op(MS_DOMAIN, "SkipLayerNormalization", &[], 1);
    // A skip with a batch of 2 for an input with 1.
    let err = run(&*o, &[Some(&x), Some(&t(&[2, 2, 2], &[1.; 8])), Some(&g)]).unwrap_err();
    assert!(err.to_string().contains("skip"), "{err}");
    let err = run(&*o, &[Some(&x), Some(&x), Some(&t(&[4], &[1.; 4]))]).unwrap_err();
    assert!(err.to_string().contains("gamma"), "{err}");
    assert!(
        run(
            &*o,
            &[
                Some(&t(&[4], &[1.; 4])),
                Some(&t(&[4], &[1.; 4])),
                Some(&t(&[4], &[1.; 4]))
            ]
        )
        .is_err()
    );
    assert!(build(MS_DOMAIN, "SkipLayerNormalization", &[], 5).is_err());
}

fn to_f16(t: &Tensor) -> Tensor {
    Tensor::from_vec(
        t.shape().to_vec(),
        f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
    )
}

/// The shader against the CPU kernel, in f32 and f16, on `inputs` of these shapes (`None`:
/// an absent optional input).
fn gpu_check(o: &dyn Op, shapes: &[Option<&[usize]>], rng: &mut Rng) {
    let ts: Vec<Option<Tensor>> = shapes
        .iter()
        .map(|s| {
            s.map(|s| {
                let n = s.iter().product();
                Tensor::from_vec(
                    s.to_vec(),
                    rng.f32s(n).iter().map(|v| v * 3.0 + 0.5).collect(),
                )
            })
        })
        .collect();
    let ins: Vec<Option<&Tensor>> = ts.iter().map(Option::as_ref).collect();
    gpu_matches_cpu(o, &ins, 1e-4);
    let hs: Vec<Option<Tensor>> = ts.iter().map(|t| t.as_ref().map(to_f16)).collect();
    let ins: Vec<Option<&Tensor>> = hs.iter().map(Option::as_ref).collect();
    gpu_matches_cpu(o, &ins, 2e-2);
}

#[test]
fn gpu_rms_norms_match_cpu() {
    let mut rng = Rng::new(21);
    let rms =
        |attrs: &[(&str, AttrValue)], outs| op("", "SimplifiedLayerNormalization", attrs, outs);
    gpu_check(&*rms(&[], 2), &[Some(&[3, 5, 600]), Some(&[600])], &mut rng);
    let axis1 = [("axis", AttrValue::Int(1))];
    gpu_check(
        &*rms(&axis1, 2),
        &[Some(&[2, 3, 4, 5]), Some(&[3, 4, 5])],
        &mut rng,
    );
    // Scales broadcast within the row: along the middle axis only, and one value.
    gpu_check(
        &*rms(&axis1, 1),
        &[Some(&[2, 3, 4, 5]), Some(&[4, 1])],
        &mut rng,
    );
    gpu_check(
        &*rms(&axis1, 1),
        &[Some(&[2, 3, 4, 5]), Some(&[1, 1, 1, 1])],
        &mut rng,
    );
    let o = op("", "RMSNormalization", &[("axis", AttrValue::Int(0))], 1);
    gpu_check(&*o, &[Some(&[7, 9]), Some(&[7, 9])], &mut rng);
    // More rows than one grid axis holds.
    let o = op("", "RMSNormalization", &[], 1);
    gpu_check(&*o, &[Some(&[66_000, 3]), Some(&[3])], &mut rng);
    // Rows of 4096 (the longest the shader keeps in registers) and 5000 (read in each pass).
    gpu_check(&*o, &[Some(&[2, 4096]), Some(&[4096])], &mut rng);
    gpu_check(&*o, &[Some(&[2, 5000]), Some(&[5000])], &mut rng);
}

#[test]
fn gpu_skip_norms_match_cpu() {
    let mut rng = Rng::new(22);
    let (x, h): (&[usize], &[usize]) = (&[2, 3, 300], &[300]);
    for outs in [1, 2, 4] {
        let o = op(MS_DOMAIN, "SkipLayerNormalization", &[], outs);
        gpu_check(
            &*o,
            &[Some(x), Some(x), Some(h), Some(h), Some(h)],
            &mut rng,
        );
        gpu_check(
            &*o,
            &[Some(x), Some(&[3, 300]), Some(h), None, Some(h)],
            &mut rng,
        );
        gpu_check(
            &*o,
            &[Some(x), Some(&[1, 3, 300]), Some(h), Some(h)],
            &mut rng,
        );
        let o = op(MS_DOMAIN, "SkipSimplifiedLayerNormalization", &[], outs);
        gpu_check(&*o, &[Some(x), Some(x), Some(h), Some(h)], &mut rng);
        gpu_check(&*o, &[Some(&[6, 300]), Some(&[6, 300]), Some(h)], &mut rng);
    }
    // A layer norm (mean subtracted) over rows longer than the registers keep.
    let (x, h): (&[usize], &[usize]) = (&[2, 4200], &[4200]);
    let o = op(MS_DOMAIN, "SkipLayerNormalization", &[], 4);
    gpu_check(
        &*o,
        &[Some(x), Some(x), Some(h), Some(h), Some(h)],
        &mut rng,
    );
}
