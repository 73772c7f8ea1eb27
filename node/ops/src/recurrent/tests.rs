//! A one-unit RNN and GRU by hand; the GPU against the CPU over every option (onnxruntime's
//! references are the fixtures op_rnn_*, op_gru_*, op_lstm_*; ONNX's node tests cover layout 1).

use super::*;
use crate::AttrValue;
use crate::testkit::gpu::run_op;
use crate::testkit::{Rng, gpu_matches_cpu, infer_known, node, run};

fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v)
}

#[test]
fn one_unit_by_hand() {
    // x = [1, 2] over two steps, W = 0.5, R = -1, B = (0.25, 0.25): h1 = tanh(0.5 + 0.5) and
    // h2 = tanh(1 - h1 + 0.5).
    let x = t(&[2, 1, 1], vec![1.0, 2.0]);
    let w = t(&[1, 1, 1], vec![0.5]);
    let r = t(&[1, 1, 1], vec![-1.0]);
    let b = t(&[1, 2], vec![0.25, 0.25]);
    let rnn = node("RNN", 14, vec![("hidden_size", AttrValue::Int(1))], 4, 2).unwrap();
    let y = run(&*rnn, &[Some(&x), Some(&w), Some(&r), Some(&b)]).unwrap();
    let h1 = 1.0f64.tanh();
    let h2 = (1.5 - h1).tanh();
    let got = y[0].to_f64_vec().unwrap();
    assert!(
        (got[0] - h1).abs() < 1e-6 && (got[1] - h2).abs() < 1e-6,
        "{got:?}"
    );
    assert!((y[1].to_f64_vec().unwrap()[0] - h2).abs() < 1e-6);

    // GRU, one step from h0 = 0.5, all weights 1, no bias: z = r = sigmoid(x + h0),
    // candidate tanh(x + r h0), h = (1 - z) candidate + z h0.
    let x = t(&[1, 1, 1], vec![0.3]);
    let ones = |n: usize| t(&[1, n, 1], vec![1.0; n]);
    let h0 = t(&[1, 1, 1], vec![0.5]);
    let gru = node("GRU", 14, vec![("hidden_size", AttrValue::Int(1))], 6, 1).unwrap();
    let y = run(
        &*gru,
        &[
            Some(&x),
            Some(&ones(3)),
            Some(&ones(3)),
            None,
            None,
            Some(&h0),
        ],
    )
    .unwrap();
    let s = 1.0 / (1.0 + (-0.8f64).exp());
    let cand = (0.3 + s * 0.5).tanh();
    let want = (1.0 - s) * cand + s * 0.5;
    assert!((y[0].to_f64_vec().unwrap()[0] - want).abs() < 1e-6);
}

struct Case {
    op: &'static str,
    direction: &'static str,
    layout: i64,
    lens: bool,
    initial: bool,
    peepholes: bool,
    attrs: Vec<(&'static str, AttrValue)>,
}

fn case(op: &'static str, direction: &'static str) -> Case {
    Case {
        op,
        direction,
        layout: 0,
        lens: false,
        initial: false,
        peepholes: false,
        attrs: vec![],
    }
}

fn run_case(c: &Case, seed: u64) {
    let (seq, batch, input, hidden) = (5, 3, 4, 6);
    let dirs = if c.direction == "bidirectional" { 2 } else { 1 };
    let gates = match c.op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let mut rng = Rng::new(seed);
    let mut tensor = |shape: &[usize], scale: f32| {
        let n = shape.iter().product();
        t(shape, rng.f32s(n).into_iter().map(|v| v * scale).collect())
    };
    let x_shape = if c.layout == 1 {
        [batch, seq, input]
    } else {
        [seq, batch, input]
    };
    let state = if c.layout == 1 {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    let x = tensor(&x_shape, 1.0);
    let w = tensor(&[dirs, gates * hidden, input], 0.5);
    let r = tensor(&[dirs, gates * hidden, hidden], 0.4);
    let b = tensor(&[dirs, 2 * gates * hidden], 0.3);
    let lens = Tensor::from_vec(vec![batch], vec![5i32, 2, 4]);
    let h0 = tensor(&state, 0.5);
    let c0 = tensor(&state, 0.5);
    let p = tensor(&[dirs, 3 * hidden], 0.3);
    let mut inputs = vec![Some(&x), Some(&w), Some(&r), Some(&b)];
    inputs.push(c.lens.then_some(&lens));
    inputs.push(c.initial.then_some(&h0));
    if c.op == "LSTM" {
        inputs.push(c.initial.then_some(&c0));
        inputs.push(c.peepholes.then_some(&p));
    }
    let mut attrs = c.attrs.clone();
    attrs.push(("hidden_size", AttrValue::Int(hidden as i64)));
    attrs.push(("direction", AttrValue::String(c.direction.into())));
    attrs.push(("layout", AttrValue::Int(c.layout)));
    for outputs in [1, if c.op == "LSTM" { 3 } else { 2 }] {
        let o = node(c.op, 14, attrs.clone(), inputs.len(), outputs).unwrap();
        gpu_matches_cpu(&*o, &inputs, 1e-4);
    }
}

#[test]
fn gpu_matches_the_cpu() {
    let strings = |v: &[&str]| AttrValue::Strings(v.iter().map(|s| s.to_string()).collect());
    let mut cases = Vec::new();
    for op in ["RNN", "GRU", "LSTM"] {
        for direction in ["forward", "reverse", "bidirectional"] {
            cases.push(case(op, direction));
            cases.push(Case {
                lens: true,
                initial: true,
                peepholes: true,
                ..case(op, direction)
            });
            cases.push(Case {
                layout: 1,
                lens: true,
                initial: true,
                ..case(op, direction)
            });
        }
    }
    cases.push(Case {
        attrs: vec![
            ("linear_before_reset", AttrValue::Int(1)),
            ("clip", AttrValue::Float(0.7)),
        ],
        lens: true,
        ..case("GRU", "bidirectional")
    });
    cases.push(Case {
        attrs: vec![
            ("input_forget", AttrValue::Int(1)),
            (
                "activations",
                strings(&[
                    "HardSigmoid",
                    "Softsign",
                    "ScaledTanh",
                    "Sigmoid",
                    "Elu",
                    "Softplus",
                ]),
            ),
            ("activation_alpha", AttrValue::Floats(vec![0.3, 0.9, 0.7])),
            ("activation_beta", AttrValue::Floats(vec![0.4, 1.1])),
        ],
        ..case("LSTM", "bidirectional")
    });
    cases.push(Case {
        attrs: vec![
            ("activations", strings(&["LeakyRelu", "ThresholdedRelu"])),
            ("activation_alpha", AttrValue::Floats(vec![0.2, 0.1])),
        ],
        ..case("RNN", "bidirectional")
    });
    cases.push(Case {
        attrs: vec![
            ("activations", strings(&["Relu", "Affine"])),
            ("activation_alpha", AttrValue::Floats(vec![0.5])),
            ("activation_beta", AttrValue::Floats(vec![0.1])),
        ],
        ..case("GRU", "forward")
    });
    for (i, c) in cases.iter().enumerate() {
        run_case(c, 100 + i as u64);
    }
}

#[test]
fn bad_inputs_name_the_problem() {
    let x = t(&[2, 1, 3], vec![0.0; 6]);
    let w = t(&[1, 4, 3], vec![0.0; 12]);
    let r = t(&[1, 4, 4], vec![0.0; 16]);
    let lstm = |attrs: Vec<(&str, AttrValue)>| node("LSTM", 14, attrs, 5, 1);
    let o = lstm(vec![]).unwrap();
    // W's rows must be 4 x hidden (hidden 4 from R): 4 rows is one gate's worth.
    let e = infer_known(&*o, &[Some(&x), Some(&w), Some(&r)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("W is float [1, 4, 3]") && e.contains("[1, 16, 3]"),
        "{e}"
    );
    let e = lstm(vec![(
        "activations",
        AttrValue::Strings(vec!["Swish".into(); 3]),
    )])
    .unwrap_err()
    .to_string();
    assert!(e.contains("activation 'Swish'"), "{e}");
    let e = lstm(vec![("direction", AttrValue::String("sideways".into()))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("direction 'sideways'"), "{e}");

    // A sequence length past X's steps: an error on the CPU, and on the GPU through the
    // fault record.
    let rnn = node("RNN", 14, vec![], 5, 1).unwrap();
    let w = t(&[1, 2, 3], vec![0.1; 6]);
    let r = t(&[1, 2, 2], vec![0.1; 4]);
    let lens = Tensor::from_vec(vec![1], vec![3i32]);
    let ins = [Some(&x), Some(&w), Some(&r), None, Some(&lens)];
    let e = run(&*rnn, &ins).unwrap_err().to_string();
    assert!(
        e.contains("sequence_lens[0] is 3; it must be in 0..=2"),
        "{e}"
    );
    let outs = infer_known(&*rnn, &ins).unwrap();
    match run_op(&*rnn, &ins, &outs) {
        Err(e) if e == "skipped" => {}
        Err(e) => assert!(e.contains("index 3 (element 0"), "{e}"),
        Ok(_) => panic!("a sequence length past X passed on the GPU"),
    }
    let f = crate::IndexFault {
        element: 0,
        index: 3,
        dim: 2,
    };
    let e = rnn.index_fault(&[], &f).to_string();
    assert!(
        e.contains("sequence_lens[0] is 3; it must be in 0..=2"),
        "{e}"
    );
}
