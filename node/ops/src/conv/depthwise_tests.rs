//! The depthwise kernel (depthwise.rs) against the direct reference of tests.rs: MobileNet's
//! shapes, and odd ones where each tap's run through the phase-split plane is easiest to get
//! wrong (strides that do not divide the padded size, dilations past the stride, asymmetric
//! and oversized pads, channel multipliers, batches, 1-D, no bias), plus enough channels for
//! the parallel path.

use super::tests::{Case, data, reference_check};
use crate::testkit::Rng;
use crate::window::geometry::Axis;

/// `group` channels of depthwise convolution with `mult` outputs each, stride 1, no padding.
fn depthwise(group: usize, mult: usize, input: &[usize], kernel: &[usize]) -> Case {
    Case::plain(group, 1, mult, input, kernel)
}

#[test]
fn depthwise_convolutions_match_the_reference() {
    let cases = [
        // MobileNetV2's 3x3 layers, stride 1 and 2.
        Case {
            pads: vec![1; 4],
            ..depthwise(8, 1, &[16, 16], &[3, 3])
        },
        Case {
            strides: vec![2, 2],
            pads: vec![1; 4],
            ..depthwise(32, 1, &[16, 16], &[3, 3])
        },
        // A 1x1 image, 2x2 output: every tap but the centre reads padding.
        Case {
            pads: vec![1; 4],
            ..depthwise(5, 1, &[1, 1], &[3, 3])
        },
        // Strides 2 and 3 not dividing the padded sizes, dilation past the stride, uneven
        // pads, a channel multiplier of 3, two images, no bias.
        Case {
            n: 2,
            strides: vec![2, 3],
            dilations: vec![3, 2],
            pads: vec![2, 0, 1, 3],
            bias: false,
            ..depthwise(3, 3, &[9, 11], &[3, 2])
        },
        // Pads wider than the window (outer outputs are the bias alone), a 1-wide kernel.
        Case {
            strides: vec![1, 2],
            pads: vec![3, 4, 2, 3],
            ..depthwise(2, 2, &[2, 3], &[2, 1])
        },
        // Even kernels, stride 2 with stride-phase 1 taps (kw * dw odd).
        Case {
            strides: vec![2, 2],
            pads: vec![0, 1, 1, 0],
            ..depthwise(4, 1, &[7, 8], &[4, 4])
        },
        // 1-D with stride, dilation and pads; and auto_pad.
        Case {
            strides: vec![2],
            dilations: vec![2],
            pads: vec![3, 1],
            ..depthwise(4, 2, &[13], &[5])
        },
        Case {
            strides: vec![2, 2],
            pads: vec![],
            auto_pad: "SAME_UPPER",
            ..depthwise(3, 1, &[7, 6], &[3, 3])
        },
        // An empty input row that padding alone turns into outputs (the bias): the loop.
        Case {
            pads: vec![1, 1, 1, 1],
            ..depthwise(2, 1, &[0, 3], &[1, 3])
        },
        // 3-D keeps the generic loop.
        Case {
            strides: vec![1, 2, 1],
            pads: vec![1, 0, 1, 0, 1, 1],
            ..depthwise(3, 2, &[3, 4, 5], &[2, 3, 2])
        },
        // 2 x 96 channels of 32x32: enough work for rayon.
        Case {
            n: 2,
            pads: vec![1; 4],
            ..depthwise(96, 1, &[32, 32], &[3, 3])
        },
    ];
    let mut rng = Rng::new(31);
    for c in &cases {
        reference_check(c, &data(c, &mut rng));
    }
}

#[test]
fn depthwise_kernel_takes_1d_and_2d_only() {
    let a = Axis {
        input: 4,
        output: 2,
        kernel: 3,
        stride: 1,
        dilation: 1,
        pad_begin: 0,
        pad_end: 0,
    };
    assert!(super::depthwise::applies(&[Axis::UNIT, a, a]));
    assert!(super::depthwise::applies(&[Axis::UNIT, Axis::UNIT, a]));
    assert!(!super::depthwise::applies(&[a, a, a]));
}
