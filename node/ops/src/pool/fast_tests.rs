//! The 2-D max pool's direct path against the general N-d path (which MaxPool with an Indices
//! output still takes) on windows over every border, with ties and NaNs, and against values
//! worked out with numpy.

use super::PoolShape;
use super::cpu::max_pool;
use crate::testkit::Rng;
use crate::window::geometry::{AutoPad, WindowAttrs};

struct Window<'a> {
    input: &'a [usize],
    kernel: &'a [usize],
    strides: &'a [usize],
    pads: &'a [usize],
    ceil_mode: bool,
}

fn shape(w: &Window<'_>, n: usize, c: usize) -> PoolShape {
    let attrs = WindowAttrs {
        kernel_shape: Some(w.kernel.to_vec()),
        strides: Some(w.strides.to_vec()),
        dilations: None,
        pads: Some(w.pads.to_vec()),
        auto_pad: AutoPad::NotSet,
    };
    let axes = attrs
        .resolve("MaxPool", w.input, w.kernel, w.ceil_mode)
        .unwrap();
    PoolShape { n, c, axes }
}

/// Bitwise equality, NaN included (the paths must agree on which NaN, if any, wins).
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn direct_2d_path_matches_the_general_path() {
    let windows = [
        // MNIST: 2x2 stride 2 on 28x28 and 10x10.
        (
            &[28, 28][..],
            &[2, 2][..],
            &[2, 2][..],
            &[0, 0, 0, 0][..],
            false,
        ),
        (&[10, 10], &[2, 2], &[2, 2], &[0, 0, 0, 0], false),
        // 2x2 stride 2 rows of 4, 7, 8, 9 and 17 windows (the vector kernel's one block, its
        // overlapping last block at both widths), with border columns and rows around them,
        // ceil_mode, and three-row windows.
        (&[6, 8], &[2, 2], &[2, 2], &[0, 0, 0, 0], false),
        (&[5, 14], &[2, 2], &[2, 2], &[0, 0, 0, 0], true),
        (&[4, 16], &[2, 2], &[2, 2], &[0, 0, 0, 0], false),
        (&[7, 19], &[2, 2], &[2, 2], &[1, 1, 1, 1], true),
        (&[9, 34], &[3, 2], &[2, 2], &[1, 0, 0, 0], true),
        // Pads on each side in turn, odd sizes, stride 2, ceil_mode's partial last window.
        (&[5, 7], &[3, 3], &[2, 2], &[1, 0, 0, 0], true),
        (&[5, 7], &[3, 3], &[2, 2], &[0, 1, 0, 0], true),
        (&[5, 7], &[3, 3], &[2, 2], &[0, 0, 1, 0], true),
        (&[5, 7], &[3, 3], &[2, 2], &[0, 0, 0, 2], false),
        (&[7, 5], &[3, 2], &[1, 3], &[2, 1, 1, 1], true),
        (&[1, 1], &[3, 3], &[1, 1], &[2, 2, 2, 2], false),
        // YOLO's SPPF (5x5 at stride 1 on 10x10), strides 3 and 4 (the general phase
        // split), windows wider than tall, and pads as wide as the kernel (whole windows in
        // the padding on every side).
        (&[10, 10], &[5, 5], &[1, 1], &[2, 2, 2, 2], false),
        (&[11, 13], &[5, 4], &[3, 3], &[2, 1, 2, 3], true),
        (&[9, 17], &[2, 6], &[4, 4], &[1, 2, 1, 0], true),
        (&[4, 5], &[2, 2], &[1, 3], &[2, 2, 2, 2], false),
        (&[3, 4], &[3, 3], &[2, 2], &[3, 3, 3, 3], true),
        // 1-D (the row axis is the unit axis).
        (&[15], &[3], &[2], &[1, 2], true),
        (&[9], &[4], &[3], &[2, 3], true),
        (&[6], &[1], &[1], &[0, 0], false),
    ];
    let mut rng = Rng::new(5);
    for (input, kernel, strides, pads, ceil_mode) in windows {
        let w = Window {
            input,
            kernel,
            strides,
            pads,
            ceil_mode,
        };
        let s = shape(&w, 2, 3);
        let len = 6 * input.iter().product::<usize>();
        // Few distinct values make ties common, of +0 and -0 too; some NaNs, sometimes at a
        // window's first tap.
        let x: Vec<f32> = (0..len)
            .map(|_| match rng.range(0, 11) {
                0 => f32::NAN,
                9 => -0.0,
                v => v as f32 - 4.0,
            })
            .collect();
        let (fast, none) = max_pool(&s, &x, false, false);
        let (general, _) = max_pool(&s, &x, true, false);
        assert!(none.is_none());
        assert!(
            same(&fast, &general),
            "{input:?} {kernel:?} {strides:?} {pads:?}"
        );
    }
}

#[test]
fn direct_2d_path_by_hand() {
    // numpy: this 5x6 grid padded with -inf (top 1, right 1), 2x3 windows at stride 2.
    #[rustfmt::skip]
    let x = [3., -1., 4., 1., -5., 9., 2., 6., -5., 3., 5., -8., 9., 7., -9., 3., 2., 3.,
        -8., 4., 6., 2., 6., 4., 3., 3., 8., 3., 2., 7.0f64];
    let w = Window {
        input: &[5, 6],
        kernel: &[2, 3],
        strides: &[2, 2],
        pads: &[1, 0, 0, 1],
        ceil_mode: false,
    };
    let (y, _) = max_pool(&shape(&w, 1, 1), &x, false, false);
    assert_eq!(y, [4., 4., 9., 9., 5., 5., 8., 8., 7.]);
    // A window wholly in the padding gives the lowest finite value, as in the general path.
    let w = Window {
        input: &[1, 1],
        kernel: &[1, 1],
        strides: &[1, 1],
        pads: &[1, 0, 0, 0],
        ceil_mode: false,
    };
    let (y, _) = max_pool(&shape(&w, 1, 1), &[2.0f64], false, false);
    assert_eq!(y, [f64::MIN, 2.0]);
}
