use super::*;
use crate::AttrValue;
use crate::testkit::{Rng, assert_close, f64s, gpu_matches_cpu, node};

fn linear_attention(rule: &str, q_heads: i64, kv_heads: i64, scale: f32) -> Box<dyn Op> {
    let attrs = vec![
        ("update_rule", AttrValue::String(rule.into())),
        ("q_num_heads", AttrValue::Int(q_heads)),
        ("kv_num_heads", AttrValue::Int(kv_heads)),
        ("scale", AttrValue::Float(scale)),
    ];
    node("LinearAttention", 26, attrs, 6, 2).unwrap()
}

fn t3(shape: [usize; 3], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Vec<Vec<f64>> {
    crate::testkit::run(op, inputs)
        .unwrap()
        .iter()
        .map(f64s)
        .collect()
}

#[test]
fn delta_rule_by_hand() {
    // d_k = d_v = 1, scale 1. Token 1: k 1, v 2, beta 0.5: S = 0 + 0.5 * 1 * (2 - 0) = 1, and
    // q 1 reads 1. Token 2: k 2, v 3: S^T k = 2, S = 1 + 0.5 * 2 * (3 - 2) = 2; q 3 reads 6.
    let q = t3([1, 2, 1], &[1.0, 3.0]);
    let k = t3([1, 2, 1], &[1.0, 2.0]);
    let v = t3([1, 2, 1], &[2.0, 3.0]);
    let beta = t3([1, 2, 1], &[0.5, 0.5]);
    let op = linear_attention("delta", 1, 1, 1.0);
    let out = run(
        &*op,
        &[Some(&q), Some(&k), Some(&v), None, None, Some(&beta)],
    );
    assert_close(&out[0], &[1.0, 6.0], 1e-9);
    assert_close(&out[1], &[2.0], 1e-9);
    // Gated delta with a past state of 4 and decay ln 0.5 on token 1: S decays to 2, reads
    // back 2 through k 1, so S = 2 + 0.5 * (2 - 2) = 2; token 2 (decay 0): S^T k = 4,
    // S = 2 + 0.5 * 2 * (3 - 4) = 1, read by q 3 as 3.
    let past = Tensor::from_vec(vec![1, 1, 1, 1], vec![4.0f32]);
    let decay = t3([1, 2, 1], &[0.5f32.ln(), 0.0]);
    let op = linear_attention("gated_delta", 1, 1, 1.0);
    let inputs = [
        Some(&q),
        Some(&k),
        Some(&v),
        Some(&past),
        Some(&decay),
        Some(&beta),
    ];
    let out = run(&*op, &inputs);
    assert_close(&out[0], &[2.0, 3.0], 1e-6);
    assert_close(&out[1], &[1.0], 1e-6);
}

/// The gated rule without the delta correction unrolls into attention without softmax:
/// o_t = scale * sum over s <= t of (q_t . k_s) * prod over r in (s, t] of exp(g_r) * v_s,
/// with a per-head decay and query heads sharing KV heads in groups.
#[test]
fn gated_rule_is_decayed_causal_attention() {
    let (b, t, hq, hkv, dk, dv) = (2, 5, 4, 2, 3, 2);
    let mut r = Rng::new(11);
    let q = r.tensor_f32(&[b, t, hq * dk]);
    let k = r.tensor_f32(&[b, t, hkv * dk]);
    let v = r.tensor_f32(&[b, t, hkv * dv]);
    let g = r.tensor_f32(&[b, t, hkv]);
    let op = linear_attention("gated", hq as i64, hkv as i64, 0.0);
    let out = run(&*op, &[Some(&q), Some(&k), Some(&v), None, Some(&g)]);
    let (qv, kv, vv, gv) = (f64s(&q), f64s(&k), f64s(&v), f64s(&g));
    let scale = 1.0 / (dk as f64).sqrt();
    let mut want = vec![0.0; b * t * hq * dv];
    for bi in 0..b {
        for qi in 0..hq {
            let h = qi / (hq / hkv);
            for ti in 0..t {
                for si in 0..=ti {
                    let dot: f64 = (0..dk)
                        .map(|d| {
                            qv[((bi * t + ti) * hq + qi) * dk + d]
                                * kv[((bi * t + si) * hkv + h) * dk + d]
                        })
                        .sum();
                    let decay: f64 = (si + 1..=ti).map(|u| gv[(bi * t + u) * hkv + h]).sum();
                    for m in 0..dv {
                        want[((bi * t + ti) * hq + qi) * dv + m] +=
                            scale * dot * decay.exp() * vv[((bi * t + si) * hkv + h) * dv + m];
                    }
                }
            }
        }
    }
    assert_close(&out[0], &want, 1e-5);
}

#[test]
fn refuses_inputs_the_rule_does_not_take() {
    let x = t3([1, 1, 2], &[0.0, 0.0]);
    let op = linear_attention("linear", 1, 1, 0.0);
    assert!(crate::testkit::run(&*op, &[Some(&x), Some(&x), Some(&x), None, Some(&x)]).is_err());
    let op = linear_attention("gated_delta", 1, 1, 0.0);
    assert!(crate::testkit::run(&*op, &[Some(&x), Some(&x), Some(&x)]).is_err());
    let attrs = vec![
        ("q_num_heads", AttrValue::Int(3)),
        ("kv_num_heads", AttrValue::Int(2)),
    ];
    assert!(node("LinearAttention", 26, attrs, 3, 2).is_err());
}

#[test]
fn gpu_matches_cpu_on_odd_shapes() {
    let mut r = Rng::new(5);
    let cases = [
        ("gated_delta", 2, 3, 6, 3, 3, 5, true, true),
        ("gated_delta", 1, 1, 3, 1, 4, 3, false, false),
        ("gated", 3, 2, 2, 2, 5, 1, true, false),
        ("delta", 1, 4, 2, 1, 2, 7, false, true),
        ("linear", 2, 1, 1, 1, 3, 2, false, false),
    ];
    for (rule, b, t, hq, hkv, dk, dv, per_key, per_head) in cases {
        let q = r.tensor_f32(&[b, t, hq * dk]);
        let k = r.tensor_f32(&[b, t, hkv * dk]);
        let v = r.tensor_f32(&[b, t, hkv * dv]);
        let past = r.tensor_f32(&[b, hkv, dk, dv]);
        let decay = r.tensor_f32(&[b, t, if per_key { hkv * dk } else { hkv }]);
        let beta = r.tensor_f32(&[b, t, if per_head { hkv } else { 1 }]);
        let gated = rule.starts_with("gated");
        let delta = rule.ends_with("delta");
        let op = linear_attention(rule, hq as i64, hkv as i64, 0.0);
        for with_past in [false, true] {
            let inputs = [
                Some(&q),
                Some(&k),
                Some(&v),
                with_past.then_some(&past),
                gated.then_some(&decay),
                delta.then_some(&beta),
            ];
            gpu_matches_cpu(&*op, &inputs, 1e-4);
        }
    }
}
