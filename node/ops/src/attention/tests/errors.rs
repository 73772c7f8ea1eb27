//! What the ops refuse, and how they say it.

use crate::tensor::{DType, Tensor};
use crate::testkit::{assert_err, infer_partly, node_in};
use crate::{AttrValue, MS_DOMAIN, ValueType};

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(DType::F32, shape.to_vec())
}

#[test]
fn gqa_refuses_what_it_does_not_implement() {
    let heads = || {
        vec![
            ("num_heads", AttrValue::Int(2)),
            ("kv_num_heads", AttrValue::Int(1)),
        ]
    };
    let mut attrs = heads();
    attrs.push(("smooth_softmax", AttrValue::Int(1)));
    assert_err(
        node_in(MS_DOMAIN, "GroupQueryAttention", 1, attrs, (7, 3)),
        true,
        "smooth_softmax",
    );
    let mut attrs = heads();
    attrs.push(("k_quant_type", AttrValue::String("PER_TENSOR".into())));
    assert_err(
        node_in(MS_DOMAIN, "GroupQueryAttention", 1, attrs, (7, 3)),
        true,
        "quantized",
    );
    let op = node_in(MS_DOMAIN, "GroupQueryAttention", 1, heads(), (11, 3)).unwrap();
    let (q, k) = (zeros(&[1, 2, 16]), zeros(&[1, 2, 8]));
    let lens = Tensor::from_vec(vec![1], vec![1i32]);
    let total = Tensor::from_vec(vec![], vec![2i32]);
    let bias = zeros(&[1, 1, 2, 2]);
    let ins = [
        Some(&q),
        Some(&k),
        Some(&k),
        None,
        None,
        Some(&lens),
        Some(&total),
        None,
        None,
        None,
        Some(&bias),
    ];
    assert_err(infer_partly(&*op, &ins, &[6]), true, "attention_bias");
    // total_sequence_length sizes the present: needed while planning.
    let ins = &ins[..7];
    assert!(matches!(
        infer_partly(&*op, ins, &[]),
        Err(crate::OpError::NeedsValue(6))
    ));
    let out = infer_partly(&*op, ins, &[6]).unwrap();
    assert_eq!(out[1], ValueType::new(DType::F32, vec![1, 1, 2, 8]));
    // Its cost still counts while the total is unknown: y's 32 values over 2 keys.
    let types: Vec<Option<ValueType>> = ins.iter().map(|t| t.map(ValueType::of)).collect();
    let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
    assert_eq!(op.flops(&refs, &out), 4 * 32 * 2);
}

#[test]
fn mha_refuses_beam_search_and_odd_masks() {
    let op = node_in(
        MS_DOMAIN,
        "MultiHeadAttention",
        1,
        vec![("num_heads", AttrValue::Int(2))],
        (10, 1),
    )
    .unwrap();
    let x = zeros(&[1, 2, 8]);
    let ci = Tensor::from_vec(vec![1, 1, 2], vec![0i32, 0]);
    let ins = [
        Some(&x),
        Some(&x),
        Some(&x),
        None,
        None,
        None,
        None,
        None,
        None,
        Some(&ci),
    ];
    assert_err(infer_partly(&*op, &ins, &[]), true, "cache_indirection");
    let m = Tensor::from_vec(vec![5], vec![0i32; 5]);
    assert_err(
        infer_partly(&*op, &[Some(&x), Some(&x), Some(&x), None, Some(&m)], &[]),
        true,
        "key_padding_mask",
    );
}

#[test]
fn onnx_attention_checks_shapes() {
    let op = node_in("", "Attention", 23, vec![], (3, 1)).unwrap();
    let (q, k) = (zeros(&[1, 4, 3, 8]), zeros(&[1, 3, 5, 8]));
    assert_err(
        infer_partly(&*op, &[Some(&q), Some(&k), Some(&k)], &[]),
        false,
        "not a multiple",
    );
    let q3 = zeros(&[1, 3, 32]);
    assert_err(
        infer_partly(&*op, &[Some(&q3), Some(&q3), Some(&q3)], &[]),
        false,
        "q_num_heads",
    );
    let mask = zeros(&[3, 9]);
    let k = zeros(&[1, 4, 5, 8]);
    assert_err(
        infer_partly(&*op, &[Some(&q), Some(&k), Some(&k), Some(&mask)], &[]),
        false,
        "broadcast",
    );
    let attrs = vec![("left_window_size", AttrValue::Int(4))];
    assert_err(node_in("", "Attention", 23, attrs, (3, 1)), true, "sliding");
}
