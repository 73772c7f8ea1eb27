//! MatMulNBits against hand-derived products and an f64 reference written from the format's
//! definition (it never unpacks: it keeps the integers it packed), and the shaders against the
//! CPU kernel on the test GPU.

use crate::tensor::{DType, Tensor};
use crate::testkit::{
    Rng, assert_close, assert_err, f64s, gpu::run_op, gpu_matches_cpu, infer_known, run_one,
};
use crate::{AttrValue, Attrs, InferInput, MS_DOMAIN, NodeSpec, Op, ValueType};

fn op_with(attrs: &[(&str, AttrValue)]) -> Result<Box<dyn Op>, crate::OpError> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    crate::build_in(
        MS_DOMAIN,
        &NodeSpec {
            name: "t",
            op_type: "MatMulNBits",
            attrs: &attrs,
            opset: 1,
            num_inputs: 6,
            num_outputs: 1,
        },
    )
}

fn op(k: usize, n: usize, bits: usize, block: usize) -> Box<dyn Op> {
    op_with(&[
        ("K", AttrValue::Int(k as i64)),
        ("N", AttrValue::Int(n as i64)),
        ("bits", AttrValue::Int(bits as i64)),
        ("block_size", AttrValue::Int(block as i64)),
        ("accuracy_level", AttrValue::Int(4)),
    ])
    .unwrap()
}

fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn u8t(shape: &[usize], v: Vec<u8>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v)
}

fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Vec<f64> {
    f64s(&run_one(op, inputs).unwrap())
}

#[test]
fn four_bit_nibbles_scales_and_zero_points_by_hand() {
    // K = 16, one block. Column 0: q_k = k (low nibble first), scale 0.5, zero point 8.
    // Column 1: q_k = 15, scale 2, zero point 5.
    let b = u8t(
        &[2, 1, 8],
        [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]
            .into_iter()
            .chain([0xFF; 8])
            .collect(),
    );
    let scales = f32t(&[2, 1], &[0.5, 2.0]);
    let mut a = vec![1.0f32; 16];
    a.extend((0..16).map(|k| if k == 3 { 1.0 } else { 0.0 }));
    let a = f32t(&[2, 16], &a);
    let op = op(16, 2, 4, 16);
    // Ones: sum (k - 8) * 0.5 = -4 and 16 * (15 - 8) * 2 = 224 with the default zero point.
    let y = run(&*op, &[Some(&a), Some(&b), Some(&scales)]);
    assert_close(&y, &[-4.0, 224.0, -2.5, 14.0], 1e-6);
    // Packed zero points, one nibble per row: 8 and 5; and a bias.
    let zp = u8t(&[2, 1], vec![0xA8, 0x05]);
    let bias = f32t(&[2], &[1.0, -1.0]);
    let y = run(
        &*op,
        &[
            Some(&a),
            Some(&b),
            Some(&scales),
            Some(&zp),
            None,
            Some(&bias),
        ],
    );
    assert_close(&y, &[-3.0, 319.0, -1.5, 19.0], 1e-6);
    // Zero points as floats.
    let zp = f32t(&[2], &[7.5, 15.0]);
    let y = run(&*op, &[Some(&a), Some(&b), Some(&scales), Some(&zp)]);
    assert_close(&y, &[0.0, 0.0, -2.25, 0.0], 1e-6);
}

#[test]
fn eight_and_two_bit_values_by_hand() {
    // 8 bits: q_k = 100 + k, default zero point 128, scale 0.25:
    // 0.25 * (1600 + 120 - 2048) = -82.
    let b = u8t(&[1, 1, 16], (100..116).collect());
    let y = run(
        &*op(16, 1, 8, 16),
        &[
            Some(&f32t(&[1, 16], &[1.0; 16])),
            Some(&b),
            Some(&f32t(&[1], &[0.25])),
        ],
    );
    assert_close(&y, &[-82.0], 1e-6);
    // 2 bits: 0xE4 holds 0, 1, 2, 3 from the low bits up; default zero point 2:
    // 4 * (0 + 1 + 2 + 3 - 8) = -8; with a packed zero point of 1 (bits 0-1 of 0xFD): 4 * 2 = 8.
    let b = u8t(&[1, 1, 4], vec![0xE4; 4]);
    let ones = f32t(&[16], &[1.0; 16]);
    let s = f32t(&[1], &[1.0]);
    let op2 = op(16, 1, 2, 16);
    let y = run_one(&*op2, &[Some(&ones), Some(&b), Some(&s)]).unwrap();
    assert_eq!(y.shape(), &[1], "a 1-D A gives a 1-D Y");
    assert_close(&f64s(&y), &[-8.0], 1e-6);
    let zp = u8t(&[1], vec![0xFD]);
    assert_close(
        &run(&*op2, &[Some(&ones), Some(&b), Some(&s), Some(&zp)]),
        &[8.0],
        1e-6,
    );
}

/// A quantized weight made from known integers, and what the reference needs of it.
struct Quantized {
    k: usize,
    n: usize,
    block: usize,
    /// q[n][k] for k < K.
    q: Vec<Vec<u32>>,
    scales: Vec<f64>,
    /// Per block, as the reference uses them.
    zps: Vec<f64>,
    b: Tensor,
    scales_t: Tensor,
    zp_t: Option<Tensor>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ZpKind {
    Absent,
    Packed,
    Float,
}

/// Sets `bits` bits at bit offset `at` of `bytes` (low bits first).
fn put(bytes: &mut [u8], at: usize, bits: usize, v: u32) {
    for i in 0..bits {
        if (v >> i) & 1 == 1 {
            bytes[(at + i) / 8] |= 1 << ((at + i) % 8);
        } else {
            bytes[(at + i) / 8] &= !(1 << ((at + i) % 8));
        }
    }
}

fn float_tensor(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    crate::numeric::from_f64(dtype, shape.to_vec(), v.to_vec()).unwrap()
}

/// Values as the tensor of `dtype` holds them (rounded to f16 or bf16).
fn rounded(dtype: DType, v: &[f64]) -> Vec<f64> {
    f64s(&float_tensor(dtype, &[v.len()], v))
}

#[allow(clippy::too_many_arguments)]
fn quantize(
    rng: &mut Rng,
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    zp: ZpKind,
    dtype: DType,
    flat: bool,
) -> Quantized {
    let kb = k.div_ceil(block);
    let blob = block * bits / 8;
    let top = (1u64 << bits) as usize - 1;
    // Random bytes everywhere first: padding values and padding bits of the zero points stay
    // random, so a kernel that reads them shows.
    let mut bytes: Vec<u8> = (0..n * kb * blob)
        .map(|_| rng.range(0, 255) as u8)
        .collect();
    let mut q = vec![vec![0u32; k]; n];
    for (col, qs) in q.iter_mut().enumerate() {
        let row = &mut bytes[col * kb * blob..][..kb * blob];
        for (kk, v) in qs.iter_mut().enumerate() {
            *v = rng.range(0, top) as u32;
            put(row, kk * bits, bits, *v);
        }
    }
    let scales = rounded(
        dtype,
        &(0..n * kb)
            .map(|_| 0.02 + 0.2 * rng.unit().abs())
            .collect::<Vec<_>>(),
    );
    let per_block_shape = |cols: usize| if flat { vec![n * cols] } else { vec![n, cols] };
    let (zps, zp_t) = match zp {
        ZpKind::Absent => (vec![(1u32 << (bits - 1)) as f64; n * kb], None),
        ZpKind::Packed => {
            let row_bytes = (kb * bits).div_ceil(8);
            let mut zb: Vec<u8> = (0..n * row_bytes)
                .map(|_| rng.range(0, 255) as u8)
                .collect();
            let mut zps = Vec::new();
            for col in 0..n {
                for blk in 0..kb {
                    let v = rng.range(0, top) as u32;
                    put(&mut zb[col * row_bytes..], blk * bits, bits, v);
                    zps.push(v as f64);
                }
            }
            (zps, Some(u8t(&per_block_shape(row_bytes), zb)))
        }
        ZpKind::Float => {
            let zps = rounded(
                dtype,
                &(0..n * kb)
                    .map(|_| top as f64 * (0.5 + 0.5 * rng.unit()))
                    .collect::<Vec<_>>(),
            );
            let t = float_tensor(dtype, &per_block_shape(kb), &zps);
            (zps, Some(t))
        }
    };
    Quantized {
        k,
        n,
        block,
        q,
        scales_t: float_tensor(dtype, &per_block_shape(kb), &scales),
        scales,
        zps,
        b: u8t(&[n, kb, blob], bytes),
        zp_t,
    }
}

/// The product from the definition, in f64, from the integers before packing.
fn reference(w: &Quantized, a: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
    let kb = w.k.div_ceil(w.block);
    let m = a.len() / w.k;
    let mut y = vec![0.0; m * w.n];
    for r in 0..m {
        for col in 0..w.n {
            let mut s = bias.map_or(0.0, |b| b[col]);
            for kk in 0..w.k {
                let blk = col * kb + kk / w.block;
                let weight = (w.q[col][kk] as f64 - w.zps[blk]) * w.scales[blk];
                s += a[r * w.k + kk] * weight;
            }
            y[r * w.n + col] = s;
        }
    }
    y
}

/// K, N, bits, block_size.
type Dims = (usize, usize, usize, usize);

/// A random case: the op, its inputs (A of `lead` rows then K) and the reference output.
struct Case {
    op: Box<dyn Op>,
    inputs: Vec<Option<Tensor>>,
    want: Vec<f64>,
}

impl Case {
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed: u64,
        lead: &[usize],
        (k, n, bits, block): Dims,
        zp: ZpKind,
        bias: bool,
        dtype: DType,
    ) -> Case {
        let mut rng = Rng::new(seed);
        let w = quantize(
            &mut rng,
            k,
            n,
            bits,
            block,
            zp,
            dtype,
            seed.is_multiple_of(2),
        );
        let m: usize = lead.iter().product();
        let a = rounded(dtype, &rng.f64s(m * k));
        let b = bias.then(|| rounded(dtype, &rng.f64s(n)));
        let want = reference(&w, &a, b.as_deref());
        let mut shape = lead.to_vec();
        shape.push(k);
        let inputs = vec![
            Some(float_tensor(dtype, &shape, &a)),
            Some(w.b.clone()),
            Some(w.scales_t.clone()),
            w.zp_t.clone(),
            None,
            b.map(|b| float_tensor(dtype, &[n], &b)),
        ];
        Case {
            op: op(k, n, bits, block),
            inputs,
            want,
        }
    }

    fn inputs(&self) -> Vec<Option<&Tensor>> {
        self.inputs.iter().map(Option::as_ref).collect()
    }
}

const ZPS: [ZpKind; 3] = [ZpKind::Absent, ZpKind::Packed, ZpKind::Float];

#[test]
fn cpu_matches_the_reference() {
    // (lead dims of A, (K, N, bits, block)): K a multiple of the block or not; few rows (dot
    // products) and many (tiles through the GEMM, N over one tile).
    let shapes: [(&[usize], Dims); 6] = [
        (&[1], (40, 5, 4, 16)),
        (&[3], (64, 7, 4, 32)),
        (&[2, 5], (100, 300, 4, 16)),
        (&[1, 2], (70, 9, 8, 64)),
        (&[12], (33, 6, 2, 16)),
        (&[], (48, 3, 8, 16)),
    ];
    let mut seed = 1;
    for (lead, geom) in shapes {
        for zp in ZPS {
            for bias in [false, true] {
                seed += 1;
                let c = Case::new(seed, lead, geom, zp, bias, DType::F32);
                let y = run_one(&*c.op, &c.inputs()).unwrap();
                let mut shape = lead.to_vec();
                shape.push(geom.1);
                assert_eq!(y.shape(), &shape[..]);
                assert_close(&f64s(&y), &c.want, 1e-5);
            }
        }
    }
}

#[test]
fn half_inputs_compute_in_f32_and_round_once() {
    for (dtype, tol) in [(DType::F16, 2e-3), (DType::BF16, 1e-2)] {
        for (i, zp) in ZPS.into_iter().enumerate() {
            let c = Case::new(50 + i as u64, &[2, 6], (80, 12, 4, 32), zp, true, dtype);
            let y = run_one(&*c.op, &c.inputs()).unwrap();
            assert_eq!(y.dtype(), dtype);
            assert_close(&f64s(&y), &c.want, tol);
        }
    }
}

#[test]
fn an_identity_g_idx_is_accepted_and_any_other_refused() {
    let c = Case::new(7, &[2], (40, 4, 4, 16), ZpKind::Packed, false, DType::F32);
    let mut inputs = c.inputs.clone();
    // K = 40, or K padded to the blocks (48): k / 16 either way.
    for len in [40, 48] {
        let g: Vec<i32> = (0..len).map(|k| k / 16).collect();
        inputs[4] = Some(Tensor::from_vec(vec![len as usize], g));
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        assert_close(&run(&*c.op, &refs), &c.want, 1e-5);
        // Known while planning, it gets the GPU kernel (which never reads it).
        gpu_matches_cpu(&*c.op, &refs, 1e-4);
    }
    let mut g: Vec<i32> = (0..40).map(|k| k / 16).collect();
    g.swap(3, 20);
    inputs[4] = Some(Tensor::from_vec(vec![40], g));
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    assert_err(infer_known(&*c.op, &refs), true, "g_idx[3] = 1");
    // Known only when it runs: the CPU kernel refuses it then, and there is no GPU kernel.
    let types: Vec<Option<ValueType>> = refs.iter().map(|t| t.map(ValueType::of)).collect();
    let unknown: Vec<Option<InferInput<'_>>> = types
        .iter()
        .map(|t| t.as_ref().map(|ty| InferInput { ty, value: None }))
        .collect();
    let out = c.op.infer(&unknown).unwrap();
    assert_err(c.op.run_cpu(&refs, &out), true, "act-order");
    let type_refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
    assert!(c.op.gpu(&type_refs, &out).is_none());
}

#[test]
fn bad_attributes_are_refused() {
    let attrs = |bits: i64, block: i64| {
        vec![
            ("K", AttrValue::Int(32)),
            ("N", AttrValue::Int(2)),
            ("bits", AttrValue::Int(bits)),
            ("block_size", AttrValue::Int(block)),
        ]
    };
    assert_err(op_with(&attrs(3, 32)), true, "bits=3");
    assert_err(op_with(&attrs(4, 24)), false, "power of two");
    assert_err(op_with(&attrs(4, 8)), false, "at least 16");
    assert_err(op_with(&attrs(4, 32)[1..]), false, "'K' is required");
    let mut prepacked = attrs(4, 32);
    prepacked.push(("weight_prepacked", AttrValue::Int(1)));
    assert_err(op_with(&prepacked), true, "weight_prepacked");
    // bits defaults to 4.
    let mut default_bits = attrs(4, 32);
    default_bits.remove(2);
    assert!(op_with(&default_bits).is_ok());
}

#[test]
fn bad_inputs_are_refused() {
    let c = Case::new(9, &[3], (40, 4, 4, 16), ZpKind::Absent, false, DType::F32);
    let good = c.inputs.clone();
    let check = |i: usize, t: Tensor, needle: &str| {
        let mut inputs = good.clone();
        inputs[i] = Some(t);
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        assert_err(infer_known(&*c.op, &refs), false, needle);
    };
    check(0, f32t(&[3, 41], &[0.0; 123]), "end in K=40");
    check(1, u8t(&[4, 3, 4], vec![0; 48]), "[4, 3, 8]");
    check(2, f32t(&[4, 2], &[1.0; 8]), "scales must have shape [4, 3]");
    check(
        2,
        Tensor::from_vec(vec![12], vec![1.0f64; 12]),
        "scales must be float",
    );
    check(3, u8t(&[4, 3], vec![0; 12]), "[4, 2]");
    check(
        3,
        f32t(&[4, 2], &[1.0; 8]),
        "zero_points must have shape [4, 3]",
    );
    check(
        4,
        Tensor::from_vec(vec![40], vec![0i64; 40]),
        "g_idx must be int32",
    );
    check(5, f32t(&[5], &[0.0; 5]), "bias must have shape [4]");
    let mut inputs = good.clone();
    inputs[0] = Some(Tensor::from_vec(vec![3, 40], vec![0i32; 120]));
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    assert_err(infer_known(&*c.op, &refs), true, "input A of type int32");
}

#[test]
fn flops_count_the_product() {
    let c = Case::new(
        3,
        &[2, 5],
        (40, 4, 4, 16),
        ZpKind::Absent,
        false,
        DType::F32,
    );
    let types: Vec<Option<ValueType>> = c
        .inputs
        .iter()
        .map(|t| t.as_ref().map(ValueType::of))
        .collect();
    let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
    let out = infer_known(&*c.op, &c.inputs()).unwrap();
    assert_eq!(c.op.flops(&refs, &out), 2 * 10 * 4 * 40);
}

#[test]
fn the_op_is_a_com_microsoft_one() {
    let attrs = Attrs::default();
    let spec = NodeSpec {
        name: "t",
        op_type: "MatMulNBits",
        attrs: &attrs,
        opset: 13,
        num_inputs: 3,
        num_outputs: 1,
    };
    assert_err(crate::build(&spec), true, "not implemented");
}

/// GPU against CPU over both kernels, both dtypes, every kind of zero point, with and without
/// a bias, every width, K a multiple of the block or not.
#[test]
fn gpu_kernels_match_cpu() {
    // (lead dims, (K, N, bits, block)): 1 and 3 rows run the GEMV kernel (N = 37: five column
    // groups, the last partial), 5 and 70 the tiled one (N = 130: three column tiles).
    let shapes: [(&[usize], Dims); 6] = [
        (&[1], (40, 37, 4, 16)),
        (&[3], (96, 9, 4, 32)),
        (&[1, 1], (72, 11, 8, 16)),
        (&[5], (50, 130, 4, 16)),
        (&[2, 35], (100, 20, 4, 64)),
        (&[70], (36, 8, 2, 16)),
    ];
    let mut seed = 100;
    for (lead, geom) in shapes {
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::F16, 2e-3)] {
            for zp in ZPS {
                seed += 1;
                let c = Case::new(seed, lead, geom, zp, seed % 3 != 0, dtype);
                gpu_matches_cpu(&*c.op, &c.inputs(), tol);
            }
        }
    }
    // The usual int4 layout takes matmul_nbits_gemv4.comp: each lane count (K 512, 2048,
    // 4096 give 8, 16 and 32 invocations per column), blocks of 32, 64 and 128, 1 to 4 rows.
    let usual: [(&[usize], Dims); 4] = [
        (&[1], (512, 33, 4, 32)),
        (&[2], (2048, 19, 4, 64)),
        (&[4], (4096, 9, 4, 128)),
        (&[1, 3], (128, 70, 4, 32)),
    ];
    for (lead, geom) in usual {
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::F16, 2e-3)] {
            for zp in ZPS {
                seed += 1;
                let c = Case::new(seed, lead, geom, zp, seed % 2 == 0, dtype);
                gpu_matches_cpu(&*c.op, &c.inputs(), tol);
            }
        }
    }
    // Two bits on the GEMV kernel, and a single row with a bias and packed zero points.
    for (i, zp) in ZPS.into_iter().enumerate() {
        let c = Case::new(300 + i as u64, &[2], (64, 10, 2, 32), zp, true, DType::F32);
        gpu_matches_cpu(&*c.op, &c.inputs(), 1e-4);
    }
}

/// The GPU output against the reference too, so that a shader and the CPU kernel cannot agree
/// on the same mistake.
#[test]
fn gpu_matches_the_reference() {
    // K 60: the word-at-a-time GEMV kernel and the tiles; K 128: matmul_nbits_gemv4.comp.
    for (seed, lead, k) in [
        (400u64, &[2usize][..], 60),
        (401, &[67][..], 60),
        (402, &[3][..], 128),
    ] {
        let c = Case::new(seed, lead, (k, 70, 4, 32), ZpKind::Packed, true, DType::F32);
        let refs = c.inputs();
        let out = infer_known(&*c.op, &refs).unwrap();
        match run_op(&*c.op, &refs, &out) {
            Ok(y) => assert_close(&f64s(&y[0]), &c.want, 1e-4),
            Err(e) if e == "skipped" => return,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Which GEMV kernel the op takes: 16-byte pieces for the usual int4 layout, words otherwise.
#[test]
fn the_usual_int4_layout_takes_the_sixteen_byte_kernel() {
    let first = |m: usize, (k, n, bits, block): Dims| {
        let c = Case::new(
            1,
            &[m],
            (k, n, bits, block),
            ZpKind::Packed,
            false,
            DType::F16,
        );
        let types: Vec<Option<ValueType>> =
            c.inputs().iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let out = [ValueType::new(DType::F16, vec![m, n])];
        c.op.gpu(&refs, &out).unwrap().dispatches[0].kernel()
    };
    use vkml_shaders::{matmul_nbits_gemm, matmul_nbits_gemv, matmul_nbits_gemv4};
    assert_eq!(
        first(1, (128, 8, 4, 32)),
        matmul_nbits_gemv4::Variant::F16.kernel()
    );
    assert_eq!(
        first(4, (256, 8, 4, 64)),
        matmul_nbits_gemv4::Variant::F16.kernel()
    );
    // Blocks of 16, K off a multiple of 32, 8 bits: a word at a time.
    for geom in [(128, 8, 4, 16), (96 + 16, 8, 4, 16), (128, 8, 8, 32)] {
        assert_eq!(first(1, geom), matmul_nbits_gemv::Variant::F16.kernel());
    }
    assert_eq!(
        first(5, (128, 8, 4, 32)),
        matmul_nbits_gemm::Variant::F16.kernel()
    );
}
