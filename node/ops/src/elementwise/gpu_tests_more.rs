//! Every shader variant of the elementwise family against the CPU kernels (themselves checked
//! against hand-derived and numpy values in `tests_more`), on the Vulkan test harness.

use super::unary::OPS;
use crate::AttrValue;
use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, build, gpu_matches_cpu};
use half::f16;

/// `v` as a tensor of `d`, through the CPU Cast (so the values are what that type holds).
fn as_type(v: &[f64], shape: &[usize], d: DType) -> Tensor {
    let t = Tensor::from_vec(shape.to_vec(), v.to_vec());
    crate::cast::cast_tensor(&t, d).unwrap()
}

fn tol(d: DType) -> f64 {
    if d == DType::F16 { 1e-2 } else { 1e-4 }
}

#[test]
fn gpu_unary_float_ops_f32_f16() {
    let mut rng = Rng::new(5);
    let base: Vec<f64> = rng.f64s(1000).iter().map(|v| v * 3.0).collect();
    for &(name, _) in OPS.iter() {
        if matches!(name, "Not" | "BitwiseNot" | "IsNaN" | "IsInf") {
            continue;
        }
        // Keep each op on its domain, and Tan away from its poles.
        let xs: Vec<f64> = match name {
            "Sqrt" | "Log" => base.iter().map(|v| v.abs() + 0.01).collect(),
            "Acosh" => base.iter().map(|v| v.abs() + 1.0).collect(),
            "Asin" | "Acos" | "Atanh" => base.iter().map(|v| v / 3.1).collect(),
            "Tan" => base.iter().map(|v| v / 2.7).collect(),
            _ => base.clone(),
        };
        let mut variants = vec![build(name, 22, &[]).unwrap()];
        if name == "Gelu" {
            let tanh = AttrValue::String("tanh".into());
            variants.push(build(name, 22, &[("approximate", tanh)]).unwrap());
        }
        if name == "LeakyRelu" || name == "Elu" || name == "Celu" {
            variants.push(build(name, 22, &[("alpha", AttrValue::Float(0.7))]).unwrap());
        }
        for op in &variants {
            for d in [DType::F32, DType::F16] {
                let x = as_type(&xs, &[xs.len()], d);
                gpu_matches_cpu(&**op, &[Some(&x)], tol(d));
            }
            // f64, where unary_f64.comp computes the formula at f64's precision.
            let x = Tensor::from_vec(vec![xs.len()], xs.clone());
            let types = [Some(crate::ValueType::of(&x))];
            let refs: Vec<Option<&crate::ValueType>> = types.iter().map(Option::as_ref).collect();
            let outs = [crate::ValueType::of(&x)];
            if op.gpu(&refs, &outs).is_some() {
                gpu_matches_cpu(&**op, &[Some(&x)], 1e-13);
            }
        }
    }
}

#[test]
fn gpu_unary_integer_ops() {
    let vals = [
        -128.0, -127.0, -5.0, -1.0, 0.0, 1.0, 7.0, 127.0, 200.0, -70000.0,
    ];
    for d in [
        DType::I32,
        DType::I64,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
    ] {
        let x = as_type(&vals, &[vals.len()], d);
        for name in ["Neg", "Abs", "Sign", "Relu", "BitwiseNot"] {
            let op = build(name, 18, &[]).unwrap();
            let unsigned = matches!(d, DType::U8 | DType::U16 | DType::U32 | DType::U64);
            if unsigned && matches!(name, "Neg" | "Relu") {
                continue; // not in those ops' type lists
            }
            gpu_matches_cpu(&*op, &[Some(&x)], 0.0);
        }
    }
    let b = Tensor::from_bools(vec![5], vec![true, false, false, true, true]);
    gpu_matches_cpu(&*build("Not", 1, &[]).unwrap(), &[Some(&b)], 0.0);
}

#[test]
fn gpu_isnan_isinf() {
    let vals = [1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e6];
    for d in [DType::F32, DType::F16] {
        let x = as_type(&vals, &[vals.len()], d);
        gpu_matches_cpu(&*build("IsNaN", 20, &[]).unwrap(), &[Some(&x)], 0.0);
        for (neg, pos) in [(1, 1), (0, 1), (1, 0)] {
            let attrs = [
                ("detect_negative", AttrValue::Int(neg)),
                ("detect_positive", AttrValue::Int(pos)),
            ];
            gpu_matches_cpu(&*build("IsInf", 20, &attrs).unwrap(), &[Some(&x)], 0.0);
        }
    }
}

/// Values for one binary test: floats with a NaN and a zero, or integers with extremes.
fn operand(rng: &mut Rng, shape: &[usize], d: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let r = rng.unit();
            match (d.is_float(), i % 7) {
                (true, 3) => 0.0,
                (true, 5) => f64::NAN,
                (true, _) => r * 4.0,
                (false, 3) => 0.0,
                (false, 5) => -1.0,
                (false, _) => (r * 150.0).round(),
            }
        })
        .collect();
    as_type(&v, shape, d)
}

const SHAPES: [(&[usize], &[usize]); 4] = [
    (&[2, 3, 4], &[3, 1]),
    (&[5, 7], &[]),
    (&[2, 1, 3], &[2, 3]),
    (&[33], &[33]),
];

#[test]
fn gpu_binary_every_dtype_and_op() {
    let mut rng = Rng::new(9);
    let fmod1 = [("fmod", AttrValue::Int(1))];
    for d in [
        DType::F32,
        DType::F16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::I8,
        DType::U8,
    ] {
        let mut ops = vec![
            ("Add", &[][..]),
            ("Sub", &[]),
            ("Mul", &[]),
            ("Div", &[]),
            ("Mod", &fmod1[..]),
            ("PRelu", &[]),
            ("Equal", &[]),
            ("Less", &[]),
            ("LessOrEqual", &[]),
            ("Greater", &[]),
            ("GreaterOrEqual", &[]),
        ];
        if !d.is_float() {
            ops.extend([
                ("Mod", &[][..]),
                ("BitwiseAnd", &[]),
                ("BitwiseOr", &[]),
                ("BitwiseXor", &[]),
            ]);
        }
        for (a, b) in SHAPES {
            let (x, y) = (operand(&mut rng, a, d), operand(&mut rng, b, d));
            let grows_a = crate::util::broadcast_shapes(a, b).unwrap() != a;
            for (name, attrs) in &ops {
                if *name == "PRelu" && grows_a {
                    continue; // the slope may not grow X
                }
                gpu_matches_cpu(
                    &*build(name, 18, attrs).unwrap(),
                    &[Some(&x), Some(&y)],
                    tol(d),
                );
            }
            for name in ["Max", "Min"] {
                gpu_matches_cpu(
                    &*build(name, 13, &[]).unwrap(),
                    &[Some(&x), Some(&y)],
                    tol(d),
                );
            }
        }
    }
}

#[test]
fn gpu_pow_shift_and_logic() {
    let base = [2.0, -2.0, 0.5, -3.0, 0.0, 0.0, 1.5, -0.0, 3.0];
    let exps = [3.0, 3.0, -2.0, 2.0, 0.0, -1.0, 0.5, -3.0, 2.5];
    for d in [DType::F32, DType::F16] {
        let (x, e) = (as_type(&base, &[9], d), as_type(&exps, &[9], d));
        gpu_matches_cpu(
            &*build("Pow", 15, &[]).unwrap(),
            &[Some(&x), Some(&e)],
            tol(d),
        );
    }
    let a = Tensor::from_vec(vec![2, 4], vec![1u8, 0x80, 16, 3, 255, 7, 9, 100]);
    let s = Tensor::from_vec(vec![4], vec![7u8, 1, 2, 8]);
    for dir in ["LEFT", "RIGHT"] {
        let op = build(
            "BitShift",
            11,
            &[("direction", AttrValue::String(dir.into()))],
        )
        .unwrap();
        gpu_matches_cpu(&*op, &[Some(&a), Some(&s)], 0.0);
    }
    let p = Tensor::from_bools(vec![2, 3], vec![true, true, false, false, true, false]);
    let q = Tensor::from_bools(vec![3], vec![true, false, true]);
    for name in ["And", "Or", "Xor", "Equal"] {
        gpu_matches_cpu(&*build(name, 7, &[]).unwrap(), &[Some(&p), Some(&q)], 0.0);
    }
}

#[test]
fn gpu_variadic_chains() {
    let mut rng = Rng::new(4);
    for d in [DType::F32, DType::F16, DType::F64, DType::I64, DType::U8] {
        let (a, b, c) = (
            operand(&mut rng, &[2, 1, 3], d),
            operand(&mut rng, &[4, 1], d),
            operand(&mut rng, &[3], d),
        );
        let mut names = vec!["Max", "Min"];
        if d.is_float() {
            names.extend(["Sum", "Mean"]);
        }
        for name in names {
            let op = build(name, 13, &[]).unwrap();
            gpu_matches_cpu(&*op, &[Some(&a), Some(&b), Some(&c)], tol(d));
            gpu_matches_cpu(&*op, &[Some(&a), Some(&b)], tol(d));
            gpu_matches_cpu(&*op, &[Some(&a)], tol(d));
        }
    }
}

#[test]
fn gpu_clip_variants() {
    let vals: Vec<f64> = (0..40).map(|i| i as f64 * 7.3 - 140.0).collect();
    for d in [
        DType::F32,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::I8,
        DType::U8,
    ] {
        let x = as_type(&vals, &[40], d);
        let lo = as_type(&[-20.0], &[], d);
        let hi = as_type(&[60.0], &[], d);
        let op = build("Clip", 13, &[]).unwrap();
        for ins in [
            [Some(&x), Some(&lo), Some(&hi)],
            [Some(&x), Some(&lo), None],
            [Some(&x), None, Some(&hi)],
            [Some(&x), None, None],
        ] {
            gpu_matches_cpu(&*op, &ins, tol(d));
        }
        if d.is_float() {
            let attrs = [
                ("min", AttrValue::Float(-3.5)),
                ("max", AttrValue::Float(12.0)),
            ];
            gpu_matches_cpu(&*build("Clip", 6, &attrs).unwrap(), &[Some(&x)], tol(d));
        }
    }
}

#[test]
fn gpu_where_every_width() {
    let mut rng = Rng::new(12);
    let c = Tensor::from_bools(vec![2, 1, 4], (0..8).map(|_| rng.unit() > 0.0).collect());
    for d in [
        DType::Bool,
        DType::U8,
        DType::F16,
        DType::F32,
        DType::I32,
        DType::I64,
    ] {
        let x = as_type(
            &rng.f64s(12).iter().map(|v| v * 9.0).collect::<Vec<_>>(),
            &[3, 4],
            d,
        );
        let y = as_type(&[-7.0], &[], d);
        let op = build("Where", 16, &[]).unwrap();
        gpu_matches_cpu(&*op, &[Some(&c), Some(&x), Some(&y)], 0.0);
        gpu_matches_cpu(&*op, &[Some(&c), Some(&y), Some(&x)], 0.0);
    }
}

#[test]
fn gpu_cast_every_pair() {
    let vals = [
        -300.7,
        -128.5,
        -1.5,
        -0.4,
        0.0,
        0.6,
        1.0,
        127.9,
        255.5,
        70000.0,
        3e9,
        f64::NAN,
        f64::INFINITY,
        -2.5e10,
    ];
    let types = [
        DType::F32,
        DType::F16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];
    for from in types {
        let x = as_type(&vals, &[vals.len()], from);
        for to in types {
            let op = build("Cast", 19, &[("to", AttrValue::Int(to.onnx_code() as i64))]).unwrap();
            // Integer -> f16 may round twice on the GPU (through f32): within one f16 step.
            let t = if to == DType::F16 { 1e-3 } else { 0.0 };
            gpu_matches_cpu(&*op, &[Some(&x)], t);
        }
    }
    let h = Tensor::from_vec(vec![2], vec![f16::from_f32(2.5), f16::MAX]);
    let like = Tensor::from_vec(vec![1], vec![0i32]);
    gpu_matches_cpu(
        &*build("CastLike", 19, &[]).unwrap(),
        &[Some(&h), Some(&like)],
        0.0,
    );
}
