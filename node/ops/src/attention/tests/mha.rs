//! MultiHeadAttention on the CPU against the f64 reference; its packed and BNSH input forms
//! against the same attention given as plain 3-D inputs.

use super::reference::{A4, MhaCase, mha, split_heads};
use super::{check, i32s_tensor, random, tensor};
use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, f64s, node_in, run};
use crate::{AttrValue, MS_DOMAIN};

#[derive(Clone, Default)]
pub struct Cfg {
    pub b: usize,
    pub s: usize,
    pub l: usize,
    pub n: usize,
    pub d: usize,
    pub dv: usize,
    pub bias: bool,
    pub past: usize,
    pub lens: Option<Vec<i64>>,
    /// A 0/1 key padding mask of rank 2 or 3.
    pub keep: Option<usize>,
    pub attn_bias: Option<[usize; 4]>,
    pub causal: bool,
    pub filter: Option<f32>,
    pub scale: f32,
    pub qk: bool,
    pub f16: bool,
}

pub fn cfg(b: usize, s: usize, l: usize, n: usize, d: usize) -> Cfg {
    Cfg {
        b,
        s,
        l,
        n,
        d,
        dv: d,
        ..Cfg::default()
    }
}

pub fn case(c: &Cfg, seed: u64) -> super::Case {
    let mut rng = Rng::new(seed);
    let dt = if c.f16 { DType::F16 } else { DType::F32 };
    let (b, s, l, n, d, dv) = (c.b, c.s, c.l, c.n, c.d, c.dv);
    let t = c.past + l;
    let q = random(&mut rng, dt, b * s * n * d);
    let k = random(&mut rng, dt, b * l * n * d);
    let v = random(&mut rng, dt, b * l * n * dv);
    let bias = c.bias.then(|| random(&mut rng, dt, 2 * n * d + n * dv));
    let past = (c.past > 0).then(|| {
        let mut a = |dim| A4 {
            shape: [b, n, c.past, dim],
            v: random(&mut rng, dt, b * n * c.past * dim),
        };
        (a(d), a(dv))
    });
    let keep = c.keep.map(|rank| {
        let shape = if rank == 2 { vec![b, t] } else { vec![b, s, t] };
        let n: usize = shape.iter().product();
        (
            shape,
            (0..n)
                .map(|_| f64::from(!rng.next_u64().is_multiple_of(3)))
                .collect::<Vec<f64>>(),
        )
    });
    let attn_bias = c
        .attn_bias
        .map(|sh| (sh, random(&mut rng, dt, sh.iter().product())));
    let filter = c.filter.unwrap_or(-10000.0);
    let rc = MhaCase {
        b,
        s,
        l,
        n,
        d,
        dv,
        q: q.clone(),
        k: k.clone(),
        v: v.clone(),
        bias: bias.clone(),
        past: past.clone(),
        lens: c.lens.clone(),
        keep: keep.clone(),
        attn_bias: attn_bias.clone(),
        causal: c.causal,
        filter: f64::from(filter),
        scale: f64::from(c.scale),
    };
    let (y, pk, pv, qk) = mha(&rc);
    let mut inputs = vec![
        Some(tensor(dt, &[b, s, n * d], &q)),
        Some(tensor(dt, &[b, l, n * d], &k)),
        Some(tensor(dt, &[b, l, n * dv], &v)),
        bias.as_ref().map(|x| tensor(dt, &[x.len()], x)),
        match (&c.lens, &keep) {
            (Some(len), _) => Some(i32s_tensor(&[b], len)),
            (_, Some((shape, m))) => Some(i32s_tensor(
                shape,
                &m.iter().map(|&x| x as i64).collect::<Vec<_>>(),
            )),
            _ => None,
        },
        attn_bias.as_ref().map(|(sh, x)| tensor(dt, sh, x)),
        past.as_ref().map(|p| tensor(dt, &p.0.shape, &p.0.v)),
        past.as_ref().map(|p| tensor(dt, &p.1.shape, &p.1.v)),
    ];
    while inputs.last().is_some_and(Option::is_none) {
        inputs.pop();
    }
    let mut attrs = vec![("num_heads", AttrValue::Int(n as i64))];
    if c.causal {
        attrs.push(("unidirectional", AttrValue::Int(1)));
    }
    if let Some(f) = c.filter {
        attrs.push(("mask_filter_value", AttrValue::Float(f)));
    }
    if c.scale != 0.0 {
        attrs.push(("scale", AttrValue::Float(c.scale)));
    }
    let outs = if c.qk {
        4
    } else if c.past > 0 {
        3
    } else {
        1
    };
    let op = node_in(
        MS_DOMAIN,
        "MultiHeadAttention",
        1,
        attrs,
        (inputs.len(), outs),
    )
    .expect("the node builds");
    let want = [y, pk.v, pv.v, qk.v];
    (op, inputs, want[..outs].to_vec())
}

pub fn check_case(c: &Cfg, seed: u64) {
    let (op, inputs, want) = case(c, seed);
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let got = run(&*op, &ins).expect("the CPU kernel runs");
    let dt = if c.f16 { DType::F16 } else { DType::F32 };
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        check(g, w, dt, &format!("output {i}"));
    }
}

#[test]
fn plain_bias_and_scale() {
    check_case(&cfg(2, 3, 5, 2, 8), 1);
    check_case(
        &Cfg {
            dv: 6,
            bias: true,
            ..cfg(2, 3, 5, 2, 8)
        },
        2,
    );
    check_case(
        &Cfg {
            scale: 0.2,
            ..cfg(1, 2, 4, 3, 4)
        },
        3,
    );
}

#[test]
fn key_padding_masks_add_the_filter_value() {
    check_case(
        &Cfg {
            lens: Some(vec![3, 5]),
            ..cfg(2, 3, 5, 2, 8)
        },
        4,
    );
    check_case(
        &Cfg {
            keep: Some(2),
            filter: Some(-3.0),
            ..cfg(2, 3, 5, 2, 8)
        },
        5,
    );
    check_case(
        &Cfg {
            keep: Some(3),
            ..cfg(2, 3, 5, 2, 8)
        },
        6,
    );
    // Every key padded: the filter value cancels out of the softmax.
    check_case(
        &Cfg {
            lens: Some(vec![0, 2]),
            filter: Some(-3.0),
            ..cfg(2, 3, 5, 2, 8)
        },
        7,
    );
}

#[test]
fn attention_bias_and_past() {
    check_case(
        &Cfg {
            attn_bias: Some([1, 2, 3, 5]),
            ..cfg(2, 3, 5, 2, 8)
        },
        8,
    );
    check_case(
        &Cfg {
            attn_bias: Some([2, 1, 1, 7]),
            past: 6,
            bias: true,
            ..cfg(2, 1, 1, 2, 8)
        },
        9,
    );
    check_case(
        &Cfg {
            causal: true,
            past: 4,
            keep: Some(2),
            ..cfg(2, 3, 3, 2, 8)
        },
        10,
    );
}

#[test]
fn unidirectional_leaves_out_later_keys() {
    check_case(
        &Cfg {
            causal: true,
            ..cfg(2, 4, 4, 2, 8)
        },
        11,
    );
    // Key padding on top: the padded keys the row sees get the filter value.
    check_case(
        &Cfg {
            causal: true,
            keep: Some(2),
            ..cfg(2, 4, 4, 2, 8)
        },
        12,
    );
}

#[test]
fn qk_output_is_the_biased_scores() {
    check_case(
        &Cfg {
            qk: true,
            attn_bias: Some([1, 2, 3, 5]),
            lens: Some(vec![4, 2]),
            ..cfg(2, 3, 5, 2, 8)
        },
        13,
    );
}

#[test]
fn half_precision() {
    check_case(
        &Cfg {
            f16: true,
            bias: true,
            past: 3,
            ..cfg(1, 2, 2, 2, 8)
        },
        14,
    );
}

/// The packed and BNSH forms compute what the plain 3-D form of the same values does.
#[test]
fn packed_and_bnsh_forms_match_plain_ones() {
    let (b, s, n, h) = (2, 3, 2, 4);
    let mut rng = Rng::new(15);
    let q = rng.f64s(b * s * n * h);
    let k = rng.f64s(b * s * n * h);
    let v = rng.f64s(b * s * n * h);
    let f = |shape: &[usize], x: &[f64]| tensor(DType::F32, shape, x);
    let op = |outs| {
        node_in(
            MS_DOMAIN,
            "MultiHeadAttention",
            1,
            vec![("num_heads", AttrValue::Int(n as i64))],
            (3, outs),
        )
        .unwrap()
    };
    let plain = run(
        &*op(1),
        &[
            Some(&f(&[b, s, n * h], &q)),
            Some(&f(&[b, s, n * h], &k)),
            Some(&f(&[b, s, n * h], &v)),
        ],
    )
    .unwrap();
    // [B, S, N, 3, H] and [B, S, N, 2, H].
    let mut qkv = vec![];
    let mut kv = vec![];
    for r in 0..b * s * n {
        for x in [&q, &k, &v] {
            qkv.extend_from_slice(&x[r * h..][..h]);
        }
        for x in [&k, &v] {
            kv.extend_from_slice(&x[r * h..][..h]);
        }
    }
    let packed = run(&*op(1), &[Some(&f(&[b, s, n, 3, h], &qkv))]).unwrap();
    assert_eq!(f64s(&packed[0]), f64s(&plain[0]));
    let packed_kv = run(
        &*op(1),
        &[
            Some(&f(&[b, s, n * h], &q)),
            Some(&f(&[b, s, n, 2, h], &kv)),
        ],
    )
    .unwrap();
    assert_eq!(f64s(&packed_kv[0]), f64s(&plain[0]));
    let bnsh = |x: &[f64]| split_heads(x, b, s, n, h).v;
    let cached = run(
        &*op(1),
        &[
            Some(&f(&[b, s, n * h], &q)),
            Some(&f(&[b, n, s, h], &bnsh(&k))),
            Some(&f(&[b, n, s, h], &bnsh(&v))),
        ],
    )
    .unwrap();
    assert_eq!(f64s(&cached[0]), f64s(&plain[0]));
}
