use super::*;
use crate::AttrValue;
use crate::testkit::{Rng, assert_close, gpu_matches_cpu, op, run};

fn roi_align(attrs: Vec<(&str, AttrValue)>) -> Box<dyn Op> {
    op("RoiAlign", 16, attrs, 3).unwrap()
}

fn one_bin(mode: &str, ctm: &str, ratio: i64, roi: [f32; 4]) -> f64 {
    let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]);
    let rois = Tensor::from_vec(vec![1, 4], roi.to_vec());
    let batch = Tensor::from_vec(vec![1], vec![0i64]);
    let op = roi_align(vec![
        ("mode", AttrValue::String(mode.into())),
        (
            "coordinate_transformation_mode",
            AttrValue::String(ctm.into()),
        ),
        ("sampling_ratio", AttrValue::Int(ratio)),
    ]);
    run(&*op, &[Some(&x), Some(&rois), Some(&batch)]).unwrap()[0]
        .to_f64_vec()
        .unwrap()[0]
}

#[test]
fn one_bin_by_hand() {
    // The plane [[1, 2], [3, 4]] is 1 + x + 2y between its pixel centres.
    let full = [0.0, 0.0, 1.0, 1.0];
    // One sample at the region's centre (0.5, 0.5).
    assert_eq!(one_bin("avg", "output_half_pixel", 1, full), 2.5);
    // half_pixel shifts the region by -0.5: its centre is (0, 0).
    assert_eq!(one_bin("avg", "half_pixel", 1, full), 1.0);
    // Four samples at 0.25 and 0.75: 1.75, 2.25, 2.75, 3.25.
    assert_eq!(one_bin("avg", "output_half_pixel", 2, full), 2.5);
    // Adaptive: ceil(bin size 1) = 1 sample a side.
    assert_eq!(one_bin("avg", "output_half_pixel", 0, full), 2.5);
    // Max of the weighted corners (0.25 each): 0.25 x 4, not the interpolated 2.5.
    assert_eq!(one_bin("max", "output_half_pixel", 1, full), 1.0);
    // Four samples: the largest weighted corner is 0.75 x 0.75 x 4 at (0.75, 0.75).
    assert_eq!(one_bin("max", "output_half_pixel", 2, full), 2.25);
    // output_half_pixel makes a point region 1 x 1; half_pixel keeps it empty (no samples).
    assert_eq!(
        one_bin("avg", "output_half_pixel", 0, [0.0, 0.0, 0.0, 0.0]),
        2.5
    );
    assert_eq!(one_bin("avg", "half_pixel", 0, [0.5, 0.5, 0.5, 0.5]), 0.0);
    // Samples past the width (x > 2) count as 0; nearer ones are clamped to the last pixel:
    // x = 2.5 reads 0, x = 2 reads column 1 at y = 0.5, (2 + 4) / 2.
    assert_eq!(
        one_bin("avg", "output_half_pixel", 1, [2.0, 0.0, 3.0, 1.0]),
        0.0
    );
    assert_eq!(
        one_bin("avg", "output_half_pixel", 1, [1.5, 0.0, 2.5, 1.0]),
        3.0
    );
}

#[test]
fn bins_scale_and_batch() {
    // A 1 x 4 row of bins over a region of width 4 at scale 0.5 of [0, 0, 8, 2]: bin k's
    // single sample sits at x = k + 0.5, y = 0.5, on the plane 10 x (batch) + x + 4 y.
    let mut v = vec![];
    for b in 0..2 {
        for yy in 0..2 {
            for xx in 0..4 {
                v.push((10 * b + xx + 4 * yy) as f32);
            }
        }
    }
    let x = Tensor::from_vec(vec![2, 1, 2, 4], v);
    let rois = Tensor::from_vec(vec![2, 4], vec![0.0f32, 0.0, 8.0, 2.0, 0.0, 0.0, 8.0, 2.0]);
    let batch = Tensor::from_vec(vec![2], vec![1i64, 0]);
    let op = roi_align(vec![
        (
            "coordinate_transformation_mode",
            AttrValue::String("output_half_pixel".into()),
        ),
        ("output_height", AttrValue::Int(1)),
        ("output_width", AttrValue::Int(4)),
        ("sampling_ratio", AttrValue::Int(1)),
        ("spatial_scale", AttrValue::Float(0.5)),
    ]);
    let y = run(&*op, &[Some(&x), Some(&rois), Some(&batch)]).unwrap();
    assert_eq!(y[0].shape(), [2, 1, 1, 4]);
    // x = 3.5 lies past the last pixel centre: clamped to 3.
    let want = [12.5, 13.5, 14.5, 15.0, 2.5, 3.5, 4.5, 5.0];
    assert_close(&y[0].to_f64_vec().unwrap(), &want, 1e-12);

    let bad = Tensor::from_vec(vec![2], vec![2i64, 0]);
    let err = run(&*op, &[Some(&x), Some(&rois), Some(&bad)]).unwrap_err();
    assert!(err.to_string().contains("batch index 2"), "{err}");
}

#[test]
fn gpu_matches_cpu_on_odd_shapes() {
    let mut rng = Rng::new(11);
    let x = rng.tensor_f32(&[3, 5, 7, 9]);
    let r = 7;
    let rois: Vec<f32> = (0..r)
        .flat_map(|_| {
            let (x1, y1) = (rng.unit() * 6.0 + 3.0, rng.unit() * 5.0 + 2.0);
            let (w, h) = (rng.unit() * 5.0 + 4.0, rng.unit() * 4.0 + 3.0);
            [x1, y1, x1 + w, y1 + h].map(|v| v as f32)
        })
        .collect();
    let rois = Tensor::from_vec(vec![r, 4], rois);
    let batch = Tensor::from_vec(vec![r], (0..r).map(|i| (i % 3) as i64).collect::<Vec<_>>());
    for (mode, ctm, ratio, scale) in [
        ("avg", "half_pixel", 0, 1.0),
        ("avg", "output_half_pixel", 2, 0.75),
        ("max", "half_pixel", 3, 1.0),
        ("max", "output_half_pixel", 0, 0.5),
    ] {
        let op = roi_align(vec![
            ("mode", AttrValue::String(mode.into())),
            (
                "coordinate_transformation_mode",
                AttrValue::String(ctm.into()),
            ),
            ("sampling_ratio", AttrValue::Int(ratio)),
            ("spatial_scale", AttrValue::Float(scale)),
            ("output_height", AttrValue::Int(3)),
            ("output_width", AttrValue::Int(5)),
        ]);
        gpu_matches_cpu(&*op, &[Some(&x), Some(&rois), Some(&batch)], 1e-5);
    }
}

#[test]
fn gpu_reports_a_batch_index_out_of_range() {
    let x = Rng::new(2).tensor_f32(&[2, 3, 4, 4]);
    let rois = Tensor::from_vec(vec![2, 4], vec![0.0f32, 0.0, 2.0, 2.0, 1.0, 1.0, 3.0, 3.0]);
    let batch = Tensor::from_vec(vec![2], vec![0i64, -1]);
    let op = roi_align(vec![]);
    let types = crate::testkit::infer_known(&*op, &[Some(&x), Some(&rois), Some(&batch)]).unwrap();
    match crate::testkit::gpu::run_op(&*op, &[Some(&x), Some(&rois), Some(&batch)], &types) {
        Err(e) if e == "skipped" => {}
        Err(e) => assert!(e.contains("index") || e.contains("fault"), "{e}"),
        Ok(_) => panic!("the GPU run should report batch index -1"),
    }
}
