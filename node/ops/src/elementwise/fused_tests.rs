//! FusedElementwise: its attributes, its broadcast rule, the CPU kernel against hand-derived
//! values and against the steps' own kernels run one by one, and the shader against the CPU.

use super::fused::{Fused, MAX_STEPS, Operand, Program, Step, block_broadcast};
use crate::tensor::Tensor;
use crate::testkit::{Rng, assert_close, build, f64s, gpu_matches_cpu, run1};
use crate::{AttrValue, Op, OpError};

fn step(op: &'static str, operand: Operand, chain_right: bool) -> Step {
    Step {
        op,
        operand,
        chain_right,
    }
}

fn fused(steps: Vec<Step>) -> Box<dyn Op> {
    let attrs = Program { steps }.to_attrs();
    let attrs: Vec<(&str, AttrValue)> = attrs
        .0
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    build("FusedElementwise", 17, &attrs).expect("a valid program")
}

fn run(op: &dyn Op, inputs: &[&Tensor]) -> Vec<f64> {
    f64s(&run1(op, inputs).unwrap())
}

#[test]
fn attributes_round_trip_and_bad_ones_are_refused() {
    let p = Program {
        steps: vec![
            step("Add", Operand::Input(1), false),
            step("Clip", Operand::Bounds(-1.0, f32::INFINITY), false),
            step("Div", Operand::Scalar(3.0), true),
            step("Erf", Operand::None, false),
        ],
    };
    assert_eq!(Program::from_attrs(&p.to_attrs()).unwrap(), p);

    let with = |key: &str, v: AttrValue| {
        let mut a = p.to_attrs();
        a.0.insert(key.into(), v);
        Program::from_attrs(&a)
    };
    let is_invalid = |r: Result<Program, OpError>| matches!(r, Err(OpError::Invalid(_)));
    let names = |v: &[&str]| AttrValue::Strings(v.iter().map(|s| s.to_string()).collect());
    assert!(is_invalid(with(
        "steps",
        names(&["Add", "Softmax", "Div", "Erf"])
    )));
    assert!(is_invalid(with("scalars", AttrValue::Floats(vec![1.0]))));
    assert!(is_invalid(with(
        "chain_right",
        AttrValue::Ints(vec![0, 1, 1, 0])
    )));
    assert!(is_invalid(with(
        "operands",
        AttrValue::Ints(vec![-2, -3, -2, -1])
    )));
    let long = Program {
        steps: vec![step("Relu", Operand::None, false); MAX_STEPS + 1],
    };
    assert!(is_invalid(Program::from_attrs(&long.to_attrs())));
    let many_inputs = Program {
        steps: vec![step("Add", Operand::Input(5), false)],
    };
    assert!(is_invalid(Program::from_attrs(&many_inputs.to_attrs())));
}

#[test]
fn block_broadcasts() {
    let out = [2, 3, 4, 5];
    assert_eq!(block_broadcast(&[2, 3, 4, 5], &out), Some((1, 120)));
    assert_eq!(block_broadcast(&[5], &out), Some((1, 5)));
    assert_eq!(block_broadcast(&[3, 1, 1], &out), Some((20, 3)));
    assert_eq!(block_broadcast(&[1, 3, 4, 1], &out), Some((5, 12)));
    assert_eq!(block_broadcast(&[1, 1], &out), Some((1, 1)));
    assert_eq!(block_broadcast(&[], &out), Some((1, 1)));
    // Two separate blocks, a size that only broadcasts the other way, a higher rank.
    assert_eq!(block_broadcast(&[2, 1, 4, 1], &out), None);
    assert_eq!(block_broadcast(&[4, 1], &[4, 5, 1]), None);
    assert_eq!(block_broadcast(&[1, 2, 3, 4, 5], &out), None);
    // Output dims of 1 inside the block are part of it.
    assert_eq!(block_broadcast(&[3, 1, 4], &[3, 1, 4]), Some((1, 12)));
}

#[test]
fn cpu_runs_the_program_by_hand() {
    // ((x + b) * 2) -> Relu -> 10 - v -> Clip [0, 8] -> Sqrt, b a bias over the last axis.
    let op = fused(vec![
        step("Add", Operand::Input(1), false),
        step("Mul", Operand::Scalar(2.0), false),
        step("Relu", Operand::None, false),
        step("Sub", Operand::Scalar(10.0), true),
        step("Clip", Operand::Bounds(0.0, 8.0), false),
        step("Sqrt", Operand::None, false),
    ]);
    let x = Tensor::from_vec(vec![2, 3], vec![-2.0f32, -0.5, 0.0, 1.5, 3.0, 4.0]);
    let b = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]);
    // x + b = -1 1.5 3 2.5 5 7; * 2 = -2 3 6 5 10 14; Relu = 0 3 6 5 10 14;
    // 10 - v = 10 7 4 5 0 -4; Clip = 8 7 4 5 0 0.
    let want = [8f64.sqrt(), 7f64.sqrt(), 2.0, 5f64.sqrt(), 0.0, 0.0];
    assert_close(&run(&*op, &[&x, &b]), &want, 1e-6);

    // v^3, then 1 / v, Neg, 2^v: the running value as the exponent and as the divisor.
    let op = fused(vec![
        step("Pow", Operand::Scalar(3.0), false),
        step("Div", Operand::Scalar(1.0), true),
        step("Neg", Operand::None, false),
        step("Pow", Operand::Scalar(2.0), true),
    ]);
    let x = Tensor::from_vec(vec![4], vec![-2.0f32, -1.0, 0.5, 2.0]);
    // -8 -1 0.125 8 -> -0.125 -1 8 0.125 -> 0.125 1 -8 -0.125 -> 2^that.
    let want = [
        1.090_507_732_665_257_7,
        2.0,
        0.003_906_25,
        0.917_004_043_204_671_2,
    ];
    assert_close(&run(&*op, &[&x]), &want, 1e-6);
}

/// The steps' own ops, run one after another: what the chain computed before fusion.
fn unfused(steps: &[Step], inputs: &[&Tensor]) -> Tensor {
    let mut v = inputs[0].clone();
    for s in steps {
        let op = build(s.op, 17, &[]).unwrap();
        let c = |x: f32| Tensor::scalar(x);
        v = match s.operand {
            Operand::None => run1(&*op, &[&v]),
            Operand::Bounds(lo, hi) => run1(&*op, &[&v, &c(lo), &c(hi)]),
            Operand::Scalar(k) if s.chain_right => run1(&*op, &[&c(k), &v]),
            Operand::Scalar(k) => run1(&*op, &[&v, &c(k)]),
            Operand::Input(i) if s.chain_right => run1(&*op, &[inputs[i], &v]),
            Operand::Input(i) => run1(&*op, &[&v, inputs[i]]),
        }
        .unwrap();
    }
    v
}

fn gelu_steps() -> Vec<Step> {
    vec![
        step("Div", Operand::Scalar(std::f32::consts::SQRT_2), false),
        step("Erf", Operand::None, false),
        step("Add", Operand::Scalar(1.0), false),
        step("Mul", Operand::Input(0), true),
        step("Mul", Operand::Scalar(0.5), false),
    ]
}

/// Every step kind, with operands of each broadcast shape the kernel indexes.
fn mixed_steps() -> Vec<Step> {
    vec![
        step("Erf", Operand::None, false),
        step("Clip", Operand::Bounds(-0.5, 0.7), false),
        step("Add", Operand::Input(1), false),
        step("Sub", Operand::Input(2), true),
        step("Mul", Operand::Input(3), false),
        step("Div", Operand::Input(4), false),
        step("Pow", Operand::Scalar(2.0), false),
        step("Add", Operand::Input(0), true),
    ]
}

fn unary_steps() -> Vec<Step> {
    [
        "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt",
    ]
    .iter()
    .map(|&op| step(op, Operand::None, false))
    .collect()
}

fn mixed_inputs(rng: &mut Rng) -> Vec<Tensor> {
    let shape = [2, 3, 4, 5];
    let div: Vec<f32> = vec![1.5];
    vec![
        rng.tensor_f32(&shape),
        rng.tensor_f32(&[3, 1, 1]),
        rng.tensor_f32(&[5]),
        rng.tensor_f32(&shape),
        Tensor::from_vec(vec![1, 1, 1, 1], div),
    ]
}

#[test]
fn cpu_matches_the_unfused_chain() {
    let mut rng = Rng::new(71);
    let x = Tensor::from_vec(vec![1000], rng.f32s(1000).iter().map(|v| v * 4.0).collect());
    let steps = gelu_steps();
    let got = run1(&*fused(steps.clone()), &[&x]).unwrap();
    assert_eq!(got, unfused(&steps, &[&x]));

    let ins = mixed_inputs(&mut rng);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let steps = mixed_steps();
    assert_eq!(
        run1(&*fused(steps.clone()), &refs).unwrap(),
        unfused(&steps, &refs)
    );

    let steps = unary_steps();
    assert_eq!(
        run1(&*fused(steps.clone()), &[&x]).unwrap(),
        unfused(&steps, &[&x])
    );
}

#[test]
fn shape_rule_refuses_what_the_kernel_cannot_do() {
    let op = fused(vec![step("Add", Operand::Input(1), false)]);
    let x = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]);
    // The operand would broadcast the output up to [2, 3].
    let m = Tensor::from_vec(vec![2, 3], vec![0.0f32; 6]);
    assert!(matches!(run1(&*op, &[&x, &m]), Err(OpError::Invalid(_))));
    // Another dtype, a missing input, an integer chain.
    let m = Tensor::from_vec(vec![3], vec![0.0f64; 3]);
    assert!(run1(&*op, &[&x, &m]).is_err());
    assert!(run1(&*op, &[&x]).is_err());
    let i = Tensor::from_vec(vec![3], vec![1i32, 2, 3]);
    assert!(matches!(
        run1(&*fused(unary_steps()), &[&i]),
        Err(OpError::Unsupported(_))
    ));
}

#[test]
fn gpu_fused_f32() {
    let mut rng = Rng::new(72);
    let x = Tensor::from_vec(
        vec![70_001],
        rng.f32s(70_001).iter().map(|v| v * 4.0).collect(),
    );
    gpu_matches_cpu(&*fused(gelu_steps()), &[Some(&x)], 1e-5);
    gpu_matches_cpu(&*fused(unary_steps()), &[Some(&x)], 1e-5);
    let ins = mixed_inputs(&mut rng);
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    gpu_matches_cpu(&*fused(mixed_steps()), &refs, 1e-5);
    let pow = vec![
        step("Pow", Operand::Scalar(3.0), false),
        step("Div", Operand::Scalar(1.0), true),
        step("Neg", Operand::None, false),
        step("Pow", Operand::Scalar(2.0), true),
    ];
    let x = Tensor::from_vec(vec![5], vec![-2.0f32, -1.0, 0.5, 2.0, 0.0]);
    gpu_matches_cpu(&*fused(pow), &[Some(&x)], 1e-5);
}

#[test]
fn gpu_fused_f16() {
    let mut rng = Rng::new(73);
    let h = |t: &Tensor| {
        let v: Vec<half::f16> = t
            .view::<f32>()
            .unwrap()
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        Tensor::from_vec(t.shape().to_vec(), v)
    };
    let x = h(&Tensor::from_vec(
        vec![4099],
        rng.f32s(4099).iter().map(|v| v * 4.0).collect(),
    ));
    // The unfused chain rounds to f16 after each step, the kernel once at the end.
    gpu_matches_cpu(&*fused(gelu_steps()), &[Some(&x)], 4e-3);
    let ins: Vec<Tensor> = mixed_inputs(&mut rng).iter().map(h).collect();
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    gpu_matches_cpu(&*fused(mixed_steps()), &refs, 4e-3);
}

#[test]
fn gpu_kernel_is_one_dispatch_within_the_push_constants() {
    let op = Fused::new(Program {
        steps: mixed_steps(),
    })
    .unwrap();
    let mut rng = Rng::new(74);
    let ins = mixed_inputs(&mut rng);
    let tys: Vec<crate::ValueType> = ins.iter().map(crate::ValueType::of).collect();
    let refs: Vec<Option<&crate::ValueType>> = tys.iter().map(Some).collect();
    let k = op.gpu(&refs, &tys[..1]).expect("a kernel");
    assert_eq!(k.dispatches.len(), 1);
    let d = &k.dispatches[0];
    assert!(8 * d.buffers.len() + 4 * d.params.len() <= 128);
    // n, then (inner, count) of the per-channel [3,1,1], the bias [5], the full tensor and
    // the single element.
    assert_eq!(d.params[..9], [120, 20, 1, 1, 1, 3, 5, 120, 1]);
}
