//! The GELUs against hand-derived values, and the shader against the CPU kernel.

use crate::tensor::Tensor;
use crate::testkit::{Rng, assert_close, f64s, gpu_matches_cpu, run};
use crate::{AttrValue, Attrs, MS_DOMAIN, NodeSpec, Op, OpError};

fn build(
    op_type: &str,
    attrs: &[(&str, AttrValue)],
    inputs: usize,
) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    crate::build_in(
        MS_DOMAIN,
        &NodeSpec {
            name: "t",
            op_type,
            attrs: &attrs,
            opset: 17,
            num_inputs: inputs,
            num_outputs: 1,
        },
    )
}

fn t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

#[test]
fn gelus_by_hand() {
    // BiasGelu(1) = Phi(1) = 0.8413447460685429; (-1) = -(1 - Phi(1)). With A = [0, -2] and
    // B = [1, 1], the inputs are 1 and -1.
    let o = build("BiasGelu", &[], 2).unwrap();
    let y = run(
        &*o,
        &[Some(&t(&[2], &[0., -2.])), Some(&t(&[2], &[1., 1.]))],
    )
    .unwrap();
    let phi1 = 0.841_344_746_068_542_9;
    assert_close(&f64s(&y[0]), &[phi1, -(1.0 - phi1)], 1e-7);
    // FastGelu: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) at 0, 1 and -2.
    let o = build("FastGelu", &[], 1).unwrap();
    let y = run(&*o, &[Some(&t(&[3], &[0., 1., -2.]))]).unwrap();
    assert_close(
        &f64s(&y[0]),
        &[0., 0.841_191_990_608_276_8, -0.045_402_305_912_224_94],
        1e-7,
    );
    // ... and with a bias along the last axis.
    let o = build("FastGelu", &[], 2).unwrap();
    let y = run(
        &*o,
        &[
            Some(&t(&[2, 2], &[0., 1., 2., 0.])),
            Some(&t(&[2], &[1., -3.])),
        ],
    )
    .unwrap();
    assert_close(
        &f64s(&y[0]),
        &[
            0.841_191_990_608_276_8,
            -0.045_402_305_912_224_94,
            2.996_362_607_918_227,
            -0.003_637_392_081_773,
        ],
        1e-6,
    );
    // QuickGelu: x sigmoid(alpha x); sigmoid(ln 3) = 3/4.
    let ln3 = 3f64.ln();
    let o = build("QuickGelu", &[("alpha", AttrValue::Float(1.0))], 1).unwrap();
    let y = run(&*o, &[Some(&t(&[2], &[ln3 as f32, 0.]))]).unwrap();
    assert_close(&f64s(&y[0]), &[0.75 * ln3, 0.], 1e-6);
    // The default alpha is 1.702: x = ln 3 / 1.702.
    let x = ln3 / 1.702;
    let o = build("QuickGelu", &[], 1).unwrap();
    let y = run(&*o, &[Some(&t(&[1], &[x as f32]))]).unwrap();
    assert_close(&f64s(&y[0]), &[0.75 * x], 1e-6);
}

#[test]
fn gelus_reject_bad_biases() {
    assert!(build("BiasGelu", &[], 1).is_err());
    let o = build("FastGelu", &[], 2).unwrap();
    let x = t(&[2, 3], &[1.; 6]);
    let err = run(&*o, &[Some(&x), Some(&t(&[2], &[1.; 2]))]).unwrap_err();
    assert!(err.to_string().contains("bias"), "{err}");
    assert!(run(&*o, &[Some(&x), Some(&t(&[2, 3], &[1.; 6]))]).is_err());
    let o = build("QuickGelu", &[], 2).unwrap();
    assert!(run(&*o, &[Some(&x), Some(&t(&[3], &[1.; 3]))]).is_err());
}

#[test]
fn gpu_gelus_match_cpu() {
    let mut rng = Rng::new(31);
    let x = Tensor::from_vec(
        vec![7, 301],
        rng.f32s(7 * 301).iter().map(|v| v * 12.0).collect(),
    );
    let b = Tensor::from_vec(vec![301], rng.f32s(301).iter().map(|v| v * 2.0).collect());
    let h = |t: &Tensor| {
        Tensor::from_vec(
            t.shape().to_vec(),
            f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
        )
    };
    let (xh, bh) = (h(&x), h(&b));
    let alpha = [("alpha", AttrValue::Float(-0.5))];
    let cases = [
        ("BiasGelu", &[][..], true),
        ("FastGelu", &[], true),
        ("FastGelu", &[], false),
        ("QuickGelu", &[], false),
        ("QuickGelu", &alpha, false),
    ];
    for (op_type, attrs, bias) in cases {
        let o = build(op_type, attrs, 1 + bias as usize).unwrap();
        let pick = |x, b| {
            if bias {
                vec![Some(x), Some(b)]
            } else {
                vec![Some(x)]
            }
        };
        gpu_matches_cpu(&*o, &pick(&x, &b), 1e-5);
        gpu_matches_cpu(&*o, &pick(&xh, &bh), 2e-3);
    }
}
