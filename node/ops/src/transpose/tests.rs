use super::gpu::{Plan, plan};
use super::*;
use crate::tensor::DType;
use crate::testkit::*;
use half::f16;

fn perm_attr(p: &[i64]) -> Vec<(&'static str, crate::AttrValue)> {
    vec![("perm", ints(p))]
}

/// numpy's definition, element by element: out[o] = x[sum_i o_i * stride_x[perm[i]]].
fn naive(x: &Tensor, perm: &[usize]) -> Vec<u8> {
    let es = x.dtype().size();
    let xs = strides(x.shape());
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let os = strides(&out_shape);
    let mut out = Vec::with_capacity(x.bytes().len());
    for o in 0..numel(&out_shape) {
        let src: usize = (0..perm.len())
            .map(|i| (o / os[i]) % out_shape[i] * xs[perm[i]])
            .sum();
        out.extend_from_slice(&x.bytes()[src * es..(src + 1) * es]);
    }
    out
}

#[test]
fn default_perm_reverses() {
    let x = iota_f32(&[2, 3]);
    let y = run_node("Transpose", 13, vec![], &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![0., 3., 1., 4., 2., 5.]
    );
    let x = iota_f32(&[2, 1, 3]);
    let y = run_node("Transpose", 1, vec![], &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[3, 1, 2]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![0., 3., 1., 4., 2., 5.]
    );
}

#[test]
fn explicit_perms_by_hand() {
    // x[i][j][k] = 12i + 4j + k, shape [2, 3, 4]; perm [1, 0, 2] gives y[j][i][k].
    let x = iota_f32(&[2, 3, 4]);
    let y = run_node("Transpose", 21, perm_attr(&[1, 0, 2]), &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[3, 2, 4]);
    let want: Vec<f32> = [
        0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11,
    ]
    .into_iter()
    .chain([20, 21, 22, 23])
    .map(|v| v as f32)
    .collect();
    assert_eq!(y.view::<f32>().unwrap().to_vec(), want);
    // perm [2, 0, 1]: y[k][i][j] = x[i][j][k]; first row is k = 0: 0, 4, 8, 12, 16, 20.
    let y = run_node("Transpose", 13, perm_attr(&[2, 0, 1]), &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[4, 2, 3]);
    assert_eq!(
        &y.view::<f32>().unwrap()[..7],
        &[0., 4., 8., 12., 16., 20., 1.]
    );
}

#[test]
fn spec_examples_shapes() {
    let x = iota_f32(&[1, 2, 3]);
    let y = run_node("Transpose", 13, perm_attr(&[1, 0, 2]), &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[2, 1, 3]);
    assert_eq!(y.bytes(), x.bytes(), "moving a unit axis moves no data");
    let y = run_node("Transpose", 13, perm_attr(&[1, 2, 0]), &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[2, 3, 1]);
}

#[test]
fn every_dtype_against_the_definition() {
    let shape = [3, 1, 4, 2, 5];
    let perms: [&[usize]; 4] = [
        &[4, 3, 2, 1, 0],
        &[0, 2, 1, 4, 3],
        &[2, 3, 0, 4, 1],
        &[0, 1, 2, 3, 4],
    ];
    // Strings are moved by no op but the string ops (Op::strings): left out.
    let dtypes = DType::ALL.into_iter().filter(|&d| d != DType::String);
    for (seed, dtype) in dtypes.enumerate() {
        let x = random_tensor(dtype, &shape, seed as u64);
        for perm in perms {
            let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
            let y = run_node("Transpose", 13, perm_attr(&p), &[Some(&x)]).unwrap();
            assert_eq!(y.bytes().as_ref(), naive(&x, perm), "{dtype} {perm:?}");
        }
    }
}

#[test]
fn rank_6_against_the_definition() {
    let shape = [2, 3, 1, 4, 3, 2];
    for (seed, perm) in [[5, 0, 3, 1, 4, 2], [1, 3, 5, 0, 2, 4], [3, 4, 5, 0, 1, 2]]
        .into_iter()
        .enumerate()
    {
        let x = random_tensor(DType::F16, &shape, 40 + seed as u64);
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let y = run_node("Transpose", 13, perm_attr(&p), &[Some(&x)]).unwrap();
        assert_eq!(y.bytes().as_ref(), naive(&x, &perm), "{perm:?}");
    }
}

#[test]
fn scalars_and_empty_tensors() {
    let s = Tensor::scalar(f16::from_f32(3.0));
    let y = run_node("Transpose", 13, vec![], &[Some(&s)]).unwrap();
    assert_eq!(y, s);
    let z = Tensor::zeros(DType::Bool, vec![2, 0, 3]);
    let y = run_node("Transpose", 13, perm_attr(&[2, 0, 1]), &[Some(&z)]).unwrap();
    assert_eq!(y.shape(), &[3, 2, 0]);
}

#[test]
fn bad_perms() {
    let x = iota_f32(&[2, 3, 4]);
    let t = |p: &[i64]| run_node("Transpose", 13, perm_attr(p), &[Some(&x)]);
    assert_err(t(&[0, 1]), false, "rank 3");
    assert_err(t(&[0, 1, 1]), false, "twice");
    assert_err(t(&[0, 1, 3]), false, "not an axis");
    assert_err(t(&[0, -1, 1]), false, "not an axis");
}

#[test]
fn walks_merge_adjacent_axes() {
    // [2, 3, 4, 5] -> perm [0, 2, 3, 1]: axes 2 and 3 travel together.
    let w = walk(&[2, 3, 4, 5], &[0, 2, 3, 1]);
    assert_eq!(
        w,
        Walk {
            dims: vec![2, 20, 3],
            strides: vec![60, 1, 20]
        }
    );
    // An identity permutation is one contiguous run; unit axes vanish.
    let w = walk(&[2, 1, 3], &[1, 0, 2]);
    assert_eq!(
        w,
        Walk {
            dims: vec![6],
            strides: vec![1]
        }
    );
}

#[test]
fn gpu_params_by_hand() {
    // f32 [2, 3] -> [3, 2]: out axis 0 walks input stride 1, out axis 1 stride 3.
    assert_eq!(
        plan(&[2, 3], &[1, 0], 4).unwrap().words(),
        vec![6, 4, 1, 1, 1, 1, 3, 2, 0, 0, 0, 0, 1, 3]
    );
    // f16 [2, 3, 4] perm [1, 0, 2]: the kept last axis (4 x 2 bytes) becomes an 8-byte element.
    assert_eq!(
        plan(&[2, 3, 4], &[1, 0, 2], 2).unwrap().words(),
        vec![12, 8, 1, 1, 1, 1, 3, 2, 0, 0, 0, 0, 1, 3]
    );
    // u8 [2, 2] transposed: packed bytes, one output word.
    assert_eq!(
        plan(&[2, 2], &[1, 0], 1).unwrap().words(),
        vec![1, 1, 1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 1, 2]
    );
    // 9 bytes are not whole words; rank 7 after merging is past the kernel's reach.
    assert!(plan(&[3, 3], &[1, 0], 1).is_none());
    assert!(plan(&[2; 7], &[6, 5, 4, 3, 2, 1, 0], 4).is_none());
    assert_eq!(plan(&[3, 0], &[1, 0], 4), Some(Plan::Empty));
    // f32 [2, 20, 3, 17] perm [0, 3, 2, 1]: walk dims [2, 17, 3, 20], input strides
    // [1020, 1, 17, 51]. Tiles: a = axis 1 (17), b = axis 3 (20, input stride 51); output
    // strides [1020, 60, 20, 1]; batch axes 0 and 2.
    assert_eq!(
        plan(&[2, 20, 3, 17], &[0, 3, 2, 1], 4).unwrap().words(),
        vec![
            6, 1, 1, 17, 20, 51, 60, 1, 1, 2, 3, 0, 0, 1020, 17, 0, 0, 1020, 20
        ]
    );
}

/// transpose_tiled.comp's arithmetic: every workgroup's tile, every invocation's words.
fn emulate_tiled(p: &[u32], x: &[u32], n: usize) -> Vec<u32> {
    let mut y = vec![0xDEAD_BEEF; n];
    let (groups, tiles_a, tiles_b, da, db, sb, oa) = (p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
    let (bdims, bin, bout) = (&p[7..11], &p[11..15], &p[15..19]);
    for g in 0..groups {
        let (tb, t) = (g % tiles_b, g / tiles_b);
        let (ta, mut bi) = (t % tiles_a, t / tiles_a);
        let (mut ib0, mut ob0) = (0, 0);
        for k in (0..4).rev() {
            let c = bi % bdims[k];
            bi /= bdims[k];
            ib0 += c * bin[k];
            ob0 += c * bout[k];
        }
        let mut tile = [[0u32; 33]; 32];
        for ty in 0..8 {
            for tx in 0..32 {
                for r in (0..32).step_by(8) {
                    let (ia, ib) = (ta * 32 + tx, tb * 32 + ty + r);
                    if ia < da && ib < db {
                        tile[(ty + r) as usize][tx as usize] = x[(ib0 + ia + ib * sb) as usize];
                    }
                }
            }
        }
        for ty in 0..8 {
            for tx in 0..32 {
                for r in (0..32).step_by(8) {
                    let (a, b) = (ta * 32 + ty + r, tb * 32 + tx);
                    if a < da && b < db {
                        y[(ob0 + a * oa + b) as usize] = tile[tx as usize][(ty + r) as usize];
                    }
                }
            }
        }
    }
    y
}

/// transpose.comp's arithmetic, word by word, so the parameters are checked on every machine;
/// the Vulkan tests run the shader itself.
fn emulate(params: &[u32], x: &[u32]) -> Vec<u32> {
    let (n, eb) = (params[0] as usize, params[1] as usize);
    let (dims, st) = (&params[2..8], &params[8..14]);
    let source = |mut e: usize| {
        let mut src = 0;
        for a in (0..6).rev() {
            src += (e % dims[a] as usize) * st[a] as usize;
            e /= dims[a] as usize;
        }
        src
    };
    (0..n)
        .map(|w| {
            if eb >= 4 {
                let k = eb / 4;
                x[source(w / k) * k + w % k]
            } else {
                let (per, bits) = (4 / eb, eb as u32 * 8);
                (0..per).fold(0u32, |acc, s| {
                    let ie = source(w * per + s);
                    let v = (x[ie / per] >> ((ie % per) as u32 * bits)) & ((1 << bits) - 1);
                    acc | v << (s as u32 * bits)
                })
            }
        })
        .collect()
}

#[test]
fn gpu_parameters_reproduce_the_cpu_kernel() {
    let cases: [(&[usize], &[usize]); 10] = [
        (&[40, 50], &[1, 0]),
        (&[2, 20, 3, 17], &[0, 3, 2, 1]),
        (&[3, 33, 2, 65], &[2, 3, 0, 1]),
        (&[2, 17, 2, 3, 18, 2], &[5, 1, 0, 4, 3, 2]),
        (&[2, 3], &[1, 0]),
        (&[3, 1, 4, 2, 5], &[4, 3, 2, 1, 0]),
        (&[2, 3, 4, 6], &[0, 2, 3, 1]),
        (&[2, 3, 2, 2, 3, 2], &[5, 0, 3, 1, 4, 2]),
        (&[4, 6], &[1, 0]),
        (&[7, 4], &[0, 1]),
    ];
    let (mut checked, mut tiled) = (0, 0);
    for (i, (shape, perm)) in cases.into_iter().enumerate() {
        for dtype in [DType::F32, DType::I64, DType::F16, DType::U8, DType::Bool] {
            let x = random_tensor(dtype, shape, i as u64);
            let got = match plan(shape, perm, dtype.size()) {
                None => continue,
                Some(Plan::Empty) => Vec::new(),
                Some(p @ Plan::Words(_)) => from_words(&emulate(&p.words(), &words(&x))),
                Some(p @ Plan::Tiled(_)) => {
                    tiled += 1;
                    from_words(&emulate_tiled(&p.words(), &words(&x), x.bytes().len() / 4))
                }
            };
            assert_eq!(got, naive(&x, perm), "{dtype} {shape:?} {perm:?}");
            checked += 1;
        }
    }
    // Only u8 and bool [2, 3] and [3, 33, 2, 65] (not whole words) have no kernel.
    assert_eq!(checked, 46);
    // f32 on the first three cases; [40, 50] as f16 is packed, not tiled.
    assert_eq!(tiled, 3);
    // Every 4- and 8-byte case above has a kernel.
    assert!(plan(&[3, 1, 4, 2, 5], &[4, 3, 2, 1, 0], 8).is_some());
}

#[test]
fn kernel_fits_the_push_constant_limit() {
    let op = op("Transpose", 13, perm_attr(&[5, 0, 3, 1, 4, 2]), 1).unwrap();
    let x = ValueType::new(DType::F32, vec![2, 3, 2, 2, 3, 2]);
    let k = op.gpu(&[Some(&x)], &[]).expect("a kernel");
    let d = &k.dispatches[0];
    assert_eq!(
        (d.kernel(), d.groups),
        (vkml_shaders::transpose::Variant::Main.kernel(), [1, 1, 1])
    );
    assert!(8 * d.buffers.len() + 4 * d.params.len() <= 128);
    // A big 2-D f32 transpose goes through tiles: 2 x 3 tiles of 32, one workgroup each.
    let x = ValueType::new(DType::F32, vec![40, 70]);
    let k = op.gpu(&[Some(&x)], &[]);
    assert!(k.is_none(), "perm of rank 6 does not fit rank 2");
    let op = crate::testkit::op("Transpose", 13, vec![], 1).unwrap();
    let k = op.gpu(&[Some(&x)], &[]).expect("a kernel");
    let d = &k.dispatches[0];
    assert_eq!(
        (d.kernel(), d.groups),
        (
            vkml_shaders::transpose_tiled::Variant::Main.kernel(),
            [6, 1, 1]
        )
    );
    assert!(8 * d.buffers.len() + 4 * d.params.len() <= 128);
}

// ---- The shaders themselves, through the Vulkan test harness ----

#[test]
fn gpu_transposes_match_the_cpu() {
    let cases: [(&[usize], &[usize]); 12] = [
        (&[2, 3], &[1, 0]),
        (&[7, 5], &[1, 0]),
        (&[67, 45], &[1, 0]),
        (&[3, 40, 33], &[0, 2, 1]),
        (&[2, 33, 3, 70], &[0, 3, 2, 1]),
        (&[5, 1, 7, 3], &[3, 2, 1, 0]),
        (&[2, 4, 3, 8], &[0, 2, 1, 3]),
        (&[4, 3, 2, 5], &[0, 2, 3, 1]),
        (&[2, 3, 2, 3, 2, 3], &[5, 0, 3, 1, 4, 2]),
        (&[3, 2, 5, 2, 3, 2], &[1, 3, 5, 0, 2, 4]),
        (&[2, 17, 3, 2, 19, 2], &[4, 1, 0, 5, 3, 2]),
        (&[6, 10], &[0, 1]),
    ];
    let mut ran = 0;
    for (i, (shape, perm)) in cases.into_iter().enumerate() {
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let op = op("Transpose", 13, perm_attr(&p), 1).unwrap();
        let dtypes = [
            DType::F32,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::U8,
            DType::Bool,
        ];
        for (j, dtype) in dtypes.into_iter().enumerate() {
            let x = random_tensor(dtype, shape, (i * 10 + j) as u64);
            let ty = ValueType::of(&x);
            if op.gpu(&[Some(&ty)], &[]).is_none() {
                continue;
            }
            if !gpu_same_bytes(
                op.as_ref(),
                &[Some(&x)],
                &format!("{dtype} {shape:?} {perm:?}"),
            ) {
                return;
            }
            ran += 1;
        }
    }
    assert!(ran >= 60, "only {ran} cases had a GPU kernel");
}
