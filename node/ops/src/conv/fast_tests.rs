//! The CPU convolution's fast paths at their edges: the im2col row copy against its
//! per-element definition, and whole convolutions whose windows hang over every border
//! (asymmetric pads, odd sizes, strides, dilations, windows wholly in the padding), large
//! enough ones to take the parallel path, and the MNIST CNN's two layers, all against the
//! direct reference in tests.rs.

use super::cpu::fill_row;
use super::tests::{Case, conv_values_f32, data, reference_check};
use crate::tensor::Tensor;
use crate::testkit::{Rng, ints};
use crate::window::geometry::Axis;

#[test]
fn im2col_rows_match_the_definition() {
    for len in 0..7usize {
        let src: Vec<f32> = (0..len).map(|v| v as f32 + 1.0).collect();
        for outputs in 0..7usize {
            for stride in 1..4usize {
                for base in -9i64..9 {
                    let mut dst = vec![f32::NAN; outputs];
                    fill_row(&mut dst, &src, base, stride);
                    for (o, &got) in dst.iter().enumerate() {
                        let i = base + (o * stride) as i64;
                        let want = if (0..len as i64).contains(&i) {
                            src[i as usize]
                        } else {
                            0.0
                        };
                        assert_eq!(got, want, "len {len} base {base} stride {stride} o {o}");
                    }
                }
            }
        }
    }
}

fn case(cg: usize, ocg: usize, input: &[usize], kernel: &[usize]) -> Case {
    Case::plain(1, cg, ocg, input, kernel)
}

#[test]
fn windows_over_every_border_match_the_reference() {
    let cases = [
        // The MNIST CNN's two convolutions.
        Case {
            pads: vec![2; 4],
            ..case(1, 8, &[28, 28], &[5, 5])
        },
        case(8, 16, &[14, 14], &[5, 5]),
        // Asymmetric pads: top 2, left 0, bottom 1, right 3; stride 2 down the rows.
        Case {
            strides: vec![2, 1],
            pads: vec![2, 0, 1, 3],
            ..case(2, 3, &[7, 6], &[3, 4])
        },
        // Odd sizes, stride 2 both ways, pads on one side of each axis.
        Case {
            strides: vec![2, 2],
            pads: vec![0, 1, 1, 0],
            ..case(3, 2, &[5, 9], &[3, 3])
        },
        // Dilations with pads and a column stride.
        Case {
            strides: vec![1, 2],
            dilations: vec![2, 3],
            pads: vec![1, 2, 2, 1],
            ..case(2, 2, &[6, 7], &[3, 2])
        },
        // Pads wider than the window: the outer outputs read only padding (bias alone).
        Case {
            pads: vec![3, 3, 3, 3],
            ..case(1, 2, &[2, 2], &[2, 2])
        },
        // 1-D and 3-D.
        Case {
            strides: vec![3],
            pads: vec![3, 2],
            ..case(2, 3, &[9], &[4])
        },
        Case {
            strides: vec![1, 2, 1],
            pads: vec![1, 0, 1, 0, 1, 1],
            ..case(2, 2, &[3, 4, 5], &[2, 3, 2])
        },
        // Stride 1 (the padded-width im2col of wide.rs): dilations with uneven pads, a
        // kernel one column wide with no row padding (its GEMM writes the output directly),
        // and 1-D.
        Case {
            dilations: vec![2, 2],
            pads: vec![1, 0, 2, 3],
            ..case(3, 2, &[6, 7], &[3, 2])
        },
        Case {
            pads: vec![1, 0, 1, 0],
            ..case(2, 3, &[5, 6], &[3, 1])
        },
        Case {
            pads: vec![2, 1],
            ..case(2, 2, &[8], &[3])
        },
        // One group of ~7.4M multiply-adds (past the direct kernel's size): blocks of output
        // rows on rayon, each its own im2col and GEMM (cpu.rs row_tasks).
        Case {
            pads: vec![1, 0, 2, 1],
            ..case(16, 32, &[40, 41], &[3, 3])
        },
        Case {
            strides: vec![2, 1],
            pads: vec![1; 4],
            ..case(24, 40, &[61, 30], &[3, 3])
        },
        // The padded-width im2col large enough to copy its 1,440 rows on rayon (wide.rs).
        Case {
            pads: vec![1; 4],
            ..case(160, 8, &[14, 14], &[3, 3])
        },
        // Too few output positions (8 x 8) for blocks of rows: one im2col, its 512
        // channels' rows filled on rayon (cpu.rs fill_col), one product.
        Case {
            strides: vec![2, 2],
            pads: vec![1, 0, 1, 1],
            ..case(512, 8, &[15, 16], &[3, 3])
        },
        // Four (batch, group) tasks of ~590K multiply-adds each: the parallel path.
        Case {
            n: 2,
            group: 2,
            pads: vec![1; 4],
            ..case(8, 8, &[32, 32], &[3, 3])
        },
    ];
    let mut rng = Rng::new(21);
    for c in &cases {
        reference_check(c, &data(c, &mut rng));
    }
}

#[test]
fn asymmetric_pads_and_stride_by_hand() {
    // numpy: a 4x5 ramp 1..20 padded top 1 and right 2 with zeros, [[1 2] [3 4]] at stride 2.
    let x = Tensor::from_vec(vec![1, 1, 4, 5], (1..=20).map(|v| v as f32).collect());
    let w = Tensor::from_vec(vec![1, 1, 2, 2], vec![1.0f32, 2., 3., 4.]);
    let attrs = vec![("pads", ints(&[1, 0, 0, 2])), ("strides", ints(&[2, 2]))];
    let y = conv_values_f32(attrs, &[x, w]);
    assert_eq!(y.shape(), [1, 1, 2, 3]);
    assert_eq!(y.to_f64_vec().unwrap(), [11., 25., 15., 101., 121., 55.]);
}

#[test]
fn the_padded_width_path_takes_narrow_stride_1_convolutions_only() {
    let axis = |input, kernel, stride, pad| Axis {
        input,
        output: (input + 2 * pad - kernel) / stride + 1,
        kernel,
        stride,
        dilation: 1,
        pad_begin: pad,
        pad_end: pad,
    };
    let applies = |h: Axis, w: Axis| super::wide::applies(&[Axis::UNIT, h, w], 25);
    // The MNIST layers, which the cases above include.
    assert!(applies(axis(28, 5, 1, 2), axis(28, 5, 1, 2)));
    assert!(applies(axis(14, 5, 1, 0), axis(14, 5, 1, 0)));
    // Stride 2, too wide a window for the row, too wide an image.
    assert!(!applies(axis(28, 5, 2, 2), axis(28, 5, 1, 2)));
    assert!(!applies(axis(28, 5, 1, 2), axis(28, 5, 2, 2)));
    assert!(!applies(axis(8, 7, 1, 0), axis(8, 7, 1, 0)));
    assert!(!applies(axis(224, 3, 1, 1), axis(224, 3, 1, 1)));
}
