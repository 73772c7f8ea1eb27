use super::*;
use crate::AttrValue;
use crate::testkit::{Rng, assert_close, gpu_matches_cpu, op, run};

fn shape(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec())
}

fn col2im(attrs: Vec<(&str, AttrValue)>, x: &Tensor, image: &[i64], block: &[i64]) -> Tensor {
    let op = op("Col2Im", 18, attrs, 3).unwrap();
    let (image, block) = (shape(image), shape(block));
    run(&*op, &[Some(x), Some(&image), Some(&block)])
        .unwrap()
        .remove(0)
}

/// A plain im2col of one [C, H, W] image with stride 1 and no padding, written out directly.
fn im2col(img: &[f64], c: usize, h: usize, w: usize, kh: usize, kw: usize) -> Vec<f64> {
    let (oh, ow) = (h - kh + 1, w - kw + 1);
    let mut out = vec![];
    for ch in 0..c {
        for i in 0..kh {
            for j in 0..kw {
                for y in 0..oh {
                    for x in 0..ow {
                        out.push(img[(ch * h + y + i) * w + x + j]);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn inverse_of_im2col_times_coverage() {
    // A 3 x 4 image under 2 x 2 blocks: each pixel comes back times the number of blocks that
    // cover it, 1 at the corners, 2 on the edges, 4 inside.
    let img: Vec<f64> = (0..24).map(|v| v as f64).collect();
    let cols = im2col(&img, 2, 3, 4, 2, 2);
    let x = Tensor::from_vec(vec![1, 8, 6], cols.iter().map(|&v| v as f32).collect());
    let y = col2im(vec![], &x, &[3, 4], &[2, 2]);
    assert_eq!(y.shape(), [1, 2, 3, 4]);
    let cover = [1., 2., 2., 1., 2., 4., 4., 2., 1., 2., 2., 1.];
    let want: Vec<f64> = img
        .iter()
        .enumerate()
        .map(|(i, v)| v * cover[i % 12])
        .collect();
    assert_close(&y.to_f64_vec().unwrap(), &want, 0.0);
}

#[test]
fn padded_dilated_1d_by_hand() {
    // Image 5, block 3 with dilation 2, pads (1, 1): blocks start at -1, 0, 1 and read
    // {-1, 1, 3}, {0, 2, 4}, {1, 3, 5}; value (k, b) = 10 k + b.
    let x = Tensor::from_vec(
        vec![1, 3, 3],
        (0..9).map(|i| ((i / 3) * 10 + i % 3) as f32).collect(),
    );
    let attrs = vec![
        ("dilations", AttrValue::Ints(vec![2])),
        ("pads", AttrValue::Ints(vec![1, 1])),
    ];
    let y = col2im(attrs, &x, &[5], &[3]);
    assert_close(&y.to_f64_vec().unwrap(), &[1., 12., 11., 32., 21.], 0.0);

    // Stride 2 over image 5, block 2, no pads: blocks at 0 and 2, pixel 4 is never read.
    let x = Tensor::from_vec(vec![1, 2, 2], vec![1i32, 2, 3, 4]);
    let y = col2im(vec![("strides", AttrValue::Ints(vec![2]))], &x, &[5], &[2]);
    assert_eq!(y.to_i64_vec().unwrap(), [1, 3, 2, 4, 0]);
}

#[test]
fn rejects_inputs_that_do_not_fit() {
    let op = op("Col2Im", 18, vec![], 3).unwrap();
    let x = Tensor::from_vec(vec![1, 4, 5], vec![0f32; 20]);
    let (image, block) = (shape(&[3, 3]), shape(&[2, 2]));
    let err = run(&*op, &[Some(&x), Some(&image), Some(&block)]).unwrap_err();
    assert!(err.to_string().contains("4 block positions"), "{err}");
}

#[test]
fn gpu_matches_cpu_on_odd_shapes() {
    let mut rng = Rng::new(5);
    // (image, block, strides, dilations, pads), with the block positions they give.
    type Case = (
        &'static [i64],
        &'static [i64],
        &'static [i64],
        &'static [i64],
        &'static [i64],
        usize,
    );
    let cases: [Case; 4] = [
        (&[7, 9], &[3, 2], &[1, 1], &[1, 1], &[0, 0, 0, 0], 5 * 8),
        (&[7, 9], &[3, 2], &[2, 3], &[2, 1], &[1, 2, 0, 1], 2 * 4),
        (
            &[5, 4, 6],
            &[2, 3, 2],
            &[1, 2, 2],
            &[2, 1, 1],
            &[1, 0, 1, 0, 1, 1],
            4 * 2 * 4,
        ),
        (&[300], &[5], &[1], &[3], &[2, 2], 292),
    ];
    for (image, block, strides, dilations, pads, blocks) in cases {
        let kvol: i64 = block.iter().product();
        let x = rng.tensor_f32(&[2, 3 * kvol as usize, blocks]);
        let attrs = vec![
            ("strides", AttrValue::Ints(strides.to_vec())),
            ("dilations", AttrValue::Ints(dilations.to_vec())),
            ("pads", AttrValue::Ints(pads.to_vec())),
        ];
        let op = op("Col2Im", 18, attrs, 3).unwrap();
        let (image, block) = (shape(image), shape(block));
        gpu_matches_cpu(&*op, &[Some(&x), Some(&image), Some(&block)], 1e-5);
    }
}
