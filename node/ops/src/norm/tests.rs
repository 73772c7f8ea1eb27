//! Normalisations against hand-derived values, and the shader against the CPU kernel.

use crate::tensor::Tensor;
use crate::testkit::{Rng, assert_close, f64s, gpu_matches_cpu, run};
use crate::{AttrValue, Attrs, NodeSpec, Op};

fn op(op_type: &str, opset: i64, attrs: &[(&str, AttrValue)], outs: usize) -> Box<dyn Op> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    crate::build(&NodeSpec {
        name: "t",
        op_type,
        attrs: &attrs,
        opset,
        num_inputs: 3,
        num_outputs: outs,
    })
    .unwrap()
}

fn t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

#[test]
fn layer_norm_by_hand() {
    // Row [1, 2, 3, 6]: mean 3, var (4 + 1 + 0 + 9) / 4 = 3.5.
    let x = t(&[2, 4], &[1., 2., 3., 6., 0., 0., 0., 0.]);
    let s = t(&[4], &[1., 2., 1., 1.]);
    let b = t(&[4], &[0., 0., 0., 10.]);
    let o = op(
        "LayerNormalization",
        17,
        &[("epsilon", AttrValue::Float(0.5))],
        3,
    );
    let y = run(&*o, &[Some(&x), Some(&s), Some(&b)]).unwrap();
    let inv = 1.0 / 4f64.sqrt();
    let want = [-2. * inv, -2. * inv, 0., 3. * inv + 10., 0., 0., 0., 10.];
    assert_close(&f64s(&y[0]), &want, 1e-6);
    assert_eq!(y[1].shape(), &[2, 1]);
    assert_close(&f64s(&y[1]), &[3., 0.], 1e-6);
    assert_close(&f64s(&y[2]), &[inv, 1.0 / 0.5f64.sqrt()], 1e-6);
    // axis 0 with a broadcast scale of one element and no bias: the whole tensor is one row.
    let o = op(
        "LayerNormalization",
        17,
        &[
            ("axis", AttrValue::Int(0)),
            ("epsilon", AttrValue::Float(0.0)),
        ],
        1,
    );
    let y = run(&*o, &[Some(&t(&[2], &[1., 3.])), Some(&t(&[1], &[2.]))]).unwrap();
    assert_eq!(y.len(), 1);
    assert_close(&f64s(&y[0]), &[-2., 2.], 1e-6);
}

#[test]
fn instance_and_group_norm_by_hand() {
    // N=1, C=2, spatial 2: channel 0 [1, 3], channel 1 [0, 4].
    let x = t(&[1, 2, 2], &[1., 3., 0., 4.]);
    let o = op(
        "InstanceNormalization",
        22,
        &[("epsilon", AttrValue::Float(0.0))],
        1,
    );
    let y = run(
        &*o,
        &[
            Some(&x),
            Some(&t(&[2], &[1., 2.])),
            Some(&t(&[2], &[0., 1.])),
        ],
    )
    .unwrap();
    assert_close(&f64s(&y[0]), &[-1., 1., -1., 3.], 1e-6);
    // One group over both channels: mean 2, var (1 + 1 + 4 + 4) / 4 = 2.5.
    let g = [
        ("num_groups", AttrValue::Int(1)),
        ("epsilon", AttrValue::Float(0.0)),
    ];
    let r = 1.0 / 2.5f64.sqrt();
    let o = op("GroupNormalization", 21, &g, 1);
    let y = run(
        &*o,
        &[
            Some(&x),
            Some(&t(&[2], &[1., 2.])),
            Some(&t(&[2], &[0., 1.])),
        ],
    )
    .unwrap();
    assert_close(&f64s(&y[0]), &[-r, r, -4. * r + 1., 4. * r + 1.], 1e-6);
    // Opset 18: scale and bias per group.
    let o = op("GroupNormalization", 18, &g, 1);
    let y = run(
        &*o,
        &[Some(&x), Some(&t(&[1], &[2.])), Some(&t(&[1], &[1.]))],
    )
    .unwrap();
    assert_close(
        &f64s(&y[0]),
        &[-2. * r + 1., 2. * r + 1., -4. * r + 1., 4. * r + 1.],
        1e-6,
    );
    assert!(
        run(
            &*op(
                "GroupNormalization",
                21,
                &[("num_groups", AttrValue::Int(3))],
                1
            ),
            &[
                Some(&x),
                Some(&t(&[2], &[1., 2.])),
                Some(&t(&[2], &[0., 1.]))
            ]
        )
        .is_err()
    );
}

#[test]
fn mvn_and_lp_norm_by_hand() {
    let x = t(&[1, 2, 1, 2], &[1., 3., 5., 5.]);
    let y = run(&*op("MeanVarianceNormalization", 13, &[], 1), &[Some(&x)]).unwrap();
    // Channel 0: mean 2, std 1; channel 1: std 0, so 0 / 1e-9.
    assert_close(&f64s(&y[0]), &[-1., 1., 0., 0.], 1e-6);
    let x = t(&[2, 2], &[3., 4., -1., 1.]);
    let y = run(&*op("LpNormalization", 22, &[], 1), &[Some(&x)]).unwrap();
    let h = 0.5f64.sqrt();
    assert_close(&f64s(&y[0]), &[0.6, 0.8, -h, h], 1e-6);
    let y = run(
        &*op(
            "LpNormalization",
            22,
            &[("p", AttrValue::Int(1)), ("axis", AttrValue::Int(0))],
            1,
        ),
        &[Some(&x)],
    )
    .unwrap();
    assert_close(&f64s(&y[0]), &[0.75, 0.8, -0.25, 0.2], 1e-6);
}

#[test]
fn gpu_norms_match_cpu() {
    let mut rng = Rng::new(9);
    let mut check = |o: &dyn Op, xs: &[usize], ss: &[usize], bias: bool| {
        let x = Tensor::from_vec(
            xs.to_vec(),
            rng.f32s(xs.iter().product())
                .iter()
                .map(|v| v * 4.0 + 3.0)
                .collect(),
        );
        let s = rng.tensor_f32(ss);
        let b = rng.tensor_f32(ss);
        let ins = [Some(&x), Some(&s), if bias { Some(&b) } else { None }];
        gpu_matches_cpu(o, &ins, 1e-4);
        let h = |t: &Tensor| {
            Tensor::from_vec(
                t.shape().to_vec(),
                f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
            )
        };
        let (xh, sh, bh) = (h(&x), h(&s), h(&b));
        gpu_matches_cpu(
            o,
            &[Some(&xh), Some(&sh), if bias { Some(&bh) } else { None }],
            2e-2,
        );
    };
    check(
        &*op("LayerNormalization", 17, &[], 3),
        &[3, 5, 300],
        &[300],
        true,
    );
    // Mean wanted, InvStdDev not.
    check(
        &*op("LayerNormalization", 17, &[], 2),
        &[4, 33],
        &[33],
        true,
    );
    check(
        &*op("LayerNormalization", 17, &[("axis", AttrValue::Int(1))], 1),
        &[3, 5, 7],
        &[5, 7],
        false,
    );
    check(
        &*op("InstanceNormalization", 22, &[], 1),
        &[2, 3, 4, 5],
        &[3],
        true,
    );
    check(
        &*op(
            "GroupNormalization",
            21,
            &[("num_groups", AttrValue::Int(2))],
            1,
        ),
        &[3, 4, 2, 3],
        &[4],
        true,
    );
    check(
        &*op(
            "GroupNormalization",
            18,
            &[("num_groups", AttrValue::Int(2))],
            1,
        ),
        &[3, 4, 2, 3],
        &[2],
        true,
    );
}

#[test]
fn gpu_mvn_and_lp_norm_match_cpu() {
    let mut rng = Rng::new(10);
    let x = rng.tensor_f32(&[3, 4, 5, 6]);
    let h = Tensor::from_vec(
        x.shape().to_vec(),
        f64s(&x).iter().map(|&v| half::f16::from_f64(v)).collect(),
    );
    let ops = [
        op("MeanVarianceNormalization", 13, &[], 1),
        op(
            "MeanVarianceNormalization",
            13,
            &[("axes", AttrValue::Ints(vec![1, -1]))],
            1,
        ),
        op("LpNormalization", 22, &[], 1),
        op(
            "LpNormalization",
            22,
            &[("p", AttrValue::Int(1)), ("axis", AttrValue::Int(1))],
            1,
        ),
    ];
    for o in &ops {
        gpu_matches_cpu(&**o, &[Some(&x)], 1e-4);
        gpu_matches_cpu(&**o, &[Some(&h)], 2e-2);
    }
}
