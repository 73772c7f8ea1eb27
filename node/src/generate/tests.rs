//! Role detection against hand-written declarations, and the sampler against hand-derived
//! distributions.

use super::io::{LlmIo, SharedCache};
use super::sample::{argmax, nucleus};
use crate::model::{Dim, ValueDef};
use crate::tensor::DType;

fn def(name: &str, dtype: DType, dims: &[Dim]) -> ValueDef {
    ValueDef {
        name: name.into(),
        dtype: Some(dtype),
        dims: Some(dims.to_vec()),
        kind: Default::default(),
    }
}

fn sym(s: &str) -> Dim {
    Dim::Sym(s.into())
}

fn optimum(layers: usize) -> (Vec<ValueDef>, Vec<ValueDef>) {
    let seq = [sym("batch"), sym("seq")];
    let mut ins = vec![
        def("input_ids", DType::I64, &seq),
        def("attention_mask", DType::I64, &seq),
        def("position_ids", DType::I64, &seq),
    ];
    let cache = |n: &str| {
        def(
            n,
            DType::F32,
            &[sym("batch"), Dim::Fixed(2), sym("past"), Dim::Fixed(16)],
        )
    };
    let mut outs = vec![def(
        "logits",
        DType::F32,
        &[sym("b"), sym("s"), Dim::Fixed(8)],
    )];
    // Declared value before key, layer 1 before 0: detection orders them.
    for l in (0..layers).rev() {
        for kind in ["value", "key"] {
            ins.push(cache(&format!("past_key_values.{l}.{kind}")));
            outs.push(cache(&format!("present.{l}.{kind}")));
        }
    }
    (ins, outs)
}

#[test]
fn optimum_names_pair_each_past_with_its_present_in_layer_order() {
    let (ins, outs) = optimum(2);
    let io = LlmIo::detect(&ins, &outs).unwrap();
    assert_eq!(io.input_ids, "input_ids");
    assert_eq!(
        io.attention_mask,
        Some(("attention_mask".into(), DType::I64))
    );
    assert_eq!(io.position_ids, Some(("position_ids".into(), DType::I64)));
    let pairs: Vec<(&str, &str)> = io
        .caches
        .iter()
        .map(|c| (c.past.as_str(), c.present.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("past_key_values.0.key", "present.0.key"),
            ("past_key_values.0.value", "present.0.value"),
            ("past_key_values.1.key", "present.1.key"),
            ("past_key_values.1.value", "present.1.value"),
        ]
    );
    assert!(io.caches.iter().all(|c| c.heads == 2 && c.head_size == 16));
}

#[test]
fn unknown_inputs_missing_presents_and_uneven_shared_buffers_are_named() {
    let (mut ins, outs) = optimum(1);
    ins.push(def("token_type_ids", DType::I64, &[sym("b"), sym("s")]));
    let e = LlmIo::detect(&ins, &outs).unwrap_err().to_string();
    assert!(e.contains("token_type_ids"), "{e}");

    let (ins, mut outs) = optimum(1);
    outs.retain(|o| o.name != "present.0.value");
    let e = LlmIo::detect(&ins, &outs).unwrap_err().to_string();
    assert!(
        e.contains("past_key_values.0.value") && e.contains("present"),
        "{e}"
    );

    // Caches of a fixed length are one buffer that past and present share: all one length.
    let fixed = |n: usize| {
        Some(vec![
            Dim::Fixed(1),
            Dim::Fixed(2),
            Dim::Fixed(n),
            Dim::Fixed(16),
        ])
    };
    let (mut ins, outs) = optimum(1);
    ins[3].dims = fixed(128);
    ins[4].dims = fixed(64);
    let e = LlmIo::detect(&ins, &outs).unwrap_err().to_string();
    assert!(e.contains("64 long where another is 128"), "{e}");
    ins[4].dims = fixed(128);
    let io = LlmIo::detect(&ins, &outs).unwrap();
    assert_eq!(io.shared_cache, SharedCache::Fixed(128));

    let (mut ins, outs) = optimum(1);
    ins[0].dtype = Some(DType::F32);
    let e = LlmIo::detect(&ins, &outs).unwrap_err().to_string();
    assert!(e.contains("int64 or int32"), "{e}");
}

#[test]
fn argmax_takes_the_first_of_equal_maxima_and_skips_nan() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[f32::NAN, 0.5, 0.25]), 1);
    assert_eq!(argmax(&[-1.0]), 0);
}

#[test]
fn nucleus_keeps_the_smallest_set_reaching_top_p() {
    // Temperature 1: probabilities proportional to e^logit. ln 4, ln 2, ln 1, ln 1 gives
    // 4/8, 2/8, 1/8, 1/8. top_p 0.7 keeps {0, 1} (0.75 >= 0.7), renormalised to 2/3, 1/3.
    let logits = [4f32.ln(), 2f32.ln(), 0.0, 0.0];
    assert_eq!(nucleus(&logits, 1.0, 0.7, 0.0), 0);
    assert_eq!(nucleus(&logits, 1.0, 0.7, 0.66), 0);
    assert_eq!(nucleus(&logits, 1.0, 0.7, 0.67), 1);
    assert_eq!(nucleus(&logits, 1.0, 0.7, 0.999), 1);
    // top_p 1 keeps all: u in [0.875, 1) lands on the last.
    assert_eq!(nucleus(&logits, 1.0, 1.0, 0.9), 3);
    assert_eq!(nucleus(&logits, 1.0, 1.0, 0.8), 2);
    // Temperature 0.5 squares the ratios: 16, 4, 1, 1 over 22.
    assert_eq!(nucleus(&logits, 0.5, 1.0, 15.9 / 22.0), 0);
    assert_eq!(nucleus(&logits, 0.5, 1.0, 16.1 / 22.0), 1);
}

#[test]
fn the_last_row_of_the_logits_comes_back_as_f32_from_each_float_type() {
    use crate::tensor::Tensor;
    // [1, 3, 4]: rows 0, 1, 2; the last is 2.5, -1, 0.125, 65504 (f16's largest).
    let values = [
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 2.5, -1.0, 0.125, 65504.0,
    ];
    let want = vec![2.5f32, -1.0, 0.125, 65504.0];
    let halves: Vec<half::f16> = values.iter().map(|&v| half::f16::from_f32(v)).collect();
    let f16 = Tensor::from_vec(vec![1, 3, 4], halves);
    assert_eq!(super::last_row(&f16, 3).unwrap(), want);
    let f32 = Tensor::from_vec(vec![1, 3, 4], values.to_vec());
    assert_eq!(super::last_row(&f32, 3).unwrap(), want);
    let f64s: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    assert_eq!(
        super::last_row(&Tensor::from_vec(vec![1, 3, 4], f64s), 3).unwrap(),
        want
    );
    // One row for one token is [1, vocab] too; a row count that is neither is refused.
    let refused = super::last_row(&f32, 1).unwrap_err().to_string();
    assert!(refused.contains("[1, 1, vocab]"), "{refused}");
}
