//! ConvTranspose against hand-scattered 1-D cases, and the shader against the CPU kernel.

use crate::AttrValue;
use crate::tensor::Tensor;
use crate::testkit::{Rng, build, f64s, gpu_matches_cpu, run};

fn ct(attrs: &[(&str, AttrValue)], x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Vec<f64> {
    let op = build("ConvTranspose", 22, attrs).unwrap();
    f64s(&run(&*op, &[Some(x), Some(w), b]).unwrap()[0])
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

#[test]
fn one_d_by_hand() {
    let x = Tensor::from_vec(vec![1, 1, 3], vec![1f32, 2., 3.]);
    let w = Tensor::from_vec(vec![1, 1, 2], vec![1f32, 10.]);
    assert_eq!(ct(&[], &x, &w, None), vec![1., 12., 23., 30.]);
    let s2 = ("strides", ints(&[2]));
    assert_eq!(
        ct(std::slice::from_ref(&s2), &x, &w, None),
        vec![1., 10., 2., 20., 3., 30.]
    );
    let b = Tensor::from_vec(vec![1], vec![5f32]);
    assert_eq!(
        ct(
            &[s2.clone(), ("output_padding", ints(&[1]))],
            &x,
            &w,
            Some(&b)
        ),
        vec![6., 15., 7., 25., 8., 35., 5.]
    );
    assert_eq!(
        ct(&[s2.clone(), ("pads", ints(&[1, 1]))], &x, &w, None),
        vec![10., 2., 20., 3.]
    );
    // output_shape 8 from a span of 6: total padding -2, the larger half (-1) first.
    assert_eq!(
        ct(&[s2.clone(), ("output_shape", ints(&[8]))], &x, &w, None),
        vec![0., 1., 10., 2., 20., 3., 30., 0.]
    );
    // SAME_UPPER: output 6 = 3 * 2, total padding 0.
    let su = ("auto_pad", AttrValue::String("SAME_UPPER".into()));
    assert_eq!(ct(&[s2, su], &x, &w, None), vec![1., 10., 2., 20., 3., 30.]);
    assert_eq!(
        ct(&[("dilations", ints(&[2]))], &x, &w, None),
        vec![1., 2., 13., 20., 30.]
    );
    // Two groups of one channel each.
    let x = Tensor::from_vec(vec![1, 2, 2], vec![1f32, 2., 3., 4.]);
    let w = Tensor::from_vec(vec![2, 1, 1], vec![2f32, 3.]);
    assert_eq!(
        ct(&[("group", AttrValue::Int(2))], &x, &w, None),
        vec![2., 4., 9., 12.]
    );
    let op = build("ConvTranspose", 22, &[]).unwrap();
    let bad = Tensor::from_vec(vec![3, 1, 1], vec![1f32; 3]);
    assert!(run(&*op, &[Some(&x), Some(&bad)]).is_err());
}

/// (X shape, W shape, group, attributes).
type Case<'a> = (&'a [usize], &'a [usize], usize, &'a [(&'a str, AttrValue)]);

#[test]
fn gpu_matches_cpu_on_random_configurations() {
    let mut rng = Rng::new(17);
    let cases: &[Case] = &[
        (
            &[2, 4, 5, 6],
            &[4, 3, 3, 3],
            1,
            &[("strides", AttrValue::Ints(vec![2, 1]))],
        ),
        (
            &[1, 4, 5, 6],
            &[4, 2, 2, 3],
            2,
            &[
                ("pads", AttrValue::Ints(vec![1, 0, 1, 2])),
                ("dilations", AttrValue::Ints(vec![2, 1])),
            ],
        ),
        (
            &[1, 2, 7],
            &[2, 3, 4],
            1,
            &[
                ("strides", AttrValue::Ints(vec![3])),
                ("output_padding", AttrValue::Ints(vec![2])),
            ],
        ),
        (&[1, 1, 3, 4, 5], &[1, 2, 3, 3, 3], 1, &[]),
        (
            &[1, 1, 3, 3],
            &[1, 2, 3, 3],
            1,
            &[
                ("strides", AttrValue::Ints(vec![3, 2])),
                ("output_shape", AttrValue::Ints(vec![10, 8])),
            ],
        ),
    ];
    for (xs, ws, group, attrs) in cases {
        let mut a = attrs.to_vec();
        a.push(("group", AttrValue::Int(*group as i64)));
        let op = build("ConvTranspose", 22, &a).unwrap();
        let x = rng.tensor_f32(xs);
        let w = rng.tensor_f32(ws);
        let b = rng.tensor_f32(&[ws[1] * group]);
        gpu_matches_cpu(&*op, &[Some(&x), Some(&w), Some(&b)], 1e-4);
        gpu_matches_cpu(&*op, &[Some(&x), Some(&w)], 1e-4);
        let h = |t: &Tensor| {
            Tensor::from_vec(
                t.shape().to_vec(),
                f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
            )
        };
        gpu_matches_cpu(&*op, &[Some(&h(&x)), Some(&h(&w)), Some(&h(&b))], 2e-2);
    }
}

/// The GEMM + col2im kernel (cpu.rs) against the scatter definition (`reference`) in f32 and
/// f64: groups, strides, dilations, signed pads, output_padding, 1-D to 3-D, and a layer with
/// enough planes for rayon.
#[test]
fn fast_kernel_matches_the_scatter_definition() {
    use super::{AutoPad, ConvTranspose, reference};
    use crate::Op;
    use crate::tensor::DType;
    type Case = (Vec<usize>, Vec<usize>, usize, [Vec<i64>; 4]);
    let cases: Vec<Case> = vec![
        (
            vec![2, 4, 5, 6],
            vec![4, 3, 3, 3],
            1,
            [vec![2, 1], vec![1, 1], vec![0, 0, 0, 0], vec![0, 0]],
        ),
        (
            vec![1, 6, 5, 7],
            vec![6, 2, 2, 3],
            3,
            [vec![1, 2], vec![2, 1], vec![1, 0, 1, 2], vec![0, 1]],
        ),
        (
            vec![1, 2, 7],
            vec![2, 3, 4],
            1,
            [vec![3], vec![1], vec![0, 0], vec![2]],
        ),
        (
            vec![1, 2, 3, 4, 5],
            vec![2, 2, 3, 2, 3],
            2,
            [vec![1, 2, 1], vec![1, 1, 2], vec![0; 6], vec![0; 3]],
        ),
        (
            vec![1, 3, 4, 4],
            vec![3, 2, 3, 3],
            1,
            [vec![2, 2], vec![1, 1], vec![1, 0, 2, 1], vec![1, 0]],
        ),
        (
            vec![1, 4, 64, 64],
            vec![4, 16, 2, 2],
            1,
            [vec![2, 2], vec![1, 1], vec![0; 4], vec![0, 0]],
        ),
    ];
    let mut rng = Rng::new(29);
    for (xs, ws, group, [strides, dilations, pads, output_padding]) in cases {
        // output_shape 11 x 10 past the 9 x 9 span: negative pads, outputs of the bias alone.
        let output_shape = (xs == [1, 3, 4, 4]).then(|| vec![11, 10]);
        let op = ConvTranspose {
            auto_pad: AutoPad::NotSet,
            group,
            kernel_shape: None,
            strides: Some(strides),
            dilations: Some(dilations),
            pads: Some(pads),
            output_padding: Some(output_padding),
            output_shape,
        };
        let x = rng.tensor_f32(&xs);
        let w = rng.tensor_f32(&ws);
        let b = rng.tensor_f32(&[ws[1] * group]);
        let g = op.geometry(&xs, &ws, Some(b.shape())).unwrap();
        for bias in [None, Some(&b)] {
            let want = reference(&g, &f64s(&x), &f64s(&w), bias.map(f64s).as_deref());
            for dt in [DType::F32, DType::F64] {
                let cast =
                    |t: &Tensor| crate::testkit::tensor(t.shape(), &f64s(t), dt == DType::F64);
                let (xd, wd, bd) = (cast(&x), cast(&w), bias.map(cast));
                let ins = [Some(&xd), Some(&wd), bd.as_ref()];
                let types = crate::testkit::infer_known(&op, &ins).unwrap();
                let got = f64s(&op.run_cpu(&ins, &types).unwrap()[0]);
                assert_eq!(got.len(), want.len(), "{xs:?} {ws:?}");
                let tol = if dt == DType::F32 { 1e-4 } else { 1e-12 };
                for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - e).abs() <= tol * (1.0 + e.abs()),
                        "{xs:?} {ws:?} {dt} bias {}: y[{i}] = {a}, want {e}",
                        bias.is_some()
                    );
                }
            }
        }
    }
}
