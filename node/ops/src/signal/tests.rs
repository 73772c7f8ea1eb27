//! The signal ops against values worked out independently (closed forms, hand-computed
//! transforms, a naive complex DFT over extracted lines) and their shaders against the CPU.

use crate::AttrValue;
use crate::tensor::{DType, Tensor};
use crate::testkit::{
    Rng, assert_close, assert_err, f64s, gpu_matches_cpu, infer_partly, op, run, run_one,
};

type C = (f64, f64);

/// The textbook DFT of one line, from e^(i theta) computed directly (no quadrant reduction).
fn naive(x: &[C], n: usize, inverse: bool) -> Vec<C> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    (0..n)
        .map(|k| {
            let mut acc = (0.0, 0.0);
            for (j, &(xr, xi)) in x.iter().enumerate().take(n) {
                let a = sign * 2.0 * std::f64::consts::PI * (k * j) as f64 / n as f64;
                acc.0 += xr * a.cos() - xi * a.sin();
                acc.1 += xr * a.sin() + xi * a.cos();
            }
            (acc.0 * scale, acc.1 * scale)
        })
        .collect()
}

/// Equal within an f32 output's rounding.
fn near(g: C, w: C) -> bool {
    let ok = |g: f64, w: f64| (g - w).abs() <= 1e-6 * w.abs().max(1.0);
    ok(g.0, w.0) && ok(g.1, w.1)
}

fn dft(opset: i64, attrs: Vec<(&str, AttrValue)>, inputs: &[Option<&Tensor>]) -> Tensor {
    let op = op("DFT", opset, attrs, inputs.len()).unwrap();
    run_one(&*op, inputs).unwrap()
}

fn real(v: &[f32]) -> Tensor {
    Tensor::from_vec(vec![1, v.len(), 1], v.to_vec())
}

fn pairs(t: &Tensor) -> Vec<C> {
    f64s(t).chunks(2).map(|c| (c[0], c[1])).collect()
}

fn axis(a: i64) -> Tensor {
    Tensor::scalar(a)
}

#[test]
fn small_transforms_by_hand() {
    // [1, 2, 3, 4]: X = 10, -2 + 2i, -2, -2 - 2i, exact (every twiddle a quarter turn).
    let y = dft(17, vec![], &[Some(&real(&[1.0, 2.0, 3.0, 4.0]))]);
    assert_eq!(y.shape(), &[1, 4, 2]);
    assert_eq!(
        pairs(&y),
        [(10.0, 0.0), (-2.0, 2.0), (-2.0, 0.0), (-2.0, -2.0)]
    );
    // One-sided: bins 0..=2 of the same.
    let y = dft(
        17,
        vec![("onesided", AttrValue::Int(1))],
        &[Some(&real(&[1.0, 2.0, 3.0, 4.0]))],
    );
    assert_eq!(pairs(&y), [(10.0, 0.0), (-2.0, 2.0), (-2.0, 0.0)]);
    // A unit impulse has a flat spectrum; a constant only a DC bin of N times its value.
    let y = dft(20, vec![], &[Some(&real(&[1.0, 0.0, 0.0, 0.0, 0.0]))]);
    assert_eq!(pairs(&y), [(1.0, 0.0); 5]);
    let y = dft(20, vec![], &[Some(&real(&[3.0; 6]))]);
    let got: Vec<f64> = pairs(&y).iter().flat_map(|&(r, i)| [r, i]).collect();
    let mut want = vec![0.0; 12];
    want[0] = 18.0;
    assert_close(&got, &want, 1e-6);
}

#[test]
fn inverse_and_irfft_undo_the_forward_transform() {
    // The inverse of [10, -2+2i, -2, -2-2i] is [1, 2, 3, 4] (as complex numbers).
    let spectrum = Tensor::from_vec(
        vec![1, 4, 2],
        vec![10.0f32, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0],
    );
    let y = dft(17, vec![("inverse", AttrValue::Int(1))], &[Some(&spectrum)]);
    assert_eq!(pairs(&y), [(1.0, 0.0), (2.0, 0.0), (3.0, 0.0), (4.0, 0.0)]);
    // IRFFT of the half spectrum: N = 2 (3 - 1) = 4 by default, a real [1, 4, 1] out.
    let half = Tensor::from_vec(vec![1, 3, 2], vec![10.0f32, 0.0, -2.0, 2.0, -2.0, 0.0]);
    let irfft = vec![
        ("inverse", AttrValue::Int(1)),
        ("onesided", AttrValue::Int(1)),
    ];
    let y = dft(17, irfft.clone(), &[Some(&half)]);
    assert_eq!(y.shape(), &[1, 4, 1]);
    assert_eq!(f64s(&y), [1.0, 2.0, 3.0, 4.0]);
    // An odd length needs dft_length: rfft then irfft of 5 random samples gives them back.
    let x = Rng::new(1).tensor_f32(&[1, 5, 1]);
    let half = dft(17, vec![("onesided", AttrValue::Int(1))], &[Some(&x)]);
    assert_eq!(half.shape(), &[1, 3, 2]);
    let five = Tensor::scalar(5i64);
    let y = dft(17, irfft, &[Some(&half), Some(&five)]);
    assert_close(&f64s(&y), &f64s(&x), 1e-6);
}

#[test]
fn dft_length_crops_and_zero_pads() {
    let x = real(&[1.0, 2.0, 3.0, 4.0]);
    let six = Tensor::scalar(6i32);
    let padded = dft(17, vec![], &[Some(&x), Some(&six)]);
    let want = dft(17, vec![], &[Some(&real(&[1.0, 2.0, 3.0, 4.0, 0.0, 0.0]))]);
    assert_eq!(padded.shape(), &[1, 6, 2]);
    assert_close(&f64s(&padded), &f64s(&want), 1e-12);
    let two = Tensor::scalar(2i64);
    let cropped = dft(17, vec![], &[Some(&x), Some(&two)]);
    assert_eq!(pairs(&cropped), [(3.0, 0.0), (-1.0, 0.0)]);
}

/// Every line of a 4-D complex input along each axis, against the naive DFT of the extracted
/// line: the kernel's strides, batch and inner positions.
#[test]
fn every_axis_matches_the_naive_dft_of_each_line() {
    let shape = [2, 3, 5, 2];
    let x = Rng::new(7).tensor_f32(&shape);
    let v = f64s(&x);
    let at = |idx: [usize; 3]| {
        let o = ((idx[0] * shape[1] + idx[1]) * shape[2] + idx[2]) * 2;
        (v[o], v[o + 1])
    };
    for ax in 0..3 {
        for inverse in [false, true] {
            let attrs = vec![("inverse", AttrValue::Int(inverse as i64))];
            let y = dft(20, attrs, &[Some(&x), None, Some(&axis(ax as i64 - 4))]);
            let got = pairs(&y);
            let n = shape[ax];
            for a in 0..shape[(ax + 1) % 3] {
                for b in 0..shape[(ax + 2) % 3] {
                    let index = |j: usize| {
                        let mut idx = [0; 3];
                        idx[ax] = j;
                        idx[(ax + 1) % 3] = a;
                        idx[(ax + 2) % 3] = b;
                        idx
                    };
                    let line: Vec<C> = (0..n).map(|j| at(index(j))).collect();
                    for (k, w) in naive(&line, n, inverse).into_iter().enumerate() {
                        let idx = index(k);
                        let g = got[(idx[0] * shape[1] + idx[1]) * shape[2] + idx[2]];
                        assert!(
                            near(g, w),
                            "axis {ax} inverse {inverse} at {idx:?}: {g:?} vs {w:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn dft_rules() {
    let x = Rng::new(2).tensor_f32(&[2, 6, 1]);
    let complex = Rng::new(3).tensor_f32(&[2, 6, 2]);
    let build = |opset, attrs| op("DFT", opset, attrs, 3).unwrap();
    // Opset 17's default axis is 1, opset 20's -2: the same axis of a rank-3 input.
    let d17 = build(17, vec![]);
    let d20 = build(20, vec![]);
    assert_eq!(
        f64s(&run(&*d17, &[Some(&x)]).unwrap()[0]),
        f64s(&run(&*d20, &[Some(&x)]).unwrap()[0])
    );
    // The last axis holds the parts of a complex number: never the transform's.
    assert_err(
        run(&*d20, &[Some(&x), None, Some(&axis(-1))]),
        false,
        "axis -1",
    );
    assert_err(
        run(&*d20, &[Some(&x), None, Some(&axis(2))]),
        false,
        "axis 2",
    );
    let rfft = build(17, vec![("onesided", AttrValue::Int(1))]);
    assert_err(run(&*rfft, &[Some(&complex)]), false, "real input");
    let irfft = build(
        17,
        vec![
            ("onesided", AttrValue::Int(1)),
            ("inverse", AttrValue::Int(1)),
        ],
    );
    assert_err(run(&*irfft, &[Some(&x)]), false, "complex input");
    // dft_length and opset 20's axis decide the shape, so the rule needs their values.
    let four = Tensor::scalar(4i64);
    assert_err(
        infer_partly(&*d20, &[Some(&x), Some(&four)], &[]),
        true,
        "input 1",
    );
    assert_err(
        infer_partly(&*d20, &[Some(&x), None, Some(&axis(1))], &[]),
        true,
        "input 2",
    );
    let zero = Tensor::scalar(0i64);
    assert_err(
        run(&*d20, &[Some(&x), Some(&zero)]),
        false,
        "positive dft_length",
    );
    let ints = Tensor::from_vec(vec![1, 2, 1], vec![1i32, 2]);
    assert_err(run(&*d20, &[Some(&ints)]), true, "DFT of int32");
}

#[test]
fn f64_and_f16_inputs_keep_their_type() {
    let x = Tensor::from_vec(vec![1, 4, 1], vec![1.0f64, 2.0, 3.0, 4.0]);
    let y = dft(17, vec![], &[Some(&x)]);
    assert_eq!(y.dtype(), DType::F64);
    assert_eq!(f64s(&y), [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0]);
    let h: Vec<half::f16> = [1.0f32, 2.0, 3.0, 4.0].map(half::f16::from_f32).to_vec();
    let y = dft(17, vec![], &[Some(&Tensor::from_vec(vec![1, 4, 1], h))]);
    assert_eq!(y.dtype(), DType::F16);
    assert_eq!(f64s(&y), [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0]);
}

/// (shape, axis, dft_length, inverse, onesided).
type Case = (&'static [usize], i64, Option<i64>, bool, bool);

#[test]
fn dft_on_the_gpu() {
    let mut rng = Rng::new(11);
    let flags = |inverse: bool, onesided: bool| {
        vec![
            ("inverse", AttrValue::Int(inverse as i64)),
            ("onesided", AttrValue::Int(onesided as i64)),
        ]
    };
    // Odd and prime lengths, batches, axes before the last-but-one, crops and zero pads.
    let cases: [Case; 9] = [
        (&[3, 7, 1], 1, None, false, false),
        (&[3, 7, 2], 1, None, true, false),
        (&[2, 9, 1], 1, None, false, true),
        (&[4, 5, 3, 2], 1, None, false, false),
        (&[5, 3, 4, 1], 0, Some(7), false, true),
        (&[2, 11, 3, 2], -3, Some(6), true, false),
        (&[2, 6, 3, 2], 1, None, true, true),
        (&[2, 4, 3, 2], 1, Some(9), true, true),
        (&[1, 257, 2], 1, None, false, false),
    ];
    for (shape, ax, length, inverse, onesided) in cases {
        let x = rng.tensor_f32(shape);
        let op = op("DFT", 20, flags(inverse, onesided), 3).unwrap();
        let len = length.map(Tensor::scalar);
        let a = axis(ax);
        gpu_matches_cpu(&*op, &[Some(&x), len.as_ref(), Some(&a)], 1e-4);
    }
    // Opset 17 (axis attribute), and enough lines for many workgroups.
    let x = rng.tensor_f32(&[300, 13, 1]);
    let op = op("DFT", 17, vec![("axis", AttrValue::Int(1))], 1).unwrap();
    gpu_matches_cpu(&*op, &[Some(&x)], 1e-4);
}

fn stft(onesided: bool, inputs: &[Option<&Tensor>]) -> Tensor {
    let op = op(
        "STFT",
        17,
        vec![("onesided", AttrValue::Int(onesided as i64))],
        4,
    )
    .unwrap();
    run_one(&*op, inputs).unwrap()
}

#[test]
fn stft_frames_are_windowed_dfts_of_slices() {
    let signal = Rng::new(5).tensor_f32(&[2, 20, 1]);
    let v = f64s(&signal);
    let window = Tensor::from_vec(vec![6], vec![0.1f32, 0.5, 1.0, 1.0, 0.5, 0.1]);
    let w = f64s(&window);
    let step = Tensor::scalar(4i64);
    // Frames of 6 samples, 4 apart, over 20: 1 + (20 - 6) / 4 = 4 of them, 4 bins one-sided.
    let y = stft(true, &[Some(&signal), Some(&step), Some(&window)]);
    assert_eq!(y.shape(), &[2, 4, 4, 2]);
    let got = pairs(&y);
    for b in 0..2 {
        for f in 0..4 {
            let frame: Vec<C> = (0..6)
                .map(|n| (v[b * 20 + f * 4 + n] * w[n], 0.0))
                .collect();
            for (k, want) in naive(&frame, 6, false).into_iter().take(4).enumerate() {
                let g = got[(b * 4 + f) * 4 + k];
                assert!(near(g, want), "{g:?} vs {want:?}");
            }
        }
    }
    // frame_length alone, no window: rectangular frames, all 6 bins when two-sided.
    let six = Tensor::scalar(6i64);
    let plain = stft(false, &[Some(&signal), Some(&step), None, Some(&six)]);
    assert_eq!(plain.shape(), &[2, 4, 6, 2]);
    let frame: Vec<C> = (0..6).map(|n| (v[20 + 8 + n], 0.0)).collect();
    let got = pairs(&plain);
    for (k, want) in naive(&frame, 6, false).into_iter().enumerate() {
        let g = got[(4 + 2) * 6 + k];
        assert!(near(g, want), "{g:?} vs {want:?}");
    }
}

#[test]
fn stft_rules() {
    let signal = Rng::new(6).tensor_f32(&[1, 10, 1]);
    let complex = Rng::new(6).tensor_f32(&[1, 10, 2]);
    let step = Tensor::scalar(2i64);
    let op =
        |onesided: i64| op("STFT", 17, vec![("onesided", AttrValue::Int(onesided))], 4).unwrap();
    let four = Tensor::scalar(4i64);
    let window = Tensor::from_vec(vec![5], vec![1.0f32; 5]);
    assert_err(
        run(
            &*op(1),
            &[Some(&signal), Some(&step), Some(&window), Some(&four)],
        ),
        false,
        "differs from the window",
    );
    assert_err(
        run(&*op(1), &[Some(&complex), Some(&step), Some(&window)]),
        false,
        "onesided=0",
    );
    let long = Tensor::scalar(11i64);
    assert_err(
        run(&*op(0), &[Some(&signal), Some(&step), None, Some(&long)]),
        false,
        "does not fit",
    );
    let zero = Tensor::scalar(0i64);
    assert_err(
        run(&*op(0), &[Some(&signal), Some(&zero), Some(&window)]),
        false,
        "frame_step",
    );
    assert_err(
        infer_partly(&*op(0), &[Some(&signal), Some(&step), Some(&window)], &[]),
        true,
        "input 1",
    );
    // Neither window nor frame_length: one frame of the whole signal.
    let y = run_one(&*op(1), &[Some(&signal), Some(&step)]).unwrap();
    assert_eq!(y.shape(), &[1, 1, 6, 2]);
}

#[test]
fn stft_on_the_gpu() {
    let mut rng = Rng::new(9);
    let real = rng.tensor_f32(&[3, 50, 1]);
    let complex = rng.tensor_f32(&[2, 37, 2]);
    let window = rng.tensor_f32(&[9]);
    let (step3, step5, nine) = (
        Tensor::scalar(3i64),
        Tensor::scalar(5i32),
        Tensor::scalar(9i64),
    );
    let op =
        |onesided: i64| op("STFT", 17, vec![("onesided", AttrValue::Int(onesided))], 4).unwrap();
    gpu_matches_cpu(&*op(1), &[Some(&real), Some(&step3), Some(&window)], 1e-4);
    gpu_matches_cpu(
        &*op(0),
        &[Some(&real), Some(&step5), None, Some(&nine)],
        1e-4,
    );
    gpu_matches_cpu(
        &*op(0),
        &[Some(&complex), Some(&step3), Some(&window), Some(&nine)],
        1e-4,
    );
}

fn window(name: &str, periodic: i64, size: i64, dtype: Option<i64>) -> Tensor {
    let mut attrs = vec![("periodic", AttrValue::Int(periodic))];
    if let Some(d) = dtype {
        attrs.push(("output_datatype", AttrValue::Int(d)));
    }
    let op = op(name, 17, attrs, 1).unwrap();
    run_one(&*op, &[Some(&Tensor::scalar(size))]).unwrap()
}

#[test]
fn windows_at_known_points() {
    // Periodic windows are the first `size` points of the symmetric window one longer.
    let hann = window("HannWindow", 1, 4, None);
    assert_eq!(hann.dtype(), DType::F32);
    assert_close(&f64s(&hann), &[0.0, 0.5, 1.0, 0.5], 1e-7);
    assert_close(
        &f64s(&window("HannWindow", 0, 5, None)),
        &[0.0, 0.5, 1.0, 0.5, 0.0],
        1e-7,
    );
    // Hamming: ends at alpha - beta = 4/46, middle 1.
    let h = f64s(&window("HammingWindow", 0, 3, Some(11)));
    assert_close(&h, &[4.0 / 46.0, 1.0, 4.0 / 46.0], 1e-15);
    // Blackman: 0 at the ends, 1 in the middle, 0.42 + 0.08 cos(pi) at a quarter turn.
    assert_close(
        &f64s(&window("BlackmanWindow", 0, 3, Some(11))),
        &[0.0, 1.0, 0.0],
        1e-15,
    );
    let b = f64s(&window("BlackmanWindow", 1, 4, Some(11)));
    assert_close(&b, &[0.0, 0.34, 1.0, 0.34], 1e-15);
    // Integer outputs truncate; a one-sample symmetric window is [1].
    assert_eq!(
        window("HannWindow", 1, 4, Some(7)).to_i64_vec().unwrap(),
        [0, 0, 1, 0]
    );
    assert_eq!(f64s(&window("HannWindow", 0, 1, None)), [1.0]);
}

#[test]
fn window_rules() {
    let hann = op("HannWindow", 17, vec![], 1).unwrap();
    assert_err(
        run(&*hann, &[Some(&Tensor::scalar(0i64))]),
        false,
        "positive",
    );
    assert_err(
        infer_partly(&*hann, &[Some(&Tensor::scalar(4i64))], &[]),
        true,
        "input 0",
    );
    assert_err(
        op(
            "HannWindow",
            17,
            vec![("output_datatype", AttrValue::Int(9))],
            1,
        ),
        true,
        "bool",
    );
    assert_err(
        op("HannWindow", 17, vec![("periodic", AttrValue::Int(2))], 1),
        false,
        "periodic",
    );
}

#[test]
fn mel_weight_matrix_by_hand() {
    // 2 bands, dft_length 64, 8 kHz, 0 to 4000 Hz: the four mel points land at spectrogram
    // bins floor(65 hz / 8000) = 0, 3, 9, 18 (hz 0, 426.8, 1113.8, 2219.8).
    let mel = op("MelWeightMatrix", 17, vec![], 5).unwrap();
    let inputs = [
        Tensor::scalar(2i64),
        Tensor::scalar(64i64),
        Tensor::scalar(8000i64),
        Tensor::scalar(0f32),
        Tensor::scalar(4000f32),
    ];
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    let y = run_one(&*mel, &ins).unwrap();
    assert_eq!((y.dtype(), y.shape()), (DType::F32, &[33, 2][..]));
    let triangle = |j: f64, [l, c, r]: [f64; 3]| {
        if j >= l && j <= c {
            (j - l) / (c - l)
        } else if j > c && j < r {
            (r - j) / (r - c)
        } else {
            0.0
        }
    };
    let want: Vec<f64> = (0..33)
        .flat_map(|j| {
            [
                triangle(j as f64, [0.0, 3.0, 9.0]),
                triangle(j as f64, [3.0, 9.0, 18.0]),
            ]
        })
        .collect();
    assert_close(&f64s(&y), &want, 1e-7);
    // An upper edge past half the sample rate reaches past the last bin.
    let mut bad = inputs.clone();
    bad[4] = Tensor::scalar(9000f32);
    let ins: Vec<Option<&Tensor>> = bad.iter().map(Some).collect();
    assert_err(run(&*mel, &ins), false, "outside 0..33");
}
