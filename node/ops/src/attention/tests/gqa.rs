//! GroupQueryAttention on the CPU against the f64 reference: prompts (with right padding),
//! decoding with a separate past and with the shared maximum-length buffer, rotary
//! embedding, local windows, softcap, packed QKV.

use super::reference::{A4, GqaCase, gqa};
use super::{check, held, i32s_tensor, random, tensor};
use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, node_in, run};
use crate::{AttrValue, MS_DOMAIN};

#[derive(Clone)]
pub struct Cfg {
    pub dtype: DType,
    pub b: usize,
    pub s: usize,
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    /// The past's length (none: a first prompt without past).
    pub past: Option<usize>,
    pub total: usize,
    pub seqlens: Vec<i64>,
    pub packed: bool,
    /// (half of the rotated dims, interleaved).
    pub rotary: Option<(usize, bool)>,
    pub window: Option<usize>,
    pub softcap: f32,
    pub scale: f32,
}

impl Cfg {
    pub fn new(
        b: usize,
        s: usize,
        hq: usize,
        hkv: usize,
        d: usize,
        total: usize,
        seqlens: &[i64],
    ) -> Cfg {
        Cfg {
            dtype: DType::F32,
            b,
            s,
            hq,
            hkv,
            d,
            past: None,
            total,
            seqlens: seqlens.to_vec(),
            packed: false,
            rotary: None,
            window: None,
            softcap: 0.0,
            scale: 0.0,
        }
    }
}

pub fn case(c: &Cfg, seed: u64) -> super::Case {
    let mut rng = Rng::new(seed);
    let dt = c.dtype;
    let (b, s, hq, hkv, d) = (c.b, c.s, c.hq, c.hkv, c.d);
    let q = random(&mut rng, dt, b * s * hq * d);
    let k = random(&mut rng, dt, b * s * hkv * d);
    let v = random(&mut rng, dt, b * s * hkv * d);
    let past = c.past.map(|p| {
        let mut a = || A4 {
            shape: [b, hkv, p, d],
            v: random(&mut rng, dt, b * hkv * p * d),
        };
        (a(), a())
    });
    let positions = c.total.max(c.past.unwrap_or(0)) + 3;
    let rotary = c.rotary.map(|(half, il)| {
        let angles: Vec<f64> = (0..positions * half).map(|_| 3.0 * rng.unit()).collect();
        let cos = held(dt, angles.iter().map(|a| a.cos()).collect());
        let sin = held(dt, angles.iter().map(|a| a.sin()).collect());
        (cos, sin, half, il)
    });
    let rc = GqaCase {
        b,
        s,
        hq,
        hkv,
        d,
        q: q.clone(),
        k: k.clone(),
        v: v.clone(),
        past: past.clone(),
        seqlens: c.seqlens.clone(),
        total: c.total,
        rotary: rotary.clone(),
        window: c.window,
        softcap: f64::from(c.softcap),
        scale: f64::from(c.scale),
    };
    let (y, pk, pv) = gqa(&rc);

    let mut inputs: Vec<Option<Tensor>> = if c.packed {
        let w = (hq + 2 * hkv) * d;
        let mut qkv = Vec::with_capacity(b * s * w);
        for r in 0..b * s {
            qkv.extend_from_slice(&q[r * hq * d..][..hq * d]);
            qkv.extend_from_slice(&k[r * hkv * d..][..hkv * d]);
            qkv.extend_from_slice(&v[r * hkv * d..][..hkv * d]);
        }
        vec![Some(tensor(dt, &[b, s, w], &qkv)), None, None]
    } else {
        vec![
            Some(tensor(dt, &[b, s, hq * d], &q)),
            Some(tensor(dt, &[b, s, hkv * d], &k)),
            Some(tensor(dt, &[b, s, hkv * d], &v)),
        ]
    };
    inputs.push(past.as_ref().map(|p| tensor(dt, &p.0.shape, &p.0.v)));
    inputs.push(past.as_ref().map(|p| tensor(dt, &p.1.shape, &p.1.v)));
    inputs.push(Some(i32s_tensor(&[b], &c.seqlens)));
    inputs.push(Some(Tensor::from_vec(vec![], vec![c.total as i32])));
    if let Some((cos, sin, half, _)) = &rotary {
        inputs.push(Some(tensor(dt, &[positions, *half], cos)));
        inputs.push(Some(tensor(dt, &[positions, *half], sin)));
    }
    let mut attrs = vec![
        ("num_heads", AttrValue::Int(hq as i64)),
        ("kv_num_heads", AttrValue::Int(hkv as i64)),
    ];
    if let Some((_, il)) = c.rotary {
        attrs.push(("do_rotary", AttrValue::Int(1)));
        attrs.push(("rotary_interleaved", AttrValue::Int(il as i64)));
    }
    if let Some(w) = c.window {
        attrs.push(("local_window_size", AttrValue::Int(w as i64)));
    }
    if c.softcap > 0.0 {
        attrs.push(("softcap", AttrValue::Float(c.softcap)));
    }
    if c.scale != 0.0 {
        attrs.push(("scale", AttrValue::Float(c.scale)));
    }
    let op = node_in(
        MS_DOMAIN,
        "GroupQueryAttention",
        1,
        attrs,
        (inputs.len(), 3),
    )
    .expect("the node builds");
    (op, inputs, vec![y, pk.v, pv.v])
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
fn prompt_without_past() {
    check_case(&Cfg::new(2, 5, 4, 2, 8, 5, &[4, 4]), 1);
    // Right padding: batch entry 1 has 3 valid tokens; its later rows see those 3 keys.
    check_case(&Cfg::new(2, 5, 4, 2, 8, 5, &[4, 2]), 2);
    check_case(
        &Cfg {
            packed: true,
            ..Cfg::new(2, 4, 6, 2, 8, 4, &[3, 3])
        },
        3,
    );
}

#[test]
fn prompt_with_rotary() {
    check_case(
        &Cfg {
            rotary: Some((4, false)),
            ..Cfg::new(2, 5, 4, 2, 8, 5, &[4, 4])
        },
        4,
    );
    check_case(
        &Cfg {
            rotary: Some((4, true)),
            ..Cfg::new(1, 5, 4, 2, 8, 5, &[4])
        },
        5,
    );
    // Rotary over part of the head.
    check_case(
        &Cfg {
            rotary: Some((2, false)),
            packed: true,
            ..Cfg::new(1, 3, 2, 1, 16, 3, &[2])
        },
        6,
    );
}

#[test]
fn decode_with_a_separate_past() {
    // past 6 + 1 new: total 7; the present is the concatenation.
    let c = Cfg {
        past: Some(6),
        rotary: Some((4, false)),
        ..Cfg::new(2, 1, 4, 2, 8, 7, &[6, 6])
    };
    check_case(&c, 7);
    // Ragged batch: entry 1 has 3 keys before this token, the rest of its present is zero.
    check_case(
        &Cfg {
            seqlens: vec![6, 3],
            ..c.clone()
        },
        8,
    );
    check_case(
        &Cfg {
            packed: true,
            scale: 0.3,
            ..c
        },
        9,
    );
}

#[test]
fn decode_with_the_shared_buffer() {
    // past_key holds the maximum length 10 (the buffer GenAI shares with present_key).
    let c = Cfg {
        past: Some(10),
        rotary: Some((4, true)),
        ..Cfg::new(3, 1, 4, 2, 8, 8, &[7, 2, 0])
    };
    check_case(&c, 10);
    check_case(
        &Cfg {
            window: Some(3),
            softcap: 2.0,
            ..c
        },
        11,
    );
}

#[test]
fn later_prompt_chunk_with_past() {
    check_case(
        &Cfg {
            past: Some(4),
            rotary: Some((4, false)),
            ..Cfg::new(1, 3, 4, 2, 8, 7, &[6])
        },
        12,
    );
    check_case(
        &Cfg {
            past: Some(10),
            ..Cfg::new(1, 3, 4, 2, 8, 7, &[6])
        },
        13,
    );
}

#[test]
fn local_window() {
    check_case(
        &Cfg {
            window: Some(2),
            ..Cfg::new(1, 7, 2, 1, 8, 7, &[6])
        },
        14,
    );
    // Padded rows past the window see nothing: zero.
    check_case(
        &Cfg {
            window: Some(2),
            rotary: Some((4, true)),
            ..Cfg::new(2, 7, 4, 2, 8, 7, &[6, 3])
        },
        15,
    );
}

#[test]
fn half_precision() {
    let c = Cfg {
        dtype: DType::F16,
        past: Some(6),
        rotary: Some((4, false)),
        ..Cfg::new(2, 1, 4, 2, 8, 7, &[6, 4])
    };
    check_case(&c, 16);
}

#[test]
fn seqlens_out_of_range_are_refused() {
    let (op, mut inputs, _) = case(
        &Cfg {
            past: Some(6),
            ..Cfg::new(1, 1, 2, 1, 8, 7, &[6])
        },
        17,
    );
    inputs[5] = Some(i32s_tensor(&[1], &[9]));
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let err = run(&*op, &ins).unwrap_err();
    assert!(err.to_string().contains("outside"), "{err}");
}
