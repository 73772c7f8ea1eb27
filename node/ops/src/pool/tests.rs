//! Pools against a naive reference written from the spec's formulas (floating-point
//! floor/ceil as the spec states them, direct window loops), plus the values of the ONNX
//! backend cases, worked by hand.

use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, assert_within, for_each_index, ints, node, offset, run, tensor};
use crate::{AttrValue, OpError, ValueType};

#[derive(Debug, Clone)]
pub struct Case {
    pub max: bool,
    pub n: usize,
    pub c: usize,
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads: Vec<usize>,
    pub auto_pad: &'static str,
    pub ceil_mode: bool,
    pub count_include_pad: bool,
    pub indices: bool,
    pub storage_order: bool,
}

impl Case {
    pub fn random(rng: &mut Rng, rank: usize) -> Case {
        let auto_pad = match rng.range(0, 9) {
            0 => "SAME_UPPER",
            1 => "SAME_LOWER",
            2 => "VALID",
            _ => "NOTSET",
        };
        let max = rng.coin();
        let max_k = if rank == 1 { 4 } else { 3 };
        let mut c = Case {
            max,
            n: rng.range(1, 2),
            c: rng.range(1, 3),
            input: vec![],
            kernel: (0..rank).map(|_| rng.range(1, max_k)).collect(),
            strides: (0..rank).map(|_| rng.range(1, 3)).collect(),
            dilations: (0..rank).map(|_| rng.range(1, 2)).collect(),
            pads: vec![],
            auto_pad,
            ceil_mode: rng.coin(),
            count_include_pad: !max && rng.coin(),
            indices: max && rng.coin(),
            storage_order: rng.coin(),
        };
        let extents: Vec<usize> = (0..rank)
            .map(|i| (c.kernel[i] - 1) * c.dilations[i] + 1)
            .collect();
        if auto_pad == "NOTSET" {
            // Pads smaller than the window, as onnxruntime requires.
            c.pads = (0..2 * rank)
                .map(|j| rng.range(0, (extents[j % rank] - 1).min(2)))
                .collect();
        }
        let extra = if rank == 3 { 3 } else { 6 };
        c.input = (0..rank)
            .map(|i| match auto_pad {
                "NOTSET" => {
                    let pad = c.pads[i] + c.pads[rank + i];
                    (extents[i].saturating_sub(pad) + rng.range(0, extra)).max(1)
                }
                "VALID" => extents[i] + rng.range(0, extra),
                _ => rng.range(1, 1 + extra),
            })
            .collect();
        c
    }

    pub fn op_type(&self) -> &'static str {
        if self.max { "MaxPool" } else { "AveragePool" }
    }

    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        let mut a = vec![
            ("kernel_shape", ints(&self.kernel)),
            ("strides", ints(&self.strides)),
            ("dilations", ints(&self.dilations)),
            ("auto_pad", AttrValue::String(self.auto_pad.to_string())),
            ("ceil_mode", AttrValue::Int(self.ceil_mode as i64)),
        ];
        if !self.pads.is_empty() {
            a.push(("pads", ints(&self.pads)));
        }
        if self.max {
            a.push(("storage_order", AttrValue::Int(self.storage_order as i64)));
        } else {
            a.push((
                "count_include_pad",
                AttrValue::Int(self.count_include_pad as i64),
            ));
        }
        a
    }

    pub fn op(&self) -> Box<dyn crate::Op> {
        node(
            self.op_type(),
            22,
            self.attrs(),
            1,
            1 + self.indices as usize,
        )
        .unwrap()
    }

    pub fn x_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.c];
        s.extend(&self.input);
        s
    }

    /// Output size and (begin, end) pads of axis i, from the spec's formulas in f64.
    fn axis(&self, i: usize) -> (usize, usize, usize) {
        let rank = self.input.len();
        let (n, s) = (self.input[i] as f64, self.strides[i] as f64);
        let extent = ((self.kernel[i] - 1) * self.dilations[i] + 1) as f64;
        match self.auto_pad {
            "NOTSET" => {
                let (pb, pe) = (self.pads[i], self.pads[rank + i]);
                let q = (n + (pb + pe) as f64 - extent) / s + 1.0;
                let mut out = if self.ceil_mode { q.ceil() } else { q.floor() } as usize;
                if self.ceil_mode && ((out - 1) as f64) * s >= n + pb as f64 {
                    out -= 1;
                }
                (out, pb, pe)
            }
            "VALID" => (((n - extent) / s).floor() as usize + 1, 0, 0),
            ap => {
                let (pb, pe) = crate::testkit::same_pads(
                    self.input[i],
                    self.kernel[i],
                    self.strides[i],
                    self.dilations[i],
                    ap == "SAME_UPPER",
                );
                ((n / s).ceil() as usize, pb, pe)
            }
        }
    }

    /// (output shape, values, flat argmax indices).
    pub fn reference(&self, x: &[f64]) -> (Vec<usize>, Vec<f64>, Vec<i64>) {
        let rank = self.input.len();
        let axes: Vec<_> = (0..rank).map(|i| self.axis(i)).collect();
        let mut shape = vec![self.n, self.c];
        shape.extend(axes.iter().map(|a| a.0));
        let xs = self.x_shape();
        let (mut y, mut idx) = (vec![], vec![]);
        for_each_index(&shape, |o| {
            let (mut best, mut best_at) = (f64::NEG_INFINITY, None::<usize>);
            let (mut sum, mut inside, mut padded) = (0.0, 0usize, 0usize);
            for_each_index(&self.kernel, |k| {
                let pos: Vec<i64> = (0..rank)
                    .map(|i| {
                        (o[2 + i] * self.strides[i] + k[i] * self.dilations[i]) as i64
                            - axes[i].1 as i64
                    })
                    .collect();
                if (0..rank).all(|i| pos[i] < (self.input[i] + axes[i].2) as i64) {
                    padded += 1;
                }
                if (0..rank).any(|i| pos[i] < 0 || pos[i] >= self.input[i] as i64) {
                    return;
                }
                let mut xi = vec![o[0], o[1]];
                xi.extend(pos.iter().map(|&p| p as usize));
                let v = x[offset(&xs, &xi)];
                sum += v;
                inside += 1;
                if best_at.is_none() || v > best {
                    best = v;
                    let spatial: Vec<usize> = xi[2..].to_vec();
                    let flat = if self.storage_order {
                        // Column-major over the spatial axes.
                        let mut f = 0;
                        for i in (0..rank).rev() {
                            f = f * self.input[i] + spatial[i];
                        }
                        f
                    } else {
                        offset(&self.input, &spatial)
                    };
                    let plane: usize = self.input.iter().product();
                    best_at = Some((o[0] * self.c + o[1]) * plane + flat);
                }
            });
            if self.max {
                // -inf marks an empty window; check_case maps it to the dtype's lowest value.
                y.push(if best_at.is_some() {
                    best
                } else {
                    f64::NEG_INFINITY
                });
                idx.push(best_at.map_or(-1, |b| b as i64));
            } else {
                let count = if self.count_include_pad {
                    padded
                } else {
                    inside
                };
                y.push(if count == 0 { 0.0 } else { sum / count as f64 });
            }
        });
        (shape, y, idx)
    }
}

fn check_case(case: &Case, rng: &mut Rng) {
    let x = rng.values(case.x_shape().iter().product());
    let (shape, want, want_idx) = case.reference(&x);
    let op = case.op();
    for f64_dtype in [false, true] {
        let xt = tensor(&case.x_shape(), &x, f64_dtype);
        let out = run(op.as_ref(), &[Some(&xt)]).unwrap_or_else(|e| panic!("{case:?}: {e}"));
        assert_eq!(out[0].shape(), shape, "{case:?}");
        let eps = if f64_dtype { 1e-14 } else { 1e-6 };
        let tol = vec![eps; want.len()];
        let got = out[0].to_f64_vec().unwrap();
        let want: Vec<f64> = want
            .iter()
            .map(|&v| match (v == f64::NEG_INFINITY, f64_dtype) {
                (true, true) => f64::MIN,
                (true, false) => f32::MIN as f64,
                // Max returns an input element exactly: compare with its f32 rounding.
                (false, false) if case.max => v as f32 as f64,
                _ => v,
            })
            .collect();
        assert_within(&got, &want, &tol, &format!("{case:?} f64={f64_dtype}"));
        if case.indices {
            assert_eq!(out[1].to_i64_vec().unwrap(), want_idx, "{case:?} indices");
        }
    }
}

#[test]
fn random_configurations_match_the_reference() {
    let mut rng = Rng::new(11);
    for i in 0..600 {
        let case = Case::random(&mut rng, 1 + i % 3);
        check_case(&case, &mut rng);
    }
}

fn pool(
    op_type: &str,
    attrs: Vec<(&str, AttrValue)>,
    x: Tensor,
    outputs: usize,
) -> Result<Vec<Tensor>, OpError> {
    let op = node(op_type, 22, attrs, 1, outputs)?;
    run(op.as_ref(), &[Some(&x)])
}

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        shape.to_vec(),
        (1..=n).map(|v| v as f32).collect::<Vec<f32>>(),
    )
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

#[test]
fn max_pool_hand_cases() {
    // 5x5 ramp 1..25, kernel 5, pads 2: each output is the largest element within 2 cells.
    let attrs = vec![
        ("kernel_shape", ints(&[5, 5])),
        ("pads", ints(&[2, 2, 2, 2])),
    ];
    let out = pool("MaxPool", attrs, ramp(&[1, 1, 5, 5]), 2).unwrap();
    let row = |a: f64| vec![a, a + 1., a + 2., a + 2., a + 2.];
    let want: Vec<f64> = [row(13.), row(18.), row(23.), row(23.), row(23.)].concat();
    assert_eq!(values(&out[0]), want);
    let want_idx: Vec<i64> = want.iter().map(|&v| v as i64 - 1).collect();
    assert_eq!(out[1].to_i64_vec().unwrap(), want_idx);

    // storage_order 1: indices count the spatial axes column-major (h + w * H).
    let attrs = vec![
        ("kernel_shape", ints(&[2, 2])),
        ("strides", ints(&[2, 2])),
        ("storage_order", AttrValue::Int(1)),
    ];
    let out = pool("MaxPool", attrs, ramp(&[1, 1, 5, 5]), 2).unwrap();
    assert_eq!(values(&out[0]), [7., 9., 17., 19.]);
    assert_eq!(out[1].to_i64_vec().unwrap(), [6, 16, 8, 18]);

    // ceil_mode on a 4x4 ramp, kernel 3, stride 2.
    let attrs = vec![
        ("kernel_shape", ints(&[3, 3])),
        ("strides", ints(&[2, 2])),
        ("ceil_mode", AttrValue::Int(1)),
    ];
    assert_eq!(
        values(&pool("MaxPool", attrs, ramp(&[1, 1, 4, 4]), 1).unwrap()[0]),
        [11., 12., 15., 16.]
    );

    // Dilation 2 on a 4x4 ramp.
    let attrs = vec![
        ("kernel_shape", ints(&[2, 2])),
        ("dilations", ints(&[2, 2])),
    ];
    assert_eq!(
        values(&pool("MaxPool", attrs, ramp(&[1, 1, 4, 4]), 1).unwrap()[0]),
        [11., 12., 15., 16.]
    );

    // Indices count across batch and channel too: the second plane starts at 4.
    let attrs = vec![("kernel_shape", ints(&[2]))];
    let x = Tensor::from_vec(vec![1, 2, 4], vec![1.0f64, 3., 2., 0., 5., 4., 4., 9.]);
    let out = pool("MaxPool", attrs, x, 2).unwrap();
    assert_eq!(values(&out[0]), [3., 3., 2., 5., 4., 9.]);
    assert_eq!(out[1].to_i64_vec().unwrap(), [1, 1, 2, 4, 5, 7]);
}

#[test]
fn average_pool_hand_cases() {
    // 5x5 ramp, kernel 5, pads 2: corner mean of the 3x3 block {1,2,3,6,7,8,11,12,13} = 7.
    let attrs = vec![
        ("kernel_shape", ints(&[5, 5])),
        ("pads", ints(&[2, 2, 2, 2])),
    ];
    let y = values(&pool("AveragePool", attrs.clone(), ramp(&[1, 1, 5, 5]), 1).unwrap()[0]);
    assert_eq!(&y[..5], [7., 7.5, 8., 8.5, 9.]);
    assert_eq!(y[12], 13.);
    // Counting the padding, the corner divides the same 63 by 25.
    let mut attrs = attrs;
    attrs.push(("count_include_pad", AttrValue::Int(1)));
    let y = values(&pool("AveragePool", attrs, ramp(&[1, 1, 5, 5]), 1).unwrap()[0]);
    let want = [2.52, 3.6, 4.8, 4.08, 3.24];
    assert_within(&y[..5], &want, &[1e-6; 5], "include pad");

    // SAME_UPPER, kernel 3, stride 2: total pad 2 -> 1 each side.
    let attrs = vec![
        ("kernel_shape", ints(&[3, 3])),
        ("strides", ints(&[2, 2])),
        ("auto_pad", AttrValue::String("SAME_UPPER".into())),
    ];
    let y = values(&pool("AveragePool", attrs, ramp(&[1, 1, 5, 5]), 1).unwrap()[0]);
    assert_eq!(y, [4., 5.5, 7., 11.5, 13., 14.5, 19., 20.5, 22.]);

    // ceil_mode, kernel 3, stride 2 on 4x4: the partial windows average what they cover.
    let attrs = vec![
        ("kernel_shape", ints(&[3, 3])),
        ("strides", ints(&[2, 2])),
        ("ceil_mode", AttrValue::Int(1)),
    ];
    let y = values(&pool("AveragePool", attrs, ramp(&[1, 1, 4, 4]), 1).unwrap()[0]);
    assert_eq!(y, [6., 7.5, 12., 13.5]);

    // The second ceil_mode window would start on the trailing pad: dropped. With
    // count_include_pad the one window divides its 4 real values by all 9 taps.
    let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![0.8580f32, 0.0786, 0.2692, 0.1537]);
    let attrs = vec![
        ("kernel_shape", ints(&[3, 3])),
        ("strides", ints(&[3, 3])),
        ("pads", ints(&[1, 1, 1, 1])),
        ("ceil_mode", AttrValue::Int(1)),
        ("count_include_pad", AttrValue::Int(1)),
    ];
    let y = pool("AveragePool", attrs, x, 1).unwrap().remove(0);
    assert_eq!(y.shape(), [1, 1, 1, 1]);
    assert!((values(&y)[0] - 1.3595 / 9.0).abs() < 1e-6);

    // A ceil_mode window hanging past the input and explicit padding does not count the
    // overhang: 1-D [1 .. 6], kernel 2, stride 2, pads (1, 0), so 4 windows.
    let attrs = vec![
        ("kernel_shape", ints(&[2])),
        ("strides", ints(&[2])),
        ("pads", ints(&[1, 0])),
        ("ceil_mode", AttrValue::Int(1)),
        ("count_include_pad", AttrValue::Int(1)),
    ];
    let x = Tensor::from_vec(vec![1, 1, 6], vec![1.0f32, 2., 3., 4., 5., 6.]);
    // Windows at -1, 1, 3, 5: the last covers {6, overhang}: divided by 1.
    assert_eq!(
        values(&pool("AveragePool", attrs, x, 1).unwrap()[0]),
        [0.5, 2.5, 4.5, 6.]
    );

    // Dilation 2 on a 4x4 ramp.
    let attrs = vec![
        ("kernel_shape", ints(&[2, 2])),
        ("dilations", ints(&[2, 2])),
    ];
    let y = values(&pool("AveragePool", attrs, ramp(&[1, 1, 4, 4]), 1).unwrap()[0]);
    assert_eq!(y, [6., 7., 10., 11.]);
}

#[test]
fn global_pools() {
    let x = Tensor::from_vec(
        vec![1, 2, 2, 2],
        vec![1.0f32, 2., 3., 4., -1., -5., 0., -2.],
    );
    let avg = pool("GlobalAveragePool", vec![], x.clone(), 1)
        .unwrap()
        .remove(0);
    assert_eq!(avg.shape(), [1, 2, 1, 1]);
    assert_eq!(values(&avg), [2.5, -2.]);
    let max = pool("GlobalMaxPool", vec![], x, 1).unwrap().remove(0);
    assert_eq!(values(&max), [4., 0.]);
    let x = Tensor::from_vec(vec![2, 1, 3], vec![1.0f64, 2., 6., 0., 0., 3.]);
    assert_eq!(
        values(&pool("GlobalAveragePool", vec![], x, 1).unwrap()[0]),
        [3., 1.]
    );
}

#[test]
fn bad_models_get_clear_errors() {
    let e = node("MaxPool", 22, vec![], 1, 1).unwrap_err().to_string();
    assert!(e.contains("'kernel_shape' attribute is required"), "{e}");
    let k = || ("kernel_shape", ints(&[2, 2]));
    let e = node(
        "AveragePool",
        22,
        vec![k(), ("ceil_mode", AttrValue::Int(2))],
        1,
        1,
    )
    .unwrap_err();
    assert!(e.to_string().contains("must be 0 or 1"), "{e}");
    assert!(
        node("MaxPool", 7, vec![k()], 1, 2).is_err(),
        "Indices need opset 8"
    );
    assert!(node("AveragePool", 22, vec![k()], 1, 2).is_err());
    let op = node("MaxPool", 22, vec![k()], 1, 1).unwrap();
    let ty = ValueType::new(DType::F32, vec![1, 1, 4]);
    let e = op
        .infer(&[Some(crate::InferInput {
            ty: &ty,
            value: None,
        })])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("kernel has 2 spatial axes but the input has 1"),
        "{e}"
    );
    let ty = ValueType::new(DType::I32, vec![1, 1, 4, 4]);
    let e = op
        .infer(&[Some(crate::InferInput {
            ty: &ty,
            value: None,
        })])
        .unwrap_err();
    assert!(e.to_string().starts_with("not supported"), "{e}");
    let op = node("GlobalAveragePool", 22, vec![], 1, 1).unwrap();
    let ty = ValueType::new(DType::F32, vec![1, 1, 0]);
    assert!(
        op.infer(&[Some(crate::InferInput {
            ty: &ty,
            value: None
        })])
        .is_err()
    );
}

#[test]
fn indices_pick_their_own_shader() {
    let x = ValueType::new(DType::F32, vec![1, 1, 4, 4]);
    let y = ValueType::new(DType::F32, vec![1, 1, 3, 3]);
    let i = ValueType::new(DType::I64, vec![1, 1, 3, 3]);
    let op = node("MaxPool", 22, vec![("kernel_shape", ints(&[2, 2]))], 1, 2).unwrap();
    let k = op.gpu(&[Some(&x)], &[y.clone(), i]).unwrap();
    assert_eq!(
        k.dispatches[0].kernel(),
        vkml_shaders::pool_max_indices::Variant::F32.kernel()
    );
    assert!(8 * k.dispatches[0].buffers.len() + 4 * k.dispatches[0].params.len() <= 128);
    let op = node("MaxPool", 22, vec![("kernel_shape", ints(&[2, 2]))], 1, 1).unwrap();
    assert_eq!(
        op.gpu(&[Some(&x)], &[y]).unwrap().dispatches[0].kernel(),
        vkml_shaders::pool::Variant::F32.kernel()
    );
}

/// Pads, strides and kernels from the model are sizes: i64::MAX is refused when the node is
/// built (it made the kernels ask for more memory than exists), and sizes that fit but make
/// an output too large are refused by the rule, before any kernel runs.
#[test]
fn sizes_that_do_not_fit_are_refused_not_allocated() {
    for op_type in ["MaxPool", "AveragePool"] {
        let huge = vec![
            ("kernel_shape", ints(&[2, 2])),
            ("pads", ints(&[i64::MAX, 0, 0, 0])),
        ];
        let e = node(op_type, 19, huge, 1, 1).unwrap_err();
        assert!(e.to_string().contains("'pads'"), "{op_type}: {e}");
        let stride = vec![("kernel_shape", ints(&[2])), ("strides", ints(&[i64::MAX]))];
        assert!(node(op_type, 19, stride, 1, 1).is_err(), "{op_type}");
        // 2^57 of padding on each side of three axes: every size fits, the output's element
        // count (about 2^174) does not.
        let p = 1i64 << 57;
        let big = vec![("kernel_shape", ints(&[1, 1, 1])), ("pads", ints(&[p; 6]))];
        let op = node(op_type, 19, big, 1, 1).unwrap();
        let x = Tensor::zeros(DType::F32, vec![1, 1, 1, 1, 1]);
        let ty = ValueType::of(&x);
        let e = op
            .infer(&[Some(crate::InferInput {
                ty: &ty,
                value: None,
            })])
            .unwrap_err();
        assert!(e.to_string().contains("element count"), "{op_type}: {e}");
    }
}
