//! The quantized average pools against the float graph they stand for (DequantizeLinear, the
//! float pool, QuantizeLinear: the ops' own CPU kernels) and by hand; the GPU's global pool
//! byte for byte against the CPU.

use crate::tensor::{DType, Tensor};
use crate::testkit::{Rng, gpu_same_bytes, ints, node_in, run, run_node};
use crate::{AttrValue, MS_DOMAIN, Op};

fn qop(op_type: &str, attrs: Vec<(&str, AttrValue)>, inputs: usize) -> Box<dyn Op> {
    node_in(MS_DOMAIN, op_type, 1, attrs, (inputs, 1)).unwrap()
}

fn bytes(dt: DType, shape: &[usize], rng: &mut Rng) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    Tensor::from_bytes(dt, shape.to_vec(), v.into()).unwrap()
}

fn zero(dt: DType, v: u8) -> Tensor {
    Tensor::from_bytes(dt, vec![], vec![v].into()).unwrap()
}

/// Q(pool(DQ(x))) through the float ops.
fn float_graph(
    pool: &str,
    attrs: Vec<(&str, AttrValue)>,
    x: &Tensor,
    (xs, xz, ys, yz): (&Tensor, &Tensor, &Tensor, &Tensor),
) -> Vec<i64> {
    let f = run_node(
        "DequantizeLinear",
        21,
        vec![],
        &[Some(x), Some(xs), Some(xz)],
    )
    .unwrap();
    let p = run_node(pool, 22, attrs, &[Some(&f)]).unwrap();
    let q = run_node(
        "QuantizeLinear",
        21,
        vec![],
        &[Some(&p), Some(ys), Some(yz)],
    )
    .unwrap();
    q.to_i64_vec().unwrap()
}

#[test]
fn global_by_hand() {
    // (10 + 20 + 30 + 40 - 4 x 10) x 0.5 / (0.25 x 4) = 30, + 3.
    let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![10u8, 20, 30, 40]);
    let (xs, ys) = (Tensor::scalar(0.5f32), Tensor::scalar(0.25f32));
    let ins = [
        Some(&x),
        Some(&xs),
        Some(&zero(DType::U8, 10)),
        Some(&ys),
        Some(&zero(DType::U8, 3)),
    ];
    let y = run(&*qop("QLinearGlobalAveragePool", vec![], 5), &ins).unwrap();
    assert_eq!(y[0].shape(), [1, 1, 1, 1]);
    assert_eq!(y[0].to_i64_vec().unwrap(), [33]);
    // int8 without an output zero point saturates: 127 x 4 x 1 / (0.5 x 4) = 254 -> 127.
    let x = Tensor::from_vec(vec![1, 1, 4], vec![127i8; 4]);
    let (one, half) = (Tensor::scalar(1.0f32), Tensor::scalar(0.5f32));
    let ins = [Some(&x), Some(&one), Some(&zero(DType::I8, 0)), Some(&half)];
    let y = run(&*qop("QLinearGlobalAveragePool", vec![], 4), &ins).unwrap();
    assert_eq!(y[0].to_i64_vec().unwrap(), [127]);
}

#[test]
fn pools_follow_the_float_graph_within_one_step() {
    let mut rng = Rng::new(11);
    for dt in [DType::U8, DType::I8] {
        let x = bytes(dt, &[2, 3, 7, 9], &mut rng);
        let (xs, ys) = (Tensor::scalar(0.037f32), Tensor::scalar(0.011f32));
        let (xz, yz) = (zero(dt, 131), zero(dt, 9));
        let q = (&xs, &xz, &ys, &yz);
        let ins = [Some(&x), Some(&xs), Some(&xz), Some(&ys), Some(&yz)];
        let attrs = vec![
            ("kernel_shape", ints(&[3, 2])),
            ("strides", ints(&[2, 2])),
            ("pads", ints(&[1, 0, 1, 1])),
            ("count_include_pad", AttrValue::Int(1)),
        ];
        let cases = [
            ("QLinearGlobalAveragePool", "GlobalAveragePool", vec![]),
            ("QLinearAveragePool", "AveragePool", attrs.clone()),
            ("QLinearAveragePool", "AveragePool", attrs[..3].to_vec()),
        ];
        for (qname, fname, attrs) in cases {
            let got = run(&*qop(qname, attrs.clone(), 5), &ins).unwrap()[0]
                .to_i64_vec()
                .unwrap();
            let want = float_graph(fname, attrs, &x, q);
            assert_eq!(got.len(), want.len());
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .max()
                .unwrap();
            assert!(worst <= 1, "{qname} {dt}: {got:?} vs {want:?}");
            let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
            assert!(
                same * 10 >= got.len() * 9,
                "{qname} {dt}: {same} of {} equal",
                got.len()
            );
        }
    }
}

#[test]
fn bad_inputs_are_refused_by_name() {
    let e = node_in(MS_DOMAIN, "QLinearAveragePool", 1, vec![], (5, 1)).unwrap_err();
    assert!(e.to_string().contains("kernel_shape"), "{e}");
    let last = vec![("channels_last", AttrValue::Int(1))];
    let e = node_in(MS_DOMAIN, "QLinearGlobalAveragePool", 1, last, (5, 1)).unwrap_err();
    assert!(e.to_string().contains("channels_last"), "{e}");
    // Float input: refused by its shape rule, naming the type.
    let x = Tensor::from_vec(vec![1, 1, 2], vec![1.0f32, 2.0]);
    let s = Tensor::scalar(1.0f32);
    let e = run(
        &*qop("QLinearGlobalAveragePool", vec![], 4),
        &[Some(&x), Some(&s), None, Some(&s)],
    );
    crate::testkit::assert_err(e, false, "float");
}

#[test]
fn gpu_global_pool_matches_cpu_bytes() {
    let mut rng = Rng::new(3);
    for dt in [DType::U8, DType::I8] {
        for shape in [[1, 1, 1, 1], [2, 5, 7, 7], [1, 3, 1, 1000]] {
            let x = bytes(dt, &shape, &mut rng);
            let (xs, ys) = (Tensor::scalar(0.021f32), Tensor::scalar(0.013f32));
            let (xz, yz) = (zero(dt, 120), zero(dt, 250));
            let ins = [Some(&x), Some(&xs), Some(&xz), Some(&ys), Some(&yz)];
            let op = qop("QLinearGlobalAveragePool", vec![], 5);
            gpu_same_bytes(&*op, &ins, &format!("{dt} {shape:?}"));
            gpu_same_bytes(&*op, &ins[..4], &format!("{dt} {shape:?} no y_zero_point"));
        }
    }
}

#[test]
fn gpu_windowed_pool_matches_cpu_bytes() {
    let mut rng = Rng::new(8);
    type Case = (Vec<usize>, Vec<(&'static str, AttrValue)>);
    let cases: Vec<Case> = vec![
        (
            vec![2, 3, 9, 7],
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 2])),
                ("pads", ints(&[1, 1, 1, 1])),
                ("count_include_pad", AttrValue::Int(1)),
            ],
        ),
        (
            vec![1, 4, 11, 6],
            vec![
                ("kernel_shape", ints(&[2, 4])),
                ("strides", ints(&[3, 1])),
                ("pads", ints(&[0, 2, 1, 1])),
                ("ceil_mode", AttrValue::Int(1)),
            ],
        ),
        (vec![1, 2, 13], vec![("kernel_shape", ints(&[5]))]),
        (
            vec![1, 2, 4, 5, 6],
            vec![
                ("kernel_shape", ints(&[2, 3, 2])),
                ("strides", ints(&[1, 2, 2])),
            ],
        ),
    ];
    for dt in [DType::U8, DType::I8] {
        for (shape, attrs) in &cases {
            let x = bytes(dt, shape, &mut rng);
            let (xs, ys) = (Tensor::scalar(0.027f32), Tensor::scalar(0.019f32));
            let (xz, yz) = (zero(dt, 7), zero(dt, 140));
            let ins = [Some(&x), Some(&xs), Some(&xz), Some(&ys), Some(&yz)];
            let op = qop("QLinearAveragePool", attrs.clone(), 5);
            gpu_same_bytes(&*op, &ins, &format!("{dt} {shape:?} {attrs:?}"));
        }
    }
}
