//! Conv against a naive reference (direct loops from the ONNX definition, f64 accumulation,
//! its own output-size count) over many random configurations, plus hand-computed cases.

use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, assert_within, for_each_index, ints, node, offset, run, tensor};
use crate::{AttrValue, OpError, ValueType};

/// One convolution to test, described as a model would: attributes and shapes.
#[derive(Debug, Clone)]
pub struct Case {
    pub n: usize,
    pub group: usize,
    pub cg: usize,
    pub ocg: usize,
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Explicit pads, `[begins..., ends...]`; only with auto_pad NOTSET.
    pub pads: Vec<usize>,
    pub auto_pad: &'static str,
    pub kernel_attr: bool,
    pub bias: bool,
}

impl Case {
    /// `group` groups of `cg` input and `ocg` output channels, one image, stride 1, no padding,
    /// with a bias; tests change what they need with struct update syntax.
    pub fn plain(group: usize, cg: usize, ocg: usize, input: &[usize], kernel: &[usize]) -> Case {
        let rank = input.len();
        Case {
            n: 1,
            group,
            cg,
            ocg,
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            strides: vec![1; rank],
            dilations: vec![1; rank],
            pads: vec![0; 2 * rank],
            auto_pad: "NOTSET",
            kernel_attr: true,
            bias: true,
        }
    }

    pub fn random(rng: &mut Rng, rank: usize) -> Case {
        let auto_pad = match rng.range(0, 9) {
            0 => "SAME_UPPER",
            1 => "SAME_LOWER",
            2 => "VALID",
            _ => "NOTSET",
        };
        let (group, cg, ocg) = match rng.range(0, 3) {
            0 => (1, rng.range(1, 5), rng.range(1, 6)),
            // Depthwise, sometimes with a channel multiplier.
            1 => (rng.range(2, 5), 1, rng.range(1, 2)),
            2 => (rng.range(2, 3), rng.range(1, 3), rng.range(1, 4)),
            // Wide enough for the GPU's implicit-GEMM path.
            _ => (
                rng.range(1, 2),
                rng.range(1, 6),
                [16, 20, 70][rng.range(0, 2)],
            ),
        };
        let max_k = if rank == 1 { 5 } else { 3 };
        let mut c = Case {
            n: rng.range(1, 2),
            group,
            cg,
            ocg,
            input: vec![],
            kernel: (0..rank).map(|_| rng.range(1, max_k)).collect(),
            strides: (0..rank).map(|_| rng.range(1, 3)).collect(),
            dilations: (0..rank).map(|_| rng.range(1, 2)).collect(),
            pads: vec![],
            auto_pad,
            kernel_attr: rng.coin(),
            bias: rng.coin(),
        };
        if auto_pad == "NOTSET" {
            c.pads = (0..2 * rank).map(|_| rng.range(0, 2)).collect();
        }
        let extra = if rank == 3 { 3 } else { 6 };
        c.input = (0..rank)
            .map(|i| {
                let extent = (c.kernel[i] - 1) * c.dilations[i] + 1;
                match auto_pad {
                    "NOTSET" => {
                        let pad = c.pads[i] + c.pads[rank + i];
                        (extent.saturating_sub(pad) + rng.range(0, extra)).max(1)
                    }
                    "VALID" => extent + rng.range(0, extra),
                    _ => rng.range(1, 1 + extra),
                }
            })
            .collect();
        c
    }

    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        let mut a = vec![
            ("group", AttrValue::Int(self.group as i64)),
            ("strides", ints(&self.strides)),
            ("dilations", ints(&self.dilations)),
            ("auto_pad", AttrValue::String(self.auto_pad.to_string())),
        ];
        if !self.pads.is_empty() {
            a.push(("pads", ints(&self.pads)));
        }
        if self.kernel_attr {
            a.push(("kernel_shape", ints(&self.kernel)));
        }
        a
    }

    pub fn x_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.group * self.cg];
        s.extend(&self.input);
        s
    }

    pub fn w_shape(&self) -> Vec<usize> {
        let mut s = vec![self.group * self.ocg, self.cg];
        s.extend(&self.kernel);
        s
    }

    /// (begin, end) padding per axis, worked out independently of the op's geometry code.
    fn pads_per_axis(&self) -> Vec<(usize, usize)> {
        let rank = self.input.len();
        (0..rank)
            .map(|i| match self.auto_pad {
                "NOTSET" => (self.pads[i], self.pads[rank + i]),
                "VALID" => (0, 0),
                ap => {
                    let (k, s, d) = (self.kernel[i], self.strides[i], self.dilations[i]);
                    crate::testkit::same_pads(self.input[i], k, s, d, ap == "SAME_UPPER")
                }
            })
            .collect()
    }

    /// Direct convolution from the definition: (output shape, values, and per output the sum
    /// of |terms|, which bounds the rounding error of any summation order).
    pub fn reference(
        &self,
        x: &[f64],
        w: &[f64],
        b: Option<&[f64]>,
    ) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
        let rank = self.input.len();
        let pads = self.pads_per_axis();
        let out: Vec<usize> = (0..rank)
            .map(|i| {
                // Count the window starts that fit in the padded input.
                let extent = (self.kernel[i] - 1) * self.dilations[i] + 1;
                let padded = self.input[i] + pads[i].0 + pads[i].1;
                (0..)
                    .step_by(self.strides[i])
                    .take_while(|&p| p + extent <= padded)
                    .count()
            })
            .collect();
        let oc = self.group * self.ocg;
        let mut shape = vec![self.n, oc];
        shape.extend(&out);
        let (xs, ws) = (self.x_shape(), self.w_shape());
        let mut y = vec![];
        let mut abs = vec![];
        for_each_index(&shape, |o| {
            let (ni, oci) = (o[0], o[1]);
            let g = oci / self.ocg;
            let mut acc = b.map_or(0.0, |b| b[oci]);
            let mut mag = acc.abs();
            for c in 0..self.cg {
                for_each_index(&self.kernel, |k| {
                    let mut xi = vec![ni, g * self.cg + c];
                    for i in 0..rank {
                        let pos = (o[2 + i] * self.strides[i] + k[i] * self.dilations[i]) as i64
                            - pads[i].0 as i64;
                        if pos < 0 || pos >= self.input[i] as i64 {
                            return;
                        }
                        xi.push(pos as usize);
                    }
                    let mut wi = vec![oci, c];
                    wi.extend(k);
                    let term = x[offset(&xs, &xi)] * w[offset(&ws, &wi)];
                    acc += term;
                    mag += term.abs();
                });
            }
            y.push(acc);
            abs.push(mag);
        });
        (shape, y, abs)
    }
}

pub struct Data {
    pub x: Vec<f64>,
    pub w: Vec<f64>,
    pub b: Option<Vec<f64>>,
}

pub fn data(case: &Case, rng: &mut Rng) -> Data {
    let xn = case.x_shape().iter().product();
    let wn = case.w_shape().iter().product();
    Data {
        x: rng.values(xn),
        w: rng.values(wn),
        b: case.bias.then(|| rng.values(case.group * case.ocg)),
    }
}

pub fn tensors(case: &Case, d: &Data, f64_dtype: bool) -> Vec<Tensor> {
    let mut t = vec![
        tensor(&case.x_shape(), &d.x, f64_dtype),
        tensor(&case.w_shape(), &d.w, f64_dtype),
    ];
    if let Some(b) = &d.b {
        t.push(tensor(&[b.len()], b, f64_dtype));
    }
    t
}

pub fn conv_op(case: &Case) -> Box<dyn crate::Op> {
    node("Conv", 22, case.attrs(), 2 + case.bias as usize, 1).unwrap()
}

fn check_case(case: &Case, rng: &mut Rng) {
    reference_check(case, &data(case, rng));
}

/// Runs `case` on `d` in f32 and f64 and compares with [`Case::reference`].
pub fn reference_check(case: &Case, d: &Data) {
    let (shape, want, abs) = case.reference(&d.x, &d.w, d.b.as_deref());
    let op = conv_op(case);
    for f64_dtype in [false, true] {
        let t = tensors(case, d, f64_dtype);
        let inputs: Vec<Option<&Tensor>> = t.iter().map(Some).collect();
        let y = &run(op.as_ref(), &inputs).unwrap_or_else(|e| panic!("{case:?}: {e}"))[0];
        assert_eq!(y.shape(), shape, "{case:?}");
        let eps = if f64_dtype { 1e-13 } else { 1e-6 };
        let tol: Vec<f64> = abs.iter().map(|m| eps * (1.0 + m)).collect();
        assert_within(
            &y.to_f64_vec().unwrap(),
            &want,
            &tol,
            &format!("{case:?} f64={f64_dtype}"),
        );
    }
}

#[test]
fn random_configurations_match_the_reference() {
    let mut rng = Rng::new(7);
    for i in 0..450 {
        let case = Case::random(&mut rng, 1 + i % 3);
        check_case(&case, &mut rng);
    }
}

#[test]
fn large_outputs_are_done_in_row_blocks() {
    // K = 32 * 9 = 288 and 40 x 128 outputs: the im2col buffer would pass COL_CAP.
    let case = Case {
        n: 1,
        group: 1,
        cg: 32,
        ocg: 2,
        input: vec![40, 128],
        kernel: vec![3, 3],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        auto_pad: "NOTSET",
        kernel_attr: false,
        bias: true,
    };
    check_case(&case, &mut Rng::new(3));
    // And a pointwise one, which skips im2col.
    let case = Case {
        kernel: vec![1, 1],
        pads: vec![0; 4],
        ..case
    };
    check_case(&case, &mut Rng::new(4));
}

/// [`conv_values`] for inputs known to be valid.
pub fn conv_values_f32(attrs: Vec<(&str, AttrValue)>, inputs: &[Tensor]) -> Tensor {
    conv_values(attrs, inputs).unwrap()
}

fn conv_values(attrs: Vec<(&str, AttrValue)>, inputs: &[Tensor]) -> Result<Tensor, OpError> {
    let op = node("Conv", 11, attrs, inputs.len(), 1)?;
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    Ok(run(op.as_ref(), &refs)?.remove(0))
}

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

#[test]
fn hand_computed_cases() {
    // 5x5 ramp under a 3x3 box filter (the ONNX conv examples).
    let x = Tensor::from_vec(vec![1, 1, 5, 5], arange(25));
    let w = Tensor::from_vec(vec![1, 1, 3, 3], vec![1.0f32; 9]);
    let y = conv_values(vec![("pads", ints(&[1, 1, 1, 1]))], &[x.clone(), w.clone()]).unwrap();
    #[rustfmt::skip]
    let want = [12., 21., 27., 33., 24., 33., 54., 63., 72., 51., 63., 99., 108., 117., 81.,
        93., 144., 153., 162., 111., 72., 111., 117., 123., 84.];
    assert_eq!(y.shape(), [1, 1, 5, 5]);
    assert_eq!(y.to_f64_vec().unwrap(), want);
    let y = conv_values(vec![], &[x, w.clone()]).unwrap();
    assert_eq!(
        y.to_f64_vec().unwrap(),
        [54., 63., 72., 99., 108., 117., 144., 153., 162.]
    );

    // 7x5 ramp, stride 2, pad 1.
    let x = Tensor::from_vec(vec![1, 1, 7, 5], arange(35));
    let attrs = vec![("pads", ints(&[1, 1, 1, 1])), ("strides", ints(&[2, 2]))];
    let y = conv_values(attrs, &[x, w]).unwrap();
    assert_eq!(y.shape(), [1, 1, 4, 3]);
    #[rustfmt::skip]
    let want = [12., 27., 24., 63., 108., 81., 123., 198., 141., 112., 177., 124.];
    assert_eq!(y.to_f64_vec().unwrap(), want);

    // 1-D, two groups with bias: [1 2 3] * [1 1] + 1 and [4 5 6] * [2 0] - 1.
    let x = Tensor::from_vec(vec![1, 2, 3], vec![1.0f32, 2., 3., 4., 5., 6.]);
    let w = Tensor::from_vec(vec![2, 1, 2], vec![1.0f32, 1., 2., 0.]);
    let b = Tensor::from_vec(vec![2], vec![1.0f32, -1.]);
    let y = conv_values(vec![("group", AttrValue::Int(2))], &[x, w, b]).unwrap();
    assert_eq!(y.to_f64_vec().unwrap(), [4., 6., 7., 9.]);

    // Dilation 2: taps two apart.
    let x = Tensor::from_vec(vec![1, 1, 5], vec![1.0f64, 2., 3., 4., 5.]);
    let w = Tensor::from_vec(vec![1, 1, 2], vec![1.0f64, 1.]);
    let y = conv_values(vec![("dilations", ints(&[2]))], &[x, w]).unwrap();
    assert_eq!(y.to_f64_vec().unwrap(), [4., 6., 8.]);
}

fn infer_err(attrs: Vec<(&str, AttrValue)>, shapes: &[(&[usize], DType)]) -> String {
    let op = match node("Conv", 22, attrs, shapes.len(), 1) {
        Ok(op) => op,
        Err(e) => return e.to_string(),
    };
    let types: Vec<ValueType> = shapes
        .iter()
        .map(|(s, d)| ValueType::new(*d, s.to_vec()))
        .collect();
    let inputs: Vec<_> = types
        .iter()
        .map(|ty| Some(crate::InferInput { ty, value: None }))
        .collect();
    op.infer(&inputs).unwrap_err().to_string()
}

#[test]
fn bad_models_get_clear_errors() {
    let f = DType::F32;
    let e = infer_err(vec![], &[(&[1, 3, 5, 5], f), (&[2, 4, 3, 3], f)]);
    assert!(
        e.contains("input has 3 channels but W expects 4 (group 1"),
        "{e}"
    );
    let e = infer_err(
        vec![("group", AttrValue::Int(2))],
        &[(&[1, 4, 5], f), (&[3, 2, 3], f)],
    );
    assert!(e.contains("not a multiple of group 2"), "{e}");
    let e = infer_err(vec![], &[(&[1, 1, 5], f), (&[2, 1, 3], f), (&[3], f)]);
    assert!(e.contains("B has shape [3]"), "{e}");
    let e = infer_err(
        vec![("kernel_shape", ints(&[2]))],
        &[(&[1, 1, 5], f), (&[2, 1, 3], f)],
    );
    assert!(e.contains("kernel_shape [2] does not match"), "{e}");
    let e = infer_err(vec![], &[(&[1, 1, 2], f), (&[2, 1, 3], f)]);
    assert!(e.contains("no output"), "{e}");
    let e = infer_err(
        vec![],
        &[(&[1, 1, 2, 2, 2, 2], f), (&[1, 1, 1, 1, 1, 1], f)],
    );
    assert!(
        e.starts_with("not supported") && e.contains("4 spatial axes"),
        "{e}"
    );
    let e = infer_err(vec![], &[(&[1, 1, 5], f), (&[2, 1, 3], DType::F64)]);
    assert!(e.contains("share one type"), "{e}");
    let e = infer_err(
        vec![],
        &[(&[1, 1, 5], DType::I32), (&[2, 1, 3], DType::I32)],
    );
    assert!(e.starts_with("not supported"), "{e}");
    let e = infer_err(
        vec![("strides", ints(&[0]))],
        &[(&[1, 1, 5], f), (&[2, 1, 3], f)],
    );
    assert!(e.contains("'strides' must be at least 1"), "{e}");
    let attrs = vec![
        ("auto_pad", AttrValue::String("SAME_UPPER".into())),
        ("pads", ints(&[1, 1])),
    ];
    let e = infer_err(attrs, &[(&[1, 1, 5], f), (&[2, 1, 3], f)]);
    assert!(e.contains("cannot be combined"), "{e}");
    let e = infer_err(
        vec![("pads", ints(&[1, 1, 1]))],
        &[(&[1, 1, 5], f), (&[2, 1, 3], f)],
    );
    assert!(e.contains("'pads' has 3 values"), "{e}");
}

#[test]
fn flops_count_multiply_adds_twice() {
    let op = node("Conv", 22, vec![("group", AttrValue::Int(2))], 2, 1).unwrap();
    let x = ValueType::new(DType::F32, vec![2, 4, 10, 10]);
    let w = ValueType::new(DType::F32, vec![6, 2, 3, 3]);
    let y = ValueType::new(DType::F32, vec![2, 6, 8, 8]);
    // 2 * N * OC * OH * OW * C/group * kh * kw
    assert_eq!(
        op.flops(&[Some(&x), Some(&w)], &[y]),
        2 * 2 * 6 * 64 * 2 * 9
    );
}

/// Conv's pads of i64::MAX (a slice index panic in the narrow-image path, "capacity overflow"
/// in the others) and its group are refused when the node is built; a depthwise convolution
/// whose padding makes an enormous output is refused by the rule, which names the size.
#[test]
fn sizes_that_do_not_fit_are_refused_not_allocated() {
    let e = node("Conv", 11, vec![("pads", ints(&[i64::MAX, 0, 0, 0]))], 2, 1).unwrap_err();
    assert!(e.to_string().contains("'pads'"), "{e}");
    let e = node("Conv", 11, vec![("group", AttrValue::Int(i64::MAX))], 2, 1).unwrap_err();
    assert!(e.to_string().contains("group"), "{e}");
    let p = 1i64 << 40;
    let op = node(
        "Conv",
        11,
        vec![("group", AttrValue::Int(2)), ("pads", ints(&[p; 6]))],
        2,
        1,
    )
    .unwrap();
    let x = ValueType::new(DType::F32, vec![1, 2, 1, 1, 1]);
    let w = ValueType::new(DType::F32, vec![2, 1, 1, 1, 1]);
    let e = op
        .infer(&[
            Some(crate::InferInput {
                ty: &x,
                value: None,
            }),
            Some(crate::InferInput {
                ty: &w,
                value: None,
            }),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("element count"), "{e}");
}
