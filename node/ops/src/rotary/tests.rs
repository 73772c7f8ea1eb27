//! The rotary embeddings against hand-derived values, the two layouts against each other, and
//! the shader against the CPU kernel.

use crate::tensor::Tensor;
use crate::testkit::{Rng, assert_close, f64s, gpu_matches_cpu, run};
use crate::{AttrValue, Attrs, InferInput, MS_DOMAIN, NodeSpec, Op, OpError, ValueType};

fn build(domain: &str, attrs: &[(&str, AttrValue)]) -> Result<Box<dyn Op>, OpError> {
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
            op_type: "RotaryEmbedding",
            attrs: &attrs,
            opset: 23,
            num_inputs: 4,
            num_outputs: 1,
        },
    )
}

fn t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn ids(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn int(v: i64) -> AttrValue {
    AttrValue::Int(v)
}

#[test]
fn onnx_rotary_by_hand() {
    // One head of 4: column 0 turns by 90 degrees (cos 0, sin 1), column 1 not at all.
    let x = t(&[1, 1, 1, 4], &[1., 2., 3., 4.]);
    let (cos, sin) = (t(&[1, 2], &[0., 1.]), t(&[1, 2], &[1., 0.]));
    let pos = ids(&[1, 1], &[0]);
    let ins = [Some(&x), Some(&cos), Some(&sin), Some(&pos)];
    // Halves: the pairs are (0, 2) and (1, 3); (x0, x2) = (1, 3) turns into (-3, 1).
    let y = run(&*build("", &[]).unwrap(), &ins).unwrap();
    assert_close(&f64s(&y[0]), &[-3., 2., 1., 4.], 1e-7);
    // Interleaved: the pairs are (0, 1) and (2, 3); (1, 2) turns into (-2, 1).
    let y = run(&*build("", &[("interleaved", int(1))]).unwrap(), &ins).unwrap();
    assert_close(&f64s(&y[0]), &[-2., 1., 3., 4.], 1e-7);
    // Partial: only the first 2 elements rotate, (x0, x1) = (1, 2) into (-2, 1).
    let (c1, s1) = (t(&[1, 1], &[0.]), t(&[1, 1], &[1.]));
    let o = build("", &[("rotary_embedding_dim", int(2))]).unwrap();
    let y = run(&*o, &[Some(&x), Some(&c1), Some(&s1), Some(&pos)]).unwrap();
    assert_close(&f64s(&y[0]), &[-2., 1., 3., 4.], 1e-7);
    // Without position_ids the caches are per token: [B, S, rot / 2].
    let o = build("", &[]).unwrap();
    let y = run(
        &*o,
        &[
            Some(&x),
            Some(&t(&[1, 1, 2], &[0., 1.])),
            Some(&t(&[1, 1, 2], &[1., 0.])),
        ],
    )
    .unwrap();
    assert_close(&f64s(&y[0]), &[-3., 2., 1., 4.], 1e-7);
}

#[test]
fn ms_rotary_takes_a_start_offset() {
    // Two tokens of one head [1, 2, 4]; offset 1 puts them at cache rows 1 and 2: row 1 turns
    // column 0 by 90 degrees, row 2 by 180; row 0 (the identity) is never used.
    let x = t(&[1, 2, 4], &[1., 2., 3., 4., 1., 2., 3., 4.]);
    let cos = t(&[3, 2], &[1., 1., 0., 1., -1., 1.]);
    let sin = t(&[3, 2], &[0., 0., 1., 0., 0., 0.]);
    let o = build(MS_DOMAIN, &[("num_heads", int(1))]).unwrap();
    let want = [-3., 2., 1., 4., -1., 2., -3., 4.];
    for pos in [ids(&[1], &[1]), ids(&[], &[1])] {
        let y = run(&*o, &[Some(&x), Some(&pos), Some(&cos), Some(&sin)]).unwrap();
        assert_close(&f64s(&y[0]), &want, 1e-7);
    }
    // The same rows given per token.
    let y = run(
        &*o,
        &[
            Some(&x),
            Some(&ids(&[1, 2], &[1, 2])),
            Some(&cos),
            Some(&sin),
        ],
    )
    .unwrap();
    assert_close(&f64s(&y[0]), &want, 1e-7);
    // Without num_heads the head size is twice the caches' width.
    let o = build(MS_DOMAIN, &[]).unwrap();
    let y = run(
        &*o,
        &[Some(&x), Some(&ids(&[1], &[1])), Some(&cos), Some(&sin)],
    )
    .unwrap();
    assert_close(&f64s(&y[0]), &want, 1e-7);
}

#[test]
fn positions_outside_the_caches_are_errors() {
    let x = t(&[1, 2, 4], &[1.; 8]);
    let (cos, sin) = (t(&[3, 2], &[1.; 6]), t(&[3, 2], &[0.; 6]));
    let o = build(MS_DOMAIN, &[("num_heads", int(1))]).unwrap();
    // Offset 2: the second token is at row 3 of 3.
    for pos in [ids(&[1], &[2]), ids(&[1, 2], &[0, -1])] {
        let ins = [Some(&x), Some(&pos), Some(&cos), Some(&sin)];
        let err = run(&*o, &ins).unwrap_err();
        assert!(
            err.to_string()
                .contains("out of range for caches of 3 rows"),
            "{err}"
        );
        let types: Vec<ValueType> = ins.iter().map(|t| ValueType::of(t.unwrap())).collect();
        let planned: Vec<_> = ins
            .iter()
            .zip(&types)
            .map(|(t, ty)| Some(InferInput { ty, value: *t }))
            .collect();
        assert!(o.check_values(&planned).is_err());
        match crate::testkit::gpu::run_op(&*o, &ins, &[types[0].clone()]) {
            Err(e) if e == "skipped" => {}
            Err(e) => assert!(e.contains("out of range"), "{e}"),
            Ok(_) => panic!("the GPU kernel took position {pos:?}"),
        }
    }
}

#[test]
fn rotary_rejects_bad_nodes() {
    let packed = build(MS_DOMAIN, &[("is_packed_batching", int(1))]).unwrap_err();
    assert!(matches!(packed, OpError::Unsupported(_)), "{packed}");
    assert!(build(MS_DOMAIN, &[("rotary_embedding_dim", int(4))]).is_err());
    let x3 = t(&[1, 1, 8], &[1.; 8]);
    let (cos, sin) = (t(&[4, 2], &[1.; 8]), t(&[4, 2], &[0.; 8]));
    let pos = ids(&[1, 1], &[0]);
    // ONNX's 3-D input needs num_heads.
    assert!(
        run(
            &*build("", &[]).unwrap(),
            &[Some(&x3), Some(&cos), Some(&sin), Some(&pos)]
        )
        .is_err()
    );
    // Caches of the wrong width for the head (8 / 2 heads = 4, so 2 columns needed).
    let o = build("", &[("num_heads", int(1))]).unwrap();
    let err = run(&*o, &[Some(&x3), Some(&cos), Some(&sin), Some(&pos)]).unwrap_err();
    assert!(err.to_string().contains("columns"), "{err}");
    let o = build("", &[("num_heads", int(2))]).unwrap();
    assert!(run(&*o, &[Some(&x3), Some(&cos), Some(&sin), Some(&pos)]).is_ok());
    // An odd rotary dimension.
    let o = build(
        "",
        &[("num_heads", int(2)), ("rotary_embedding_dim", int(3))],
    )
    .unwrap();
    assert!(run(&*o, &[Some(&x3), Some(&cos), Some(&sin), Some(&pos)]).is_err());
}

/// [B, H, S, D] into [B, S, H * D].
fn to_bshd(x: &[f64], b: usize, h: usize, s: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for (bi, hi, si, di) in (0..b).flat_map(|bi| {
        (0..h).flat_map(move |hi| (0..s).flat_map(move |si| (0..d).map(move |di| (bi, hi, si, di))))
    }) {
        out[((bi * s + si) * h + hi) * d + di] = x[((bi * h + hi) * s + si) * d + di];
    }
    out
}

#[test]
fn both_layouts_rotate_alike() {
    let mut rng = Rng::new(41);
    let (b, h, s, d) = (2, 3, 4, 8);
    let x = f64s(&rng.tensor_f32(&[b, h, s, d]));
    let x4 = Tensor::from_vec(vec![b, h, s, d], x.clone());
    let x3 = Tensor::from_vec(vec![b, s, h * d], to_bshd(&x, b, h, s, d));
    let cos = Tensor::from_vec(vec![10, 3], rng.f64s(30));
    let sin = Tensor::from_vec(vec![10, 3], rng.f64s(30));
    let pos = ids(&[b, s], &[3, 1, 4, 1, 5, 9, 2, 6]);
    for interleaved in [0, 1] {
        let attrs = [
            ("interleaved", int(interleaved)),
            ("rotary_embedding_dim", int(6)),
            ("num_heads", int(h as i64)),
        ];
        let o = build("", &attrs).unwrap();
        let y4 = run(&*o, &[Some(&x4), Some(&cos), Some(&sin), Some(&pos)]).unwrap();
        let y3 = run(&*o, &[Some(&x3), Some(&cos), Some(&sin), Some(&pos)]).unwrap();
        assert_close(&to_bshd(&f64s(&y4[0]), b, h, s, d), &f64s(&y3[0]), 1e-12);
        let m = build(MS_DOMAIN, &attrs).unwrap();
        let ym = run(&*m, &[Some(&x3), Some(&pos), Some(&cos), Some(&sin)]).unwrap();
        assert_close(&f64s(&ym[0]), &f64s(&y3[0]), 1e-12);
        // The last 2 elements of every head pass through.
        let y = f64s(&y4[0]);
        assert!((0..x.len()).filter(|i| i % d >= 6).all(|i| y[i] == x[i]));
    }
}

fn f16(t: &Tensor) -> Tensor {
    Tensor::from_vec(
        t.shape().to_vec(),
        f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
    )
}

#[test]
fn gpu_rotary_matches_cpu() {
    let mut rng = Rng::new(42);
    let cos = rng.tensor_f32(&[40, 8]);
    let sin = rng.tensor_f32(&[40, 8]);
    let (cos4, sin4) = (rng.tensor_f32(&[40, 2]), rng.tensor_f32(&[40, 2]));
    let pos: Vec<i64> = (0..2 * 5).map(|i| (i * 7 % 40) as i64).collect();
    let pos = ids(&[2, 5], &pos);
    let x4 = rng.tensor_f32(&[2, 3, 5, 16]);
    let x3 = rng.tensor_f32(&[2, 5, 48]);
    let check = |o: &dyn Op, ins: &[Option<&Tensor>]| {
        gpu_matches_cpu(o, ins, 1e-5);
        let hs: Vec<Tensor> = ins
            .iter()
            .map(|t| {
                let t = t.unwrap();
                if t.dtype() == crate::tensor::DType::F32 {
                    f16(t)
                } else {
                    t.clone()
                }
            })
            .collect();
        let hr: Vec<Option<&Tensor>> = hs.iter().map(Some).collect();
        gpu_matches_cpu(o, &hr, 2e-3);
    };
    for il in [0, 1] {
        let o = build("", &[("interleaved", int(il))]).unwrap();
        check(&*o, &[Some(&x4), Some(&cos), Some(&sin), Some(&pos)]);
        let o = build(
            "",
            &[
                ("interleaved", int(il)),
                ("num_heads", int(3)),
                ("rotary_embedding_dim", int(4)),
            ],
        )
        .unwrap();
        check(&*o, &[Some(&x3), Some(&cos4), Some(&sin4), Some(&pos)]);
        // Per-token caches, no position_ids.
        let (ct, st) = (rng.tensor_f32(&[2, 5, 8]), rng.tensor_f32(&[2, 5, 8]));
        let o = build("", &[("interleaved", int(il))]).unwrap();
        check(&*o, &[Some(&x4), Some(&ct), Some(&st)]);
        let m = build(
            MS_DOMAIN,
            &[("interleaved", int(il)), ("num_heads", int(3))],
        )
        .unwrap();
        check(&*m, &[Some(&x3), Some(&pos), Some(&cos), Some(&sin)]);
        check(
            &*m,
            &[Some(&x4), Some(&ids(&[1], &[30])), Some(&cos), Some(&sin)],
        );
    }
}
