use super::*;
use crate::AttrValue;
use crate::testkit::{Rng, assert_close, gpu_matches_cpu, op, run};

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

fn deform(attrs: Vec<(&str, AttrValue)>, inputs: &[Option<&Tensor>]) -> Vec<f64> {
    let op = op("DeformConv", 19, attrs, inputs.len()).unwrap();
    run(&*op, inputs).unwrap()[0].to_f64_vec().unwrap()
}

fn conv(attrs: Vec<(&str, AttrValue)>, inputs: &[Option<&Tensor>]) -> Vec<f64> {
    let op = op("Conv", 11, attrs, inputs.len()).unwrap();
    run(&*op, inputs).unwrap()[0].to_f64_vec().unwrap()
}

#[test]
fn zero_offsets_are_a_convolution() {
    let mut rng = Rng::new(1);
    let x = rng.tensor_f32(&[2, 4, 7, 8]);
    let w = rng.tensor_f32(&[6, 2, 3, 2]);
    let b = rng.tensor_f32(&[6]);
    let attrs = vec![
        ("group", AttrValue::Int(2)),
        ("pads", ints(&[1, 0, 2, 1])),
        ("strides", ints(&[2, 1])),
        ("dilations", ints(&[1, 2])),
    ];
    let want = conv(attrs.clone(), &[Some(&x), Some(&w), Some(&b)]);
    // oH = (7 + 3 - 3) / 2 + 1 = 4, oW = (8 + 1 - 3) / 1 + 1 = 7; 2 offset groups.
    let offset = Tensor::from_vec(vec![2, 2 * 6 * 2, 4, 7], vec![0f32; 2 * 24 * 28]);
    let mut attrs = attrs;
    attrs.push(("offset_group", AttrValue::Int(2)));
    let got = deform(attrs, &[Some(&x), Some(&w), Some(&offset), Some(&b)]);
    assert_close(&got, &want, 1e-6);
}

#[test]
fn a_whole_pixel_offset_moves_the_window() {
    // Every tap moved one row down: as a convolution with one less row of padding on top
    // and one more at the bottom, a mask of 1 changing nothing.
    let mut rng = Rng::new(2);
    let x = rng.tensor_f32(&[1, 3, 6, 5]);
    let w = rng.tensor_f32(&[2, 3, 3, 3]);
    let want = conv(vec![("pads", ints(&[0, 1, 2, 1]))], &[Some(&x), Some(&w)]);
    let pixels = 6 * 5;
    let offset: Vec<f32> = (0..9 * 2 * pixels)
        .map(|i| if (i / pixels) % 2 == 0 { 1.0 } else { 0.0 })
        .collect();
    let offset = Tensor::from_vec(vec![1, 18, 6, 5], offset);
    let mask = Tensor::from_vec(vec![1, 9, 6, 5], vec![1f32; 9 * pixels]);
    let got = deform(
        vec![("pads", ints(&[1, 1, 1, 1]))],
        &[Some(&x), Some(&w), Some(&offset), None, Some(&mask)],
    );
    assert_close(&got, &want, 1e-6);
}

#[test]
fn half_pixel_offsets_by_hand() {
    // A 1 x 1 kernel of weight 1 reading [[1, 2], [3, 4]] half a pixel down and right: the
    // corners past the input read 0. A mask of 2 and a bias of 1 give 2 v + 1.
    let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![1f32, 2.0, 3.0, 4.0]);
    let w = Tensor::from_vec(vec![1, 1, 1, 1], vec![1f32]);
    let offset = Tensor::from_vec(vec![1, 2, 2, 2], vec![0.5f32; 8]);
    let b = Tensor::from_vec(vec![1], vec![1f32]);
    let mask = Tensor::from_vec(vec![1, 1, 2, 2], vec![2f32; 4]);
    let got = deform(vec![], &[Some(&x), Some(&w), Some(&offset)]);
    assert_close(&got, &[2.5, 1.5, 1.75, 1.0], 1e-12);
    let got = deform(
        vec![],
        &[Some(&x), Some(&w), Some(&offset), Some(&b), Some(&mask)],
    );
    assert_close(&got, &[6.0, 4.0, 4.5, 3.0], 1e-12);
}

#[test]
fn rejects_offsets_of_the_wrong_shape() {
    let x = Tensor::from_vec(vec![1, 2, 4, 4], vec![0f32; 32]);
    let w = Tensor::from_vec(vec![1, 2, 2, 2], vec![0f32; 8]);
    let offset = Tensor::from_vec(vec![1, 4, 3, 3], vec![0f32; 36]);
    let op = op("DeformConv", 19, vec![], 3).unwrap();
    let err = run(&*op, &[Some(&x), Some(&w), Some(&offset)]).unwrap_err();
    assert!(err.to_string().contains("[1, 8, 3, 3]"), "{err}");
}

#[test]
fn gpu_matches_cpu_on_odd_shapes() {
    let mut rng = Rng::new(3);
    // (x, w, group, offset_group, pads, strides, dilations, output pixels, bias, mask)
    type Case<'a> = (
        &'a [usize],
        &'a [usize],
        i64,
        i64,
        &'a [i64],
        &'a [i64],
        &'a [i64],
    );
    let cases: [(Case, [usize; 2], bool, bool); 3] = [
        (
            (
                &[2, 4, 9, 7],
                &[5, 4, 3, 3],
                1,
                2,
                &[1, 1, 1, 1],
                &[1, 1],
                &[1, 1],
            ),
            [9, 7],
            true,
            true,
        ),
        (
            (
                &[1, 6, 11, 10],
                &[6, 2, 2, 3],
                3,
                2,
                &[0, 2, 1, 0],
                &[2, 3],
                &[2, 1],
            ),
            [5, 4],
            false,
            true,
        ),
        (
            (
                &[3, 3, 5, 6],
                &[7, 3, 1, 2],
                1,
                3,
                &[0, 0, 0, 0],
                &[1, 2],
                &[1, 1],
            ),
            [5, 3],
            true,
            false,
        ),
    ];
    for ((xs, ws, group, og, pads, strides, dilations), [oh, ow], bias, mask) in cases {
        let x = rng.tensor_f32(xs);
        let w = rng.tensor_f32(ws);
        let taps = ws[2] * ws[3];
        let og_u = og as usize;
        let offset = Tensor::from_vec(
            vec![xs[0], og_u * taps * 2, oh, ow],
            rng.f32s(xs[0] * og_u * taps * 2 * oh * ow)
                .iter()
                .map(|v| v * 2.5)
                .collect(),
        );
        let b = bias.then(|| rng.tensor_f32(&[ws[0]]));
        let m = mask.then(|| rng.tensor_f32(&[xs[0], og_u * taps, oh, ow]));
        let attrs = vec![
            ("group", AttrValue::Int(group)),
            ("offset_group", AttrValue::Int(og)),
            ("pads", ints(pads)),
            ("strides", ints(strides)),
            ("dilations", ints(dilations)),
        ];
        let op = op("DeformConv", 19, attrs, 5).unwrap();
        gpu_matches_cpu(
            &*op,
            &[Some(&x), Some(&w), Some(&offset), b.as_ref(), m.as_ref()],
            1e-4,
        );
    }
}
