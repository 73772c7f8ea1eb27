//! The direct kernel (direct.rs) against a naive convolution written from the definition in
//! f64, over the shapes its tiling has edges at: channel counts that fill one, two or three
//! vector blocks or end in a partial one, rows narrower than every tile width and rows whose
//! last tile overlaps the one before, strides, dilations, asymmetric pads, 1-D; then through
//! the operator with batches and groups, against the reference in tests.rs.

use super::direct::{PackCache, Variant, applies, conv, conv_as};
use crate::conv::tests::{Case, data, reference_check};
use crate::testkit::Rng;
use crate::window::geometry::Axis;

/// (input, kernel, stride, dilation, pad_begin, pad_end) along one axis.
type Spec = (usize, usize, usize, usize, usize, usize);

fn axis((input, kernel, stride, dilation, pad_begin, pad_end): Spec) -> Axis {
    let extent = (kernel - 1) * dilation + 1;
    Axis {
        input,
        output: (input + pad_begin + pad_end - extent) / stride + 1,
        kernel,
        stride,
        dilation,
        pad_begin,
        pad_end,
    }
}

/// `y[oc][oh][ow] = b[oc] + sum w[oc][c][kh][kw] * x[c][ih][iw]` over the taps inside the
/// input, one output at a time.
fn naive(
    ah: &Axis,
    aw: &Axis,
    cg: usize,
    ocg: usize,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
) -> Vec<f64> {
    let mut y = Vec::new();
    for oc in 0..ocg {
        for oh in 0..ah.output {
            for ow in 0..aw.output {
                let mut acc = b.map_or(0.0, |b| b[oc] as f64);
                for c in 0..cg {
                    for kh in 0..ah.kernel {
                        for kw in 0..aw.kernel {
                            let ih =
                                (oh * ah.stride + kh * ah.dilation) as i64 - ah.pad_begin as i64;
                            let iw =
                                (ow * aw.stride + kw * aw.dilation) as i64 - aw.pad_begin as i64;
                            if ih < 0 || iw < 0 || ih >= ah.input as i64 || iw >= aw.input as i64 {
                                continue;
                            }
                            let xv = x[(c * ah.input + ih as usize) * aw.input + iw as usize];
                            let wv = w[((oc * cg + c) * ah.kernel + kh) * aw.kernel + kw];
                            acc += xv as f64 * wv as f64;
                        }
                    }
                }
                y.push(acc);
            }
        }
    }
    y
}

#[test]
fn direct_kernel_matches_the_definition() {
    let avx2 = pulp::x86::V3::try_new().is_some();
    let unit: Spec = (1, 1, 1, 1, 0, 0);
    let cases: &[(usize, usize, Spec, Spec)] = &[
        // The MNIST CNN's layers: one block at 7-wide tiles, two blocks at 5-wide tiles.
        (1, 8, (28, 5, 1, 1, 2, 2), (28, 5, 1, 1, 2, 2)),
        (8, 16, (14, 5, 1, 1, 0, 0), (14, 5, 1, 1, 0, 0)),
        // A partial second block (11 channels), odd sizes, asymmetric pads.
        (3, 11, (7, 3, 1, 1, 2, 0), (9, 3, 1, 1, 0, 3)),
        // Two blocks and a partial third; stride 2 both ways, dilation along the rows.
        (2, 20, (11, 3, 2, 2, 1, 1), (13, 3, 2, 1, 1, 2)),
        // Rows narrower than every tile width (1-wide tiles), stride 3 and dilation 2.
        (4, 24, (6, 2, 1, 1, 0, 0), (9, 2, 3, 2, 1, 0)),
        (2, 9, (5, 3, 1, 1, 1, 1), (3, 3, 1, 1, 1, 1)),
        // Pads wider than the window: outputs that read only padding get the bias alone.
        (1, 8, (2, 2, 1, 1, 3, 3), (2, 2, 1, 1, 3, 3)),
        // 1-D (the row axis is the unit axis), a last tile overlapping the one before.
        (3, 16, unit, (23, 4, 1, 1, 2, 1)),
        (5, 8, unit, (40, 3, 2, 3, 0, 4)),
        // Rows of 8 to 15 columns (one-vector column tiles) and a partial block of four
        // channels; stride 2 along the row.
        (2, 10, (6, 3, 1, 1, 1, 1), (12, 3, 1, 1, 1, 1)),
        (1, 9, (5, 3, 1, 1, 0, 0), (33, 3, 2, 1, 1, 1)),
        // Work for several rayon tasks (par.rs): pairs of channel blocks split between
        // threads, the last pair partial (44 = 5.5 blocks of eight, 11 of four).
        (8, 44, (32, 3, 1, 1, 1, 1), (32, 3, 1, 1, 1, 1)),
        (16, 36, (20, 3, 1, 1, 1, 1), (19, 3, 2, 1, 0, 1)),
    ];
    let mut rng = Rng::new(7);
    for &(cg, ocg, h, wspec) in cases {
        let (ah, aw) = (axis(h), axis(wspec));
        let axes = [Axis::UNIT, ah, aw];
        assert!(applies(&axes, cg, ocg), "{cg} {ocg} {ah:?} {aw:?}");
        let x: Vec<f32> = rng
            .values(cg * ah.input * aw.input)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let w: Vec<f32> = rng
            .values(ocg * cg * ah.kernel * aw.kernel)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let b: Vec<f32> = rng.values(ocg).iter().map(|&v| v as f32).collect();
        // The variant the cost model picks, then each one forced (by columns only where a
        // row holds a whole vector).
        // Each variant, with and without a bias, without a cache and twice through one cache
        // shared by the whole case (a hit on the second pass, a repack whenever the variant,
        // the bias or the weights change: all of them, then only the last one).
        let variants = [None, Some(Variant::Channels), Some(Variant::Columns)];
        let negated: Vec<f32> = w.iter().map(|v| -v).collect();
        let mut tweaked = negated.clone();
        *tweaked.last_mut().unwrap() += 1.0;
        let cache = PackCache::default();
        let runs = [None, Some(&b[..])]
            .into_iter()
            .flat_map(|b| variants.map(|v| (b, v)))
            .flat_map(|(b, v)| [(b, v, None), (b, v, Some(&cache)), (b, v, Some(&cache))])
            .map(|(b, v, c)| (&w[..], b, v, c))
            .chain(
                [None, Some(&cache), Some(&cache)].map(|c| (&negated[..], Some(&b[..]), None, c)),
            )
            .chain([Some(&cache), Some(&cache)].map(|c| (&tweaked[..], Some(&b[..]), None, c)));
        for (w, bias, variant, cache) in runs {
            let want = naive(&ah, &aw, cg, ocg, &x, w, bias);
            let mut y = vec![f32::NAN; want.len()];
            let serves = avx2 && (variant != Some(Variant::Columns) || aw.output >= 8);
            assert_eq!(
                conv_as(&axes, cg, ocg, &x, w, bias, &mut y, variant, cache),
                serves
            );
            if !serves {
                assert!(
                    y.iter().all(|v| v.is_nan()),
                    "a declined call leaves y alone"
                );
                continue;
            }
            let taps = (cg * ah.kernel * aw.kernel) as f64;
            for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (got as f64 - want).abs() <= 1e-6 * (1.0 + taps),
                    "cg {cg} ocg {ocg} {ah:?} {aw:?} bias {} {variant:?} cached {}: y[{i}] = \
                     {got}, want {want}",
                    bias.is_some(),
                    cache.is_some()
                );
            }
        }
    }
}

#[test]
fn direct_kernel_declines_what_it_does_not_serve() {
    let a = axis((8, 3, 1, 1, 1, 1));
    // Fewer than eight output channels, 3-D, and too much work.
    assert!(!applies(&[Axis::UNIT, a, a], 4, 7));
    assert!(!applies(&[a, a, a], 4, 8));
    let big = axis((256, 3, 1, 1, 1, 1));
    assert!(!applies(&[Axis::UNIT, big, big], 64, 64));
    let mut y = vec![1.0f32; 7 * 64];
    let x = vec![0.5f32; 4 * 64];
    let w = vec![0.5f32; 7 * 4 * 9];
    assert!(!conv(&[Axis::UNIT, a, a], 4, 7, &x, &w, None, &mut y, None));
    assert!(
        y.iter().all(|&v| v == 1.0),
        "a declined call leaves y alone"
    );
}

/// Through the operator: batches, groups of eight or more channels each (the bias of each
/// group), f32 on the direct kernel and f64 on im2col, both against tests.rs's reference.
#[test]
fn grouped_batched_convolutions_through_the_operator() {
    let base = Case {
        n: 2,
        group: 2,
        cg: 3,
        ocg: 10,
        input: vec![9, 11],
        kernel: vec![3, 2],
        strides: vec![1, 2],
        dilations: vec![2, 1],
        pads: vec![1, 0, 2, 1],
        auto_pad: "NOTSET",
        kernel_attr: true,
        bias: true,
    };
    let cases = [
        base.clone(),
        Case {
            group: 3,
            ocg: 8,
            bias: false,
            ..base.clone()
        },
        Case {
            n: 1,
            group: 1,
            cg: 8,
            ocg: 16,
            input: vec![14, 14],
            kernel: vec![5, 5],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0; 4],
            ..base
        },
    ];
    let mut rng = Rng::new(5);
    for c in &cases {
        reference_check(c, &data(c, &mut rng));
    }
}
