use super::*;
use crate::AttrValue;
use crate::tensor::strides;
use crate::testkit::*;

fn gather(opset: i64, axis: i64, data: &Tensor, indices: &Tensor) -> Result<Tensor, OpError> {
    run_node(
        "Gather",
        opset,
        vec![("axis", AttrValue::Int(axis))],
        &[Some(data), Some(indices)],
    )
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn idx64(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn idx32(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

/// The spec's formula, element by element:
/// out[j_0.., i_0.., j_axis+1..] = data[j_0.., indices[i_0..], j_axis+1..].
fn naive(data: &Tensor, indices: &[i64], ind_shape: &[usize], axis: usize) -> Vec<u8> {
    let es = data.dtype().size();
    let ds = data.shape();
    let out_shape = [&ds[..axis], ind_shape, &ds[axis + 1..]].concat();
    let os = strides(&out_shape);
    let dst = strides(ds);
    let q = ind_shape.len();
    let mut out = Vec::new();
    for e in 0..numel(&out_shape) {
        let idx: Vec<usize> = (0..out_shape.len())
            .map(|k| e / os[k] % out_shape[k])
            .collect();
        let flat_i: usize = (0..q).map(|k| idx[axis + k] * strides(ind_shape)[k]).sum();
        let mut row = indices[flat_i];
        if row < 0 {
            row += ds[axis] as i64;
        }
        let mut src = row as usize * dst[axis];
        for k in 0..axis {
            src += idx[k] * dst[k];
        }
        for k in axis + 1..ds.len() {
            src += idx[k + q - 1] * dst[k];
        }
        out.extend_from_slice(&data.bytes()[src * es..(src + 1) * es]);
    }
    out
}

#[test]
fn spec_examples() {
    let data = f32s(&[3, 2], &[1.0, 1.2, 2.3, 3.4, 4.5, 5.7]);
    let y = gather(13, 0, &data, &idx64(&[2, 2], &[0, 1, 1, 2])).unwrap();
    assert_eq!(y.shape(), &[2, 2, 2]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7]
    );
    let data = f32s(&[3, 3], &[1.0, 1.2, 1.9, 2.3, 3.4, 3.9, 4.5, 5.7, 5.9]);
    let y = gather(1, 1, &data, &idx32(&[1, 2], &[0, 2])).unwrap();
    assert_eq!(y.shape(), &[3, 1, 2]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![1.0, 1.9, 2.3, 3.9, 4.5, 5.9]
    );
}

#[test]
fn negative_indices_and_axis() {
    let data = iota_f32(&[2, 3]);
    for opset in [1, 11, 13] {
        let y = gather(opset, 1, &data, &idx64(&[2], &[-1, -3])).unwrap();
        assert_eq!(y.view::<f32>().unwrap().to_vec(), vec![2., 0., 5., 3.]);
        let y = gather(opset, -1, &data, &idx32(&[1], &[-2])).unwrap();
        assert_eq!(y.view::<f32>().unwrap().to_vec(), vec![1., 4.]);
    }
}

#[test]
fn scalar_indices_drop_the_axis() {
    let data = iota_f32(&[3, 2]);
    let y = gather(13, 0, &data, &Tensor::scalar(2i64)).unwrap();
    assert_eq!(y.shape(), &[2]);
    assert_eq!(y.view::<f32>().unwrap().to_vec(), vec![4., 5.]);
    let y = gather(13, 1, &data, &Tensor::scalar(-1i32)).unwrap();
    assert_eq!(y.shape(), &[3]);
    assert_eq!(y.view::<f32>().unwrap().to_vec(), vec![1., 3., 5.]);
    // 1-D data and a scalar index: a scalar out.
    let v = Tensor::from_vec(vec![3], vec![7u8, 8, 9]);
    let y = gather(13, 0, &v, &Tensor::scalar(1i64)).unwrap();
    assert_eq!((y.shape(), y.bytes().as_ref()), (&[][..], &[8u8][..]));
}

#[test]
fn every_dtype_against_the_definition() {
    let ind = [2i64, -1, 0, 1, 1, -4];
    for (seed, dtype) in [
        DType::F32,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::F16,
        DType::F64,
    ]
    .into_iter()
    .enumerate()
    {
        let data = random_tensor(dtype, &[2, 4, 3], seed as u64);
        for axis in 0..3usize {
            let rows = data.shape()[axis] as i64;
            let v: Vec<i64> = ind
                .iter()
                .map(|&i| if i >= rows || i < -rows { i % rows } else { i })
                .collect();
            let y64 = gather(13, axis as i64, &data, &idx64(&[3, 2], &v)).unwrap();
            assert_eq!(
                y64.bytes().as_ref(),
                naive(&data, &v, &[3, 2], axis),
                "{dtype} {axis}"
            );
            let v32: Vec<i32> = v.iter().map(|&i| i as i32).collect();
            let y32 = gather(13, axis as i64, &data, &idx32(&[3, 2], &v32)).unwrap();
            assert_eq!(y32, y64);
        }
    }
}

#[test]
fn out_of_range_indices_are_errors_not_panics() {
    let data = iota_f32(&[2, 3]);
    assert_err(
        gather(13, 1, &data, &idx64(&[2], &[0, 3])),
        false,
        "index 3",
    );
    assert_err(gather(13, 1, &data, &idx32(&[1], &[-4])), false, "[-3, 2]");
    assert_err(
        gather(13, 0, &data, &idx64(&[1], &[i64::MIN])),
        false,
        "out of range",
    );
    // Indices known only at run time: the rule passes, the kernel reports.
    let op = op("Gather", 13, vec![("axis", AttrValue::Int(1))], 2).unwrap();
    let bad = idx64(&[1], &[7]);
    let types = infer_partly(op.as_ref(), &[Some(&data), Some(&bad)], &[0]).unwrap();
    assert_eq!(types[0].shape, vec![2, 1]);
    assert_err(
        op.run_cpu(&[Some(&data), Some(&bad)], &types),
        false,
        "index 7",
    );
    // An empty axis has no valid index at all.
    let empty_axis = Tensor::zeros(DType::F32, vec![0, 2]);
    assert_err(
        gather(13, 0, &empty_axis, &idx64(&[1], &[0])),
        false,
        "size 0",
    );
}

#[test]
fn zero_size_tensors() {
    let data = iota_f32(&[2, 3]);
    let y = gather(13, 1, &data, &idx64(&[0], &[])).unwrap();
    assert_eq!(y.shape(), &[2, 0]);
    let y = gather(
        13,
        0,
        &Tensor::zeros(DType::U8, vec![2, 0]),
        &idx64(&[3], &[1, 0, 1]),
    )
    .unwrap();
    assert_eq!(y.shape(), &[3, 0]);
    let y = gather(
        13,
        0,
        &Tensor::zeros(DType::U8, vec![0, 3]),
        &idx64(&[0, 2], &[]),
    )
    .unwrap();
    assert_eq!(y.shape(), &[0, 2, 3]);
}

#[test]
fn bad_nodes() {
    let data = iota_f32(&[2, 3]);
    let i = idx64(&[1], &[0]);
    assert_err(gather(13, 2, &data, &i), false, "outside [-2, 1]");
    assert_err(gather(13, -3, &data, &i), false, "outside");
    assert_err(gather(13, 0, &Tensor::scalar(1.0f32), &i), false, "scalar");
    assert_err(
        gather(13, 0, &data, &f32s(&[1], &[0.0])),
        false,
        "int32 or int64",
    );
    let op = op("Gather", 13, vec![], 2).unwrap();
    assert_err(infer_known(op.as_ref(), &[Some(&data)]), false, "missing");
}

fn layout(data: &[usize], ind: &[usize], axis: i64) -> Layout {
    Gather { axis }
        .layout(data, &ValueType::new(DType::I64, ind.to_vec()))
        .unwrap()
}

/// gather.comp's parameters as the words the shader reads.
fn gpu_words(l: &Layout, data: &ValueType, index: DType) -> Option<Vec<u32>> {
    use vkml_shaders::Shader;
    gpu_params(l, data, index).map(|p| vkml_shaders::gather::Variant::param_words(&p))
}

#[test]
fn gpu_params_by_hand() {
    // f32 [3, 2], int64 indices [2, 2], axis 0: rows of 2 floats = one 8-byte element.
    let d = ValueType::new(DType::F32, vec![3, 2]);
    assert_eq!(
        gpu_words(&layout(&[3, 2], &[2, 2], 0), &d, DType::I64).unwrap(),
        vec![8, 8, 1, 4, 3, 2]
    );
    // axis 1 with int32 indices: single floats.
    assert_eq!(
        gpu_words(&layout(&[3, 2], &[5], 1), &d, DType::I32).unwrap(),
        vec![15, 4, 1, 5, 2, 1]
    );
    // u8 [4, 2] axis 0, two picks: 2-byte blocks, packed bytes, one output word.
    let u = ValueType::new(DType::U8, vec![4, 2]);
    assert_eq!(
        gpu_words(&layout(&[4, 2], &[2], 0), &u, DType::I32).unwrap(),
        vec![1, 1, 2, 2, 4, 1]
    );
    // u8 [3, 2]: 6 bytes of data are not whole words.
    let u = ValueType::new(DType::U8, vec![3, 2]);
    assert!(gpu_words(&layout(&[3, 2], &[2], 1), &u, DType::I32).is_none());
}

/// gather.comp's arithmetic, so the parameters and the clamping are checked without a GPU.
fn emulate(p: &[u32], x: &[u32], indices: &[u32]) -> Vec<u32> {
    let (n, eb, inner, picks, rows, iw) = (p[0], p[1], p[2], p[3], p[4], p[5]);
    let index_at = |j: u32| -> i32 {
        if iw == 1 {
            return indices[j as usize] as i32;
        }
        let (lo, hi) = (indices[2 * j as usize], indices[2 * j as usize + 1] as i32);
        match (hi, lo >= 0x8000_0000) {
            (0, false) | (-1, true) => lo as i32,
            _ if hi < 0 => i32::MIN,
            _ => i32::MAX,
        }
    };
    let row = |j: u32| {
        let s = rows as i32;
        let mut idx = index_at(j);
        if idx < 0 {
            idx += s;
        }
        idx.clamp(0, s - 1) as u32
    };
    let source = |e: u32| {
        let (i, t) = (e % inner, e / inner);
        let (j, o) = (t % picks, t / picks);
        (o * rows + row(j)) * inner + i
    };
    (0..n)
        .map(|w| {
            if rows == 0 {
                0
            } else if eb >= 4 {
                let k = eb / 4;
                let e = w / k;
                x[(source(e) * k + (w - e * k)) as usize]
            } else {
                let (per, bits) = (4 / eb, eb * 8);
                (0..per).fold(0u32, |acc, s| {
                    let ie = source(w * per + s);
                    let v = (x[(ie / per) as usize] >> ((ie % per) * bits)) & ((1 << bits) - 1);
                    acc | v << (s * bits)
                })
            }
        })
        .collect()
}

#[test]
fn gpu_parameters_reproduce_the_cpu_kernel() {
    let cases: [(&[usize], &[usize], i64); 5] = [
        (&[4, 3], &[2, 3], 0),
        (&[2, 4, 6], &[5], 1),
        (&[2, 4, 6], &[2, 2], -1),
        (&[8], &[], 0),
        (&[2, 3, 2, 4], &[3], 2),
    ];
    let mut checked = 0;
    for (k, (shape, ind_shape, axis)) in cases.into_iter().enumerate() {
        let l = layout(shape, ind_shape, axis);
        let v: Vec<i64> = (0..l.picks as i64)
            .map(|j| (j * 5 + k as i64) % (2 * l.rows as i64) - l.rows as i64)
            .collect();
        for dtype in [DType::F32, DType::I64, DType::F16, DType::U8] {
            let data = random_tensor(dtype, shape, k as u64);
            for ind in [
                idx64(ind_shape, &v),
                idx32(ind_shape, &v.iter().map(|&i| i as i32).collect::<Vec<_>>()),
            ] {
                let want = gather(13, axis, &data, &ind).unwrap();
                let Some(p) = gpu_words(&l, &ValueType::of(&data), ind.dtype()) else {
                    continue;
                };
                let got = emulate(&p, &words(&data), &words(&ind));
                assert_eq!(
                    from_words(&got),
                    want.bytes().as_ref(),
                    "{dtype} {shape:?} {axis}"
                );
                checked += 1;
            }
        }
    }
    // Outputs that are not whole words have no kernel: u8 [4, 3] picking 6 rows (18 bytes),
    // and u8 and f16 [8] picking one element. All else runs.
    assert_eq!(checked, 34);
}

#[test]
fn gpu_clamps_out_of_range_indices() {
    // Rows 10, 20, 30 of one float each; indices past either end read the nearest row.
    let data = f32s(&[3], &[10., 20., 30.]);
    let l = layout(&[3], &[5], 0);
    let p = gpu_words(&l, &ValueType::of(&data), DType::I64).unwrap();
    let ind = idx64(&[5], &[3, -4, 1 << 40, -(1 << 40), i64::MIN]);
    let got = emulate(&p, &words(&data), &words(&ind));
    let got: Vec<f32> = got.into_iter().map(f32::from_bits).collect();
    assert_eq!(got, vec![30., 10., 30., 10., 10.]);
}

#[test]
fn kernel_buffers_and_push_constants() {
    let op = op("Gather", 13, vec![("axis", AttrValue::Int(1))], 2).unwrap();
    let d = ValueType::new(DType::F32, vec![300, 2]);
    let i = ValueType::new(DType::I64, vec![2]);
    let k = op.gpu(&[Some(&d), Some(&i)], &[]).expect("a kernel");
    let d = &k.dispatches[0];
    assert_eq!(
        d.buffers,
        vec![
            BufRef::Input(0),
            BufRef::Input(1),
            BufRef::Output(0),
            BufRef::Fault
        ]
    );
    assert_eq!(d.groups, [3, 1, 1]);
    assert!(8 * d.buffers.len() + 4 * d.params.len() <= 128);
    let empty = ValueType::new(DType::I64, vec![0]);
    assert!(
        op.gpu(
            &[Some(&ValueType::new(DType::F32, vec![3, 2])), Some(&empty)],
            &[]
        )
        .unwrap()
        .dispatches
        .is_empty()
    );
}

// ---- The shader itself, through the Vulkan test harness ----

#[test]
fn gpu_gathers_match_the_cpu() {
    let cases: [(&[usize], &[usize], i64); 7] = [
        (&[10, 3], &[4], 0),
        (&[5, 7], &[2, 3], 1),
        (&[2, 9, 6], &[5], -2),
        (&[300, 8], &[17, 3], 0),
        (&[4, 6, 2], &[], 1),
        (&[3, 2, 5, 2], &[3], 2),
        (&[1000], &[257], 0),
    ];
    let mut ran = 0;
    for (i, (shape, ind_shape, axis)) in cases.into_iter().enumerate() {
        let op = op("Gather", 13, vec![("axis", AttrValue::Int(axis))], 2).unwrap();
        let rows = shape[axis.rem_euclid(shape.len() as i64) as usize] as i64;
        let n = numel(ind_shape) as i64;
        // A spread of rows, negative ones included.
        let v: Vec<i64> = (0..n)
            .map(|j| (j * 7 + i as i64) % (2 * rows) - rows)
            .collect();
        let indices = [
            idx64(ind_shape, &v),
            idx32(ind_shape, &v.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        ];
        for (j, dtype) in [
            DType::F32,
            DType::I64,
            DType::I32,
            DType::F16,
            DType::U8,
            DType::Bool,
        ]
        .into_iter()
        .enumerate()
        {
            let data = random_tensor(dtype, shape, (i * 10 + j) as u64);
            for ind in &indices {
                let types = [ValueType::of(&data), ValueType::of(ind)];
                if op.gpu(&[Some(&types[0]), Some(&types[1])], &[]).is_none() {
                    continue;
                }
                let what = format!("{dtype} {shape:?} {ind:?} axis {axis}");
                if !gpu_same_bytes(op.as_ref(), &[Some(&data), Some(ind)], &what) {
                    return;
                }
                ran += 1;
            }
        }
    }
    assert!(ran >= 60, "only {ran} cases had a GPU kernel");
}

/// An index out of range met on the device (as when it was computed there during the run) is
/// clamped, so no read leaves the data, and recorded in the op's fault record, which fails the
/// run (the test kit reports it) with the index, its element and the axis size.
#[test]
fn gpu_records_out_of_range_indices_on_the_device() {
    let op = op("Gather", 13, vec![], 2).unwrap();
    let data = f32s(&[3], &[10., 20., 30.]);
    let out = [ValueType::new(DType::F32, vec![2])];
    for bad in [3, -4, 1 << 40, -(1 << 40), i64::MIN, i64::MAX] {
        let ind = idx64(&[2], &[1, bad]);
        match crate::testkit::gpu::run_op(op.as_ref(), &[Some(&data), Some(&ind)], &out) {
            Err(e) if e == "skipped" => return,
            Err(e) => assert!(
                e.contains(&format!("index {bad} (element 1 of the indices)"))
                    && e.contains("axis of size 3"),
                "{e}"
            ),
            Ok(y) => panic!("index {bad} gathered {y:?}"),
        }
        let ind = idx32(
            &[2],
            &[bad.clamp(i32::MIN as i64, i32::MAX as i64) as i32, 0],
        );
        match crate::testkit::gpu::run_op(op.as_ref(), &[Some(&data), Some(&ind)], &out) {
            Err(e) => assert!(e.contains("(element 0 of the indices)"), "{e}"),
            Ok(y) => panic!("index {bad} gathered {y:?}"),
        }
    }
    let ind = idx64(&[2], &[2, -3]);
    if let Ok(y) = crate::testkit::gpu::run_op(op.as_ref(), &[Some(&data), Some(&ind)], &out) {
        assert_eq!(y[0].view::<f32>().unwrap().to_vec(), vec![30., 10.]);
    }
}
