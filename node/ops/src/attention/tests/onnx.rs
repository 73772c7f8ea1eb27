//! ONNX Attention on the CPU against the f64 reference, over the spec's features.

use super::reference::{A4, Keep, OnnxCase, merge_heads, onnx};
use super::{check, held, i64s_tensor, random, tensor};
use crate::AttrValue;
use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, node_in, run};

/// One configuration of ONNX Attention.
#[derive(Clone)]
pub struct Cfg {
    pub dtype: DType,
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub s: usize,
    pub l: usize,
    pub d: usize,
    pub dv: usize,
    pub past: usize,
    pub three_d: bool,
    pub causal: bool,
    /// Mask shape and whether it is bool.
    pub mask: Option<(Vec<usize>, bool)>,
    pub nonpad: Option<Vec<i64>>,
    pub scale: Option<f32>,
    pub softcap: f32,
    /// qk_matmul_output_mode, when that output is wanted.
    pub qk: Option<i64>,
}

impl Cfg {
    pub fn new(b: usize, hq: usize, hkv: usize, s: usize, l: usize, d: usize) -> Cfg {
        Cfg {
            dtype: DType::F32,
            b,
            hq,
            hkv,
            s,
            l,
            d,
            dv: d,
            past: 0,
            three_d: false,
            causal: false,
            mask: None,
            nonpad: None,
            scale: None,
            softcap: 0.0,
            qk: None,
        }
    }
}

/// The op, its inputs and the reference's outputs (y, present key, present value, qk) in
/// the op's output layouts.
pub fn case(c: &Cfg, seed: u64) -> super::Case {
    let mut rng = Rng::new(seed);
    let dt = c.dtype;
    let mut a4 = |shape: [usize; 4]| A4 {
        shape,
        v: random(&mut rng, dt, shape.iter().product()),
    };
    let q = a4([c.b, c.hq, c.s, c.d]);
    let k = a4([c.b, c.hkv, c.l, c.d]);
    let v = a4([c.b, c.hkv, c.l, c.dv]);
    let past = (c.past > 0).then(|| {
        (
            a4([c.b, c.hkv, c.past, c.d]),
            a4([c.b, c.hkv, c.past, c.dv]),
        )
    });
    let mask = c.mask.as_ref().map(|(shape, is_bool)| {
        let n: usize = shape.iter().product();
        let vals: Vec<f64> = if *is_bool {
            (0..n)
                .map(|_| f64::from(!rng.next_u64().is_multiple_of(4)))
                .collect()
        } else {
            held(dt, rng.f64s(n).iter().map(|x| 2.0 * x).collect())
        };
        (shape.clone(), vals, *is_bool)
    });
    let keep = match c.qk {
        None | Some(0) => Keep::Raw,
        Some(1) => Keep::Capped,
        Some(2) => Keep::Biased,
        _ => Keep::Probs,
    };
    let rc = OnnxCase {
        q: q.clone(),
        k: k.clone(),
        v: v.clone(),
        mask: mask.clone(),
        past: past.clone(),
        nonpad: c.nonpad.clone(),
        causal: c.causal,
        scale: c.scale.map(f64::from),
        softcap: f64::from(c.softcap),
        keep,
    };
    let (y, pk, pv, qk) = onnx(&rc);
    let y = if c.three_d { merge_heads(&y) } else { y.v };

    let t4 = |a: &A4| {
        let [b, h, s, d] = a.shape;
        if c.three_d {
            tensor(dt, &[b, s, h * d], &merge_heads(a))
        } else {
            tensor(dt, &a.shape, &a.v)
        }
    };
    let mut inputs = vec![Some(t4(&q)), Some(t4(&k)), Some(t4(&v))];
    inputs.push(mask.map(|(shape, vals, is_bool)| {
        if is_bool {
            Tensor::from_bools(shape, vals.iter().map(|&x| x != 0.0).collect())
        } else {
            tensor(dt, &shape, &vals)
        }
    }));
    inputs.push(past.as_ref().map(|p| tensor(dt, &p.0.shape, &p.0.v)));
    inputs.push(past.as_ref().map(|p| tensor(dt, &p.1.shape, &p.1.v)));
    let opset = if c.nonpad.is_some() { 24 } else { 23 };
    if let Some(n) = &c.nonpad {
        inputs.push(Some(i64s_tensor(n)));
    }
    while inputs.last().is_some_and(Option::is_none) {
        inputs.pop();
    }
    let mut attrs = vec![("is_causal", AttrValue::Int(c.causal as i64))];
    if c.three_d {
        attrs.push(("q_num_heads", AttrValue::Int(c.hq as i64)));
        attrs.push(("kv_num_heads", AttrValue::Int(c.hkv as i64)));
    }
    if let Some(s) = c.scale {
        attrs.push(("scale", AttrValue::Float(s)));
    }
    if c.softcap > 0.0 {
        attrs.push(("softcap", AttrValue::Float(c.softcap)));
    }
    let mut outs = if c.past > 0 { 3 } else { 1 };
    if let Some(m) = c.qk {
        attrs.push(("qk_matmul_output_mode", AttrValue::Int(m)));
        outs = 4;
    }
    let op = node_in("", "Attention", opset, attrs, (inputs.len(), outs)).expect("the node builds");
    let want = [y, pk.v, pv.v, qk.v];
    (op, inputs, want[..outs].to_vec())
}

pub fn check_case(c: &Cfg, seed: u64) {
    let (op, inputs, want) = case(c, seed);
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let got = run(&*op, &ins).expect("the CPU kernel runs");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        check(g, w, c.dtype, &format!("output {i}"));
    }
}

#[test]
fn plain_4d_and_3d() {
    check_case(&Cfg::new(2, 3, 3, 4, 6, 8), 1);
    check_case(
        &Cfg {
            three_d: true,
            ..Cfg::new(2, 3, 3, 4, 6, 8)
        },
        2,
    );
    // A value head size of its own.
    check_case(
        &Cfg {
            dv: 5,
            ..Cfg::new(1, 2, 2, 3, 7, 4)
        },
        3,
    );
    check_case(
        &Cfg {
            dv: 5,
            three_d: true,
            ..Cfg::new(1, 2, 2, 3, 7, 4)
        },
        4,
    );
}

#[test]
fn grouped_and_multi_query() {
    check_case(&Cfg::new(2, 6, 2, 3, 5, 8), 5);
    check_case(
        &Cfg {
            three_d: true,
            ..Cfg::new(1, 4, 1, 3, 5, 8)
        },
        6,
    );
}

#[test]
fn scale_and_softcap() {
    check_case(
        &Cfg {
            scale: Some(0.3),
            ..Cfg::new(1, 2, 2, 3, 4, 8)
        },
        7,
    );
    check_case(
        &Cfg {
            softcap: 0.7,
            ..Cfg::new(1, 2, 1, 3, 4, 8)
        },
        8,
    );
}

#[test]
fn causal_with_and_without_past() {
    // Without past: row i sees keys 0..=i (upper-left alignment).
    check_case(
        &Cfg {
            causal: true,
            ..Cfg::new(2, 2, 2, 5, 5, 8)
        },
        9,
    );
    // More keys than queries, no past: still upper left.
    check_case(
        &Cfg {
            causal: true,
            ..Cfg::new(1, 2, 2, 3, 6, 8)
        },
        10,
    );
    // With past: the query rows sit at the end of the keys.
    check_case(
        &Cfg {
            causal: true,
            past: 4,
            ..Cfg::new(2, 4, 2, 3, 3, 8)
        },
        11,
    );
    check_case(
        &Cfg {
            causal: true,
            past: 7,
            three_d: true,
            dv: 6,
            ..Cfg::new(1, 2, 1, 1, 1, 8)
        },
        12,
    );
}

#[test]
fn masks_float_bool_broadcast_and_short() {
    let m = |shape: &[usize], b| Some((shape.to_vec(), b));
    check_case(
        &Cfg {
            mask: m(&[3, 5], false),
            ..Cfg::new(2, 2, 2, 3, 5, 4)
        },
        13,
    );
    check_case(
        &Cfg {
            mask: m(&[2, 1, 3, 5], true),
            ..Cfg::new(2, 2, 2, 3, 5, 4)
        },
        14,
    );
    check_case(
        &Cfg {
            mask: m(&[2, 2, 3, 5], false),
            causal: true,
            ..Cfg::new(2, 2, 2, 3, 5, 4)
        },
        15,
    );
    check_case(
        &Cfg {
            mask: m(&[1, 5], true),
            ..Cfg::new(1, 2, 2, 3, 5, 4)
        },
        16,
    );
    // A mask shorter than the keys: the rest is masked.
    check_case(
        &Cfg {
            mask: m(&[2, 2, 3, 3], false),
            ..Cfg::new(2, 2, 2, 3, 6, 4)
        },
        17,
    );
    check_case(
        &Cfg {
            mask: m(&[3, 4], true),
            past: 2,
            ..Cfg::new(1, 2, 2, 3, 3, 4)
        },
        18,
    );
}

#[test]
fn nonpad_kv_seqlen_with_and_without_causal() {
    check_case(
        &Cfg {
            nonpad: Some(vec![3, 6]),
            ..Cfg::new(2, 2, 1, 2, 6, 4)
        },
        19,
    );
    // Causal with lengths: row s sits at position n - S + s.
    check_case(
        &Cfg {
            nonpad: Some(vec![4, 2]),
            causal: true,
            ..Cfg::new(2, 2, 2, 2, 6, 4)
        },
        20,
    );
    // A length shorter than the queries leaves rows with no key: zero.
    check_case(
        &Cfg {
            nonpad: Some(vec![1]),
            causal: true,
            ..Cfg::new(1, 1, 1, 3, 4, 4)
        },
        21,
    );
}

#[test]
fn fully_masked_rows_are_zero() {
    let (op, mut inputs, _) = case(
        &Cfg {
            mask: Some((vec![2, 3], true)),
            ..Cfg::new(1, 1, 1, 2, 3, 4)
        },
        22,
    );
    inputs[3] = Some(Tensor::from_bools(
        vec![2, 3],
        vec![false, false, false, true, false, true],
    ));
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let y = run(&*op, &ins).unwrap();
    let y = crate::testkit::f64s(&y[0]);
    assert!(y[..4].iter().all(|&x| x == 0.0), "{y:?}");
    assert!(y[4..].iter().any(|&x| x != 0.0));
}

#[test]
fn qk_output_modes() {
    let m = Some((vec![3, 7], false));
    for mode in 0..4 {
        check_case(
            &Cfg {
                qk: Some(mode),
                mask: m.clone(),
                softcap: 1.5,
                past: 3,
                causal: true,
                ..Cfg::new(1, 2, 2, 3, 4, 4)
            },
            30 + mode as u64,
        );
    }
}

#[test]
fn half_precision() {
    check_case(
        &Cfg {
            dtype: DType::F16,
            causal: true,
            past: 3,
            ..Cfg::new(1, 4, 2, 3, 3, 8)
        },
        40,
    );
    check_case(
        &Cfg {
            dtype: DType::F16,
            mask: Some((vec![3, 5], false)),
            ..Cfg::new(1, 2, 2, 3, 5, 8)
        },
        41,
    );
}
