use super::*;
use crate::AttrValue;
use crate::tensor::strides;
use crate::testkit::*;

fn axis(a: i64) -> Vec<(&'static str, AttrValue)> {
    vec![("axis", AttrValue::Int(a))]
}

fn cat(opset: i64, a: i64, inputs: &[&Tensor]) -> Result<Tensor, OpError> {
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
    run_node("Concat", opset, axis(a), &inputs)
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

/// The definition, element by element: output index j along the axis belongs to the input
/// whose range of the axis covers it.
fn naive(inputs: &[&Tensor], axis: usize) -> Vec<u8> {
    let es = inputs[0].dtype().size();
    let mut shape = inputs[0].shape().to_vec();
    shape[axis] = inputs.iter().map(|t| t.shape()[axis]).sum();
    let os = strides(&shape);
    let mut out = Vec::new();
    for e in 0..numel(&shape) {
        let mut idx: Vec<usize> = (0..shape.len()).map(|k| e / os[k] % shape[k]).collect();
        let mut t = 0;
        while idx[axis] >= inputs[t].shape()[axis] {
            idx[axis] -= inputs[t].shape()[axis];
            t += 1;
        }
        let src: usize = idx
            .iter()
            .zip(strides(inputs[t].shape()))
            .map(|(i, s)| i * s)
            .sum();
        out.extend_from_slice(&inputs[t].bytes()[src * es..(src + 1) * es]);
    }
    out
}

#[test]
fn by_hand() {
    let a = f32s(&[2, 2], &[0., 1., 2., 3.]);
    let b = f32s(&[2, 1], &[10., 11.]);
    let y = cat(13, 1, &[&a, &b]).unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![0., 1., 10., 2., 3., 11.]
    );
    let c = f32s(&[1, 2], &[7., 8.]);
    let y = cat(4, 0, &[&a, &c]).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![0., 1., 2., 3., 7., 8.]
    );
    let y = cat(13, 0, &[&a]).unwrap();
    assert_eq!(y, a);
}

#[test]
fn axis_rules_across_opsets() {
    let a = f32s(&[2, 2], &[0., 1., 2., 3.]);
    let b = f32s(&[2, 1], &[10., 11.]);
    let y = cat(11, -1, &[&a, &b]).unwrap();
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![0., 1., 10., 2., 3., 11.]
    );
    assert_err(cat(4, -1, &[&a, &b]), false, "before opset 11");
    assert_err(cat(13, 2, &[&a, &b]), false, "outside [-2, 1]");
    assert_err(cat(13, -3, &[&a, &b]), false, "outside");
    // Concat-1's axis defaults to 1; from opset 4 it is required.
    let y = run_node("Concat", 1, vec![], &[Some(&a), Some(&b)]).unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    assert_err(op("Concat", 4, vec![], 2), false, "'axis'");
}

#[test]
fn many_inputs_of_every_dtype() {
    for (seed, dtype) in [
        DType::F32,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::F16,
        DType::U16,
    ]
    .into_iter()
    .enumerate()
    {
        let seed = seed as u64 * 10;
        let ts: Vec<Tensor> = (0..5)
            .map(|i| random_tensor(dtype, &[2, 1 + i, 3], seed + i as u64))
            .collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        let y = cat(13, 1, &refs).unwrap();
        assert_eq!(y.shape(), &[2, 15, 3]);
        assert_eq!(y.bytes().as_ref(), naive(&refs, 1), "{dtype}");
        let ts: Vec<Tensor> = (0..3)
            .map(|i| random_tensor(dtype, &[2, 3, 1 + i], seed + 7 + i as u64))
            .collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        let y = cat(13, -1, &refs).unwrap();
        assert_eq!(y.bytes().as_ref(), naive(&refs, 2), "{dtype}");
    }
}

#[test]
fn zero_size_inputs() {
    let b = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    // Fitting empties add nothing.
    assert_eq!(
        cat(13, 1, &[&Tensor::zeros(DType::F32, vec![2, 0]), &b]).unwrap(),
        b
    );
    assert_eq!(
        cat(13, 0, &[&b, &Tensor::zeros(DType::F32, vec![0, 3])]).unwrap(),
        b
    );
    // Empties that do not fit are left out, as onnxruntime does.
    assert_eq!(
        cat(13, 1, &[&Tensor::zeros(DType::F32, vec![1, 0]), &b]).unwrap(),
        b
    );
    assert_eq!(
        cat(13, 0, &[&Tensor::zeros(DType::F32, vec![0]), &b]).unwrap(),
        b
    );
    // All empty: the first input sets the shape.
    let e = cat(
        13,
        0,
        &[
            &Tensor::zeros(DType::U8, vec![0, 3]),
            &Tensor::zeros(DType::U8, vec![0, 3]),
        ],
    );
    assert_eq!(e.unwrap().shape(), &[0, 3]);
    let e = cat(
        13,
        1,
        &[
            &Tensor::zeros(DType::U8, vec![0, 3]),
            &Tensor::zeros(DType::U8, vec![0, 2]),
        ],
    );
    assert_eq!(e.unwrap().shape(), &[0, 5]);
}

#[test]
fn errors() {
    let a = f32s(&[2, 2], &[0., 1., 2., 3.]);
    assert_err(
        cat(13, 1, &[&a, &f32s(&[3, 1], &[1., 2., 3.])]),
        false,
        "does not fit",
    );
    assert_err(
        cat(13, 0, &[&a, &f32s(&[4], &[1., 2., 3., 4.])]),
        false,
        "does not fit",
    );
    assert_err(
        cat(13, 0, &[&a, &Tensor::zeros(DType::I64, vec![1, 2])]),
        false,
        "one type",
    );
    let s = Tensor::scalar(1.0f32);
    assert_err(cat(13, 0, &[&s, &s]), false, "scalars");
    assert_err(cat(13, 0, &[]), false, "at least one");
    let op = op("Concat", 13, axis(0), 2).unwrap();
    assert_err(
        infer_known(op.as_ref(), &[Some(&a), None]),
        false,
        "input 1 is missing",
    );
}

#[test]
fn gpu_params_by_hand() {
    let c = Concat {
        axis: 1,
        negative_ok: true,
    };
    let l = |dtype, shapes: &[&[usize]]| {
        let types: Vec<_> = shapes.iter().map(|s| Some((dtype, *s))).collect();
        c.layout(&types).unwrap()
    };
    // f32 [2, 2] ++ [2, 1]: rows of 3 words, blocks of 2 and 1.
    assert_eq!(
        as_words(gpu_params(&l(DType::F32, &[&[2, 2], &[2, 1]])).unwrap()),
        vec![(0, vec![4, 2, 3, 0]), (1, vec![2, 1, 3, 2])]
    );
    // Empty inputs get no dispatch but keep their index for the others.
    assert_eq!(
        as_words(gpu_params(&l(DType::I64, &[&[2, 0], &[2, 1]])).unwrap()),
        vec![(1, vec![4, 2, 2, 0])]
    );
    // u8 blocks of 3 bytes are not whole words; of 4 and 8 they are.
    assert!(gpu_params(&l(DType::U8, &[&[2, 3], &[2, 1]])).is_none());
    assert_eq!(
        as_words(gpu_params(&l(DType::U8, &[&[2, 4], &[2, 8]])).unwrap()),
        vec![(0, vec![2, 1, 3, 0]), (1, vec![4, 2, 3, 1])]
    );
}

/// Each dispatch's parameters as the words the shader sees: n, block, out_row, offset.
fn as_words(d: Vec<(usize, vkml_shaders::concat::Params)>) -> Vec<(usize, Vec<u32>)> {
    use vkml_shaders::Shader;
    d.into_iter()
        .map(|(i, p)| (i, vkml_shaders::concat::Variant::param_words(&p)))
        .collect()
}

/// concat.comp's arithmetic, so the parameters are checked without a GPU.
fn emulate(dispatches: &[(usize, Vec<u32>)], inputs: &[Vec<u32>], out_words: usize) -> Vec<u32> {
    let mut y = vec![0xDEAD_BEEF; out_words];
    for (input, p) in dispatches {
        let (n, block, out_row, offset) = (p[0], p[1], p[2], p[3]);
        for i in 0..n {
            let o = i / block;
            y[(o * out_row + offset + (i - o * block)) as usize] = inputs[*input][i as usize];
        }
    }
    y
}

#[test]
fn gpu_parameters_reproduce_the_cpu_kernel() {
    let cases: [(&[&[usize]], i64); 4] = [
        (&[&[2, 3, 4], &[2, 1, 4], &[2, 5, 4]], 1),
        (&[&[3, 2], &[3, 0], &[3, 6]], -1),
        (&[&[1, 2, 2], &[4, 2, 2]], 0),
        (&[&[2, 2, 3, 2, 1, 2], &[2, 2, 3, 2, 3, 2]], 4),
    ];
    let mut checked = 0;
    for (k, (shapes, a)) in cases.into_iter().enumerate() {
        for dtype in [DType::F32, DType::I64, DType::F16, DType::U8] {
            let ts: Vec<Tensor> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| random_tensor(dtype, s, (k * 10 + i) as u64))
                .collect();
            let refs: Vec<&Tensor> = ts.iter().collect();
            let want = cat(13, a, &refs).unwrap();
            let c = Concat {
                axis: a,
                negative_ok: true,
            };
            let types: Vec<_> = ts.iter().map(|t| Some((t.dtype(), t.shape()))).collect();
            let Some(d) = gpu_params(&c.layout(&types).unwrap()) else {
                continue;
            };
            let ins: Vec<Vec<u32>> = ts.iter().map(words).collect();
            let got = emulate(&as_words(d), &ins, want.bytes().len() / 4);
            assert_eq!(
                from_words(&got),
                want.bytes().as_ref(),
                "{dtype} {shapes:?}"
            );
            checked += 1;
        }
    }
    // u8 [3, 2] ++ [3, 6] and [.., 1, 2] blocks are not whole words; the rest run.
    assert_eq!(checked, 14);
}

// ---- The shader itself, through the Vulkan test harness ----

#[test]
fn gpu_concats_match_the_cpu() {
    let cases: [(&[&[usize]], i64); 6] = [
        (&[&[2, 3], &[2, 5]], 1),
        (&[&[3, 7, 5], &[1, 7, 5], &[4, 7, 5]], 0),
        (
            &[&[2, 3, 4], &[2, 0, 4], &[2, 9, 4], &[2, 1, 4], &[2, 2, 4]],
            -2,
        ),
        (&[&[5, 2, 3, 2], &[5, 2, 3, 6]], 3),
        (&[&[1000], &[37], &[0], &[211]], 0),
        (&[&[2, 2, 2, 2, 2, 3], &[2, 2, 2, 2, 2, 1]], 5),
    ];
    let mut ran = 0;
    for (i, (shapes, a)) in cases.into_iter().enumerate() {
        let op = op("Concat", 13, axis(a), shapes.len()).unwrap();
        for (j, dtype) in [DType::F32, DType::I64, DType::U32, DType::F16, DType::U8]
            .into_iter()
            .enumerate()
        {
            let ts: Vec<Tensor> = shapes
                .iter()
                .enumerate()
                .map(|(k, s)| random_tensor(dtype, s, (i * 100 + j * 10 + k) as u64))
                .collect();
            let inputs: Vec<Option<&Tensor>> = ts.iter().map(Some).collect();
            let types: Vec<ValueType> = ts.iter().map(ValueType::of).collect();
            let refs: Vec<Option<&ValueType>> = types.iter().map(Some).collect();
            if op.gpu(&refs, &[]).is_none() {
                continue;
            }
            if !gpu_same_bytes(
                op.as_ref(),
                &inputs,
                &format!("{dtype} {shapes:?} axis {a}"),
            ) {
                return;
            }
            ran += 1;
        }
    }
    // Blocks that are not whole words (9 of the 30, u8 and f16) take the element-sized remap.
    assert_eq!(ran, 30);
}
