//! CPU tests of the ops beyond Add-Div and Relu/Sigmoid/Tanh, against hand-derived values and
//! values computed with numpy (noted where so).

use crate::tensor::{DType, Tensor};
use crate::testkit::{assert_close, build, f64s, run, run1};
use crate::{AttrValue, InferInput, OpError, ValueType};
use half::f16;

const X: [f64; 5] = [-1.5, -0.5, 0.0, 0.5, 2.0];

/// numpy (float64) at X, e.g. `np.exp(x)`, `0.5*x*(1+erf(x/sqrt(2)))`.
const NUMPY: &[(&str, [f64; 5])] = &[
    (
        "Exp",
        [
            0.22313016014842982,
            0.6065306597126334,
            1.0,
            1.6487212707001282,
            7.38905609893065,
        ],
    ),
    (
        "Erf",
        [
            -0.9661051464753108,
            -0.5204998778130465,
            0.0,
            0.5204998778130465,
            0.9953222650189527,
        ],
    ),
    (
        "Tanh",
        [
            -0.9051482536448665,
            -0.46211715726000974,
            0.0,
            0.46211715726000974,
            0.9640275800758169,
        ],
    ),
    (
        "Sigmoid",
        [
            0.18242552380635635,
            0.3775406687981454,
            0.5,
            0.6224593312018546,
            0.8807970779778823,
        ],
    ),
    ("HardSigmoid", [0.19999999999999996, 0.4, 0.5, 0.6, 0.9]),
    (
        "HardSwish",
        [
            -0.375,
            -0.20833333333333334,
            0.0,
            0.2916666666666667,
            1.6666666666666665,
        ],
    ),
    ("LeakyRelu", [-0.015, -0.005, 0.0, 0.5, 2.0]),
    (
        "Elu",
        [-0.7768698398515702, -0.3934693402873666, 0.0, 0.5, 2.0],
    ),
    (
        "Gelu",
        [
            -0.10021080190328713,
            -0.15426876936299344,
            0.0,
            0.34573123063700656,
            1.9544997361036416,
        ],
    ),
    (
        "Softplus",
        [
            0.2014132779827524,
            0.4740769841801067,
            std::f64::consts::LN_2,
            0.9740769841801067,
            2.1269280110429727,
        ],
    ),
    (
        "Softsign",
        [
            -0.6,
            -0.3333333333333333,
            0.0,
            0.3333333333333333,
            0.6666666666666666,
        ],
    ),
    (
        "Selu",
        [
            -1.3658143533672527,
            -0.6917581878028713,
            0.0,
            0.5253504936777402,
            2.101401974710961,
        ],
    ),
    (
        "Celu",
        [-0.7768698398515702, -0.3934693402873666, 0.0, 0.5, 2.0],
    ),
    (
        "Swish",
        [
            -0.2736382857095345,
            -0.1887703343990727,
            0.0,
            0.3112296656009273,
            1.7615941559557646,
        ],
    ),
    (
        "Mish",
        [
            -0.29809974216680674,
            -0.22074377465173,
            0.0,
            0.3752452113048951,
            1.9439589595339946,
        ],
    ),
    (
        "Atan",
        [
            -0.982793723247329,
            -0.4636476090008061,
            0.0,
            0.4636476090008061,
            1.1071487177940904,
        ],
    ),
    (
        "Sinh",
        [
            -2.1292794550948173,
            -0.5210953054937474,
            0.0,
            0.5210953054937474,
            3.6268604078470186,
        ],
    ),
    (
        "Cosh",
        [
            2.352409615243247,
            1.1276259652063807,
            1.0,
            1.1276259652063807,
            3.7621956910836314,
        ],
    ),
    (
        "Asinh",
        [
            -1.1947632172871092,
            -0.48121182505960347,
            0.0,
            0.48121182505960347,
            1.4436354751788103,
        ],
    ),
    (
        "Sin",
        [
            -0.9974949866040544,
            -0.479425538604203,
            0.0,
            0.479425538604203,
            0.9092974268256817,
        ],
    ),
    (
        "Cos",
        [
            0.0707372016677029,
            0.8775825618903728,
            1.0,
            0.8775825618903728,
            -0.4161468365471424,
        ],
    ),
    (
        "Tan",
        [
            -14.101419947171719,
            -0.5463024898437905,
            0.0,
            0.5463024898437905,
            -2.185039863261519,
        ],
    ),
    ("Round", [-2.0, -0.0, 0.0, 0.0, 2.0]),
    ("Floor", [-2.0, -1.0, 0.0, 0.0, 2.0]),
    ("Ceil", [-1.0, -0.0, 0.0, 1.0, 2.0]),
    ("Sign", [-1.0, -1.0, 0.0, 1.0, 1.0]),
    (
        "Reciprocal",
        [-0.6666666666666666, -2.0, f64::INFINITY, 2.0, 0.5],
    ),
    ("Neg", [1.5, 0.5, 0.0, -0.5, -2.0]),
    ("Abs", [1.5, 0.5, 0.0, 0.5, 2.0]),
    ("ThresholdedRelu", [0.0, 0.0, 0.0, 0.0, 2.0]),
    ("Shrink", [-1.5, 0.0, 0.0, 0.0, 2.0]),
];

#[test]
fn float_unary_ops_match_numpy_in_f64_f32_and_f16() {
    for (op, want) in NUMPY {
        let o = build(op, 22, &[]).unwrap();
        let y = run1(&*o, &[&Tensor::from_vec(vec![5], X.to_vec())]).unwrap();
        // Attributes are f32 in ONNX (HardSigmoid's 0.2 is 0.2f32), so ops with them are only
        // as exact as f32.
        let attrs = ["HardSigmoid", "LeakyRelu", "Selu"];
        let tol = if attrs.contains(op) { 1e-7 } else { 1e-13 };
        assert_close(&f64s(&y), want, tol);
        let y = run1(
            &*o,
            &[&Tensor::from_vec(vec![5], X.map(|v| v as f32).to_vec())],
        )
        .unwrap();
        assert_eq!(y.dtype(), DType::F32);
        assert_close(&f64s(&y), want, 1e-6);
        let h = Tensor::from_vec(vec![5], X.map(f16::from_f64).to_vec());
        let y = run1(&*o, &[&h]).unwrap();
        assert_eq!(y.dtype(), DType::F16);
        assert_close(&f64s(&y), want, 1e-3);
    }
}

#[test]
fn unary_domains_and_attributes() {
    let x = Tensor::from_vec(vec![4], vec![4.0f32, -1.0, 0.0, 1.0]);
    let y = f64s(&run1(&*build("Sqrt", 13, &[]).unwrap(), &[&x]).unwrap());
    assert_eq!(y[0], 2.0);
    assert!(y[1].is_nan());
    let y = f64s(&run1(&*build("Log", 13, &[]).unwrap(), &[&x]).unwrap());
    assert!(y[1].is_nan() && y[2] == f64::NEG_INFINITY && y[3] == 0.0);
    let y = f64s(&run1(&*build("Acosh", 13, &[]).unwrap(), &[&x]).unwrap());
    assert!((y[0] - 2.0634370688955608).abs() < 1e-6 && y[3] == 0.0 && y[1].is_nan());
    // Round: halves go to even (np.round).
    let x = Tensor::from_vec(vec![6], vec![0.5f32, 1.5, 2.5, -0.5, -2.5, 2.4]);
    let y = f64s(&run1(&*build("Round", 11, &[]).unwrap(), &[&x]).unwrap());
    assert_eq!(y, vec![0.0, 2.0, 2.0, -0.0, -2.0, 2.0]);
    // Attributes: LeakyRelu alpha, HardSigmoid alpha/beta, Elu alpha, Shrink lambd/bias.
    let x = Tensor::from_vec(vec![3], vec![-2.0f32, 0.25, 3.0]);
    let op = build("LeakyRelu", 16, &[("alpha", AttrValue::Float(0.5))]).unwrap();
    assert_eq!(f64s(&run1(&*op, &[&x]).unwrap()), vec![-1.0, 0.25, 3.0]);
    let op = build(
        "HardSigmoid",
        6,
        &[
            ("alpha", AttrValue::Float(0.5)),
            ("beta", AttrValue::Float(0.25)),
        ],
    )
    .unwrap();
    assert_eq!(f64s(&run1(&*op, &[&x]).unwrap()), vec![0.0, 0.375, 1.0]);
    let op = build("Elu", 6, &[("alpha", AttrValue::Float(2.0))]).unwrap();
    let y = f64s(&run1(&*op, &[&x]).unwrap());
    assert!((y[0] - 2.0 * ((-2.0f64).exp() - 1.0)).abs() < 1e-6);
    let op = build(
        "Shrink",
        9,
        &[
            ("lambd", AttrValue::Float(1.0)),
            ("bias", AttrValue::Float(0.5)),
        ],
    )
    .unwrap();
    assert_eq!(f64s(&run1(&*op, &[&x]).unwrap()), vec![-1.5, 0.0, 2.5]);
    // Shrink takes integers too: computed exactly, truncated back.
    let xi = Tensor::from_vec(vec![3], vec![-3i8, 1, 5]);
    let y = run1(&*op, &[&xi]).unwrap();
    assert_eq!(&*y.view::<i8>().unwrap(), &[-2, 0, 4]);
    // Gelu's tanh form (numpy at X).
    let op = build(
        "Gelu",
        20,
        &[("approximate", AttrValue::String("tanh".into()))],
    )
    .unwrap();
    let y = run1(&*op, &[&Tensor::from_vec(vec![5], X.to_vec())]).unwrap();
    assert_close(
        &f64s(&y),
        &[
            -0.10042842301976707,
            -0.15428599017485606,
            0.0,
            0.34571400982514394,
            1.954597694087775,
        ],
        1e-13,
    );
    assert!(
        build(
            "Gelu",
            20,
            &[("approximate", AttrValue::String("x".into()))]
        )
        .is_err()
    );
    // Float-only ops refuse integers with a named error.
    let e = run1(&*build("Exp", 13, &[]).unwrap(), &[&xi]).unwrap_err();
    assert!(matches!(e, OpError::Unsupported(_)), "{e}");
}

#[test]
fn integer_and_bool_unary_ops_wrap_like_numpy() {
    let x = Tensor::from_vec(vec![4], vec![-128i8, -3, 0, 127]);
    let r = |op: &str, x: &Tensor| run1(&*build(op, 18, &[]).unwrap(), &[x]).unwrap();
    assert_eq!(&*r("Neg", &x).view::<i8>().unwrap(), &[-128, 3, 0, -127]);
    assert_eq!(&*r("Abs", &x).view::<i8>().unwrap(), &[-128, 3, 0, 127]);
    assert_eq!(&*r("Sign", &x).view::<i8>().unwrap(), &[-1, -1, 0, 1]);
    assert_eq!(&*r("Relu", &x).view::<i8>().unwrap(), &[0, 0, 0, 127]);
    assert_eq!(
        &*r("BitwiseNot", &x).view::<i8>().unwrap(),
        &[127, 2, -1, -128]
    );
    let u = Tensor::from_vec(vec![3], vec![0u8, 5, 255]);
    assert_eq!(&*r("BitwiseNot", &u).view::<u8>().unwrap(), &[255, 250, 0]);
    assert_eq!(&*r("Abs", &u).view::<u8>().unwrap(), &[0, 5, 255]);
    assert_eq!(&*r("Sign", &u).view::<u8>().unwrap(), &[0, 1, 1]);
    let big = Tensor::from_vec(vec![2], vec![u64::MAX, 0]);
    assert_eq!(&*r("Sign", &big).view::<u64>().unwrap(), &[1, 0]);
    let b = Tensor::from_bools(vec![3], vec![true, false, true]);
    assert_eq!(r("Not", &b).view_bool().unwrap(), vec![false, true, false]);
    // Neg has no unsigned form.
    assert!(run1(&*build("Neg", 13, &[]).unwrap(), &[&u]).is_err());
}

#[test]
fn isnan_isinf_write_bools() {
    let x = Tensor::from_vec(
        vec![5],
        vec![1.0f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0],
    );
    let y = run1(&*build("IsNaN", 13, &[]).unwrap(), &[&x]).unwrap();
    assert_eq!(
        y.view_bool().unwrap(),
        vec![false, true, false, false, false]
    );
    let y = run1(&*build("IsInf", 10, &[]).unwrap(), &[&x]).unwrap();
    assert_eq!(
        y.view_bool().unwrap(),
        vec![false, false, true, true, false]
    );
    let op = build("IsInf", 10, &[("detect_negative", AttrValue::Int(0))]).unwrap();
    assert_eq!(
        run1(&*op, &[&x]).unwrap().view_bool().unwrap(),
        vec![false, false, true, false, false]
    );
    let h = Tensor::from_vec(vec![2], vec![f16::NAN, f16::INFINITY]);
    let op = build("IsInf", 20, &[("detect_positive", AttrValue::Int(0))]).unwrap();
    assert_eq!(
        run1(&*op, &[&h]).unwrap().view_bool().unwrap(),
        vec![false, false]
    );
}

#[test]
fn clip_bounds_from_attributes_or_inputs() {
    let x = Tensor::from_vec(vec![5], vec![-3.0f32, -1.0, 0.5, 2.0, f32::NAN]);
    let op = build(
        "Clip",
        6,
        &[
            ("min", AttrValue::Float(-1.5)),
            ("max", AttrValue::Float(1.0)),
        ],
    )
    .unwrap();
    let y = f64s(&run1(&*op, &[&x]).unwrap());
    assert_eq!(&y[..4], &[-1.5, -1.0, 0.5, 1.0]);
    assert!(y[4].is_nan());
    let op = build("Clip", 13, &[]).unwrap();
    let lo = Tensor::scalar(0.0f32);
    let y = run(&*op, &[Some(&x), Some(&lo), None]).unwrap().remove(0);
    assert_eq!(&f64s(&y)[..4], &[0.0, 0.0, 0.5, 2.0]);
    let hi = Tensor::scalar(-2.0f32);
    let y = run(&*op, &[Some(&x), None, Some(&hi)]).unwrap().remove(0);
    assert_eq!(&f64s(&y)[..4], &[-3.0, -2.0, -2.0, -2.0]);
    // min > max: numpy.clip gives max.
    let y = run(&*op, &[Some(&x), Some(&lo), Some(&hi)])
        .unwrap()
        .remove(0);
    assert_eq!(&f64s(&y)[..4], &[-2.0, -2.0, -2.0, -2.0]);
    let xi = Tensor::from_vec(vec![4], vec![-100i8, -5, 5, 100]);
    let (l, h) = (Tensor::scalar(-10i8), Tensor::scalar(10i8));
    let y = run(&*op, &[Some(&xi), Some(&l), Some(&h)])
        .unwrap()
        .remove(0);
    assert_eq!(&*y.view::<i8>().unwrap(), &[-10, -5, 5, 10]);
    let wrong = Tensor::scalar(1.0f32);
    assert!(run(&*op, &[Some(&xi), Some(&wrong), None]).is_err());
}

#[test]
fn mod_follows_numpy_mod_and_fmod() {
    // np.mod / np.fmod of these.
    let a = Tensor::from_vec(vec![5], vec![-7i32, 7, -7, 7, 5]);
    let b = Tensor::from_vec(vec![5], vec![3i32, -3, -3, 3, 0]);
    let y = run1(&*build("Mod", 13, &[]).unwrap(), &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<i32>().unwrap(), &[2, -2, -1, 1, 0]);
    let op = build("Mod", 13, &[("fmod", AttrValue::Int(1))]).unwrap();
    let y = run1(&*op, &[&a, &b]).unwrap();
    assert_eq!(&*y.view::<i32>().unwrap(), &[-1, 1, -1, 1, 0]);
    let a = Tensor::from_vec(vec![3], vec![-4.5f32, 4.5, 5.25]);
    let b = Tensor::from_vec(vec![3], vec![2.0f32, -2.0, 0.5]);
    let y = run1(&*op, &[&a, &b]).unwrap();
    assert_eq!(f64s(&y), vec![-0.5, 0.5, 0.25]);
}

#[test]
fn pow_mixes_base_and_exponent_types() {
    // np.power(np.float32([2,-2,0.5,-8]), np.int64([3,3,-2,2])) = [8,-8,4,64]
    let a = Tensor::from_vec(vec![4], vec![2.0f32, -2.0, 0.5, -8.0]);
    let e = Tensor::from_vec(vec![4], vec![3i64, 3, -2, 2]);
    let y = run1(&*build("Pow", 15, &[]).unwrap(), &[&a, &e]).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(f64s(&y), vec![8.0, -8.0, 4.0, 64.0]);
    // Integer bases stay exact: np.power(np.int64([2,-3,5]), [10,3,0]) = [1024,-27,1].
    let a = Tensor::from_vec(vec![3], vec![2i64, -3, 5]);
    let e = Tensor::from_vec(vec![3], vec![10i64, 3, 0]);
    let y = run1(&*build("Pow", 15, &[]).unwrap(), &[&a, &e]).unwrap();
    assert_eq!(&*y.view::<i64>().unwrap(), &[1024, -27, 1]);
    // A float exponent on an integer base truncates the float result: 2^0.5 -> 1.
    let e = Tensor::from_vec(vec![1], vec![0.5f32]);
    let a = Tensor::from_vec(vec![1], vec![2i32]);
    let y = run1(&*build("Pow", 15, &[]).unwrap(), &[&a, &e]).unwrap();
    assert_eq!(&*y.view::<i32>().unwrap(), &[1]);
    // A negative base to a fractional power is NaN.
    let a = Tensor::from_vec(vec![1], vec![-2.0f32]);
    let y = run1(&*build("Pow", 15, &[]).unwrap(), &[&a, &e]).unwrap();
    assert!(f64s(&y)[0].is_nan());
}

#[test]
fn prelu_broadcasts_the_slope_one_way() {
    let x = Tensor::from_vec(vec![2, 2], vec![-1.0f32, 2.0, -3.0, 4.0]);
    let s = Tensor::from_vec(vec![2], vec![0.5f32, 0.25]);
    let y = run1(&*build("PRelu", 16, &[]).unwrap(), &[&x, &s]).unwrap();
    assert_eq!(f64s(&y), vec![-0.5, 2.0, -1.5, 4.0]);
    let xi = Tensor::from_vec(vec![2], vec![-4i32, 4]);
    let si = Tensor::from_vec(vec![1], vec![3i32]);
    let y = run1(&*build("PRelu", 16, &[]).unwrap(), &[&xi, &si]).unwrap();
    assert_eq!(&*y.view::<i32>().unwrap(), &[-12, 4]);
    // The slope may not grow X.
    let big = Tensor::from_vec(vec![3, 2], vec![1.0f32; 6]);
    let xs = Tensor::from_vec(vec![2], vec![1.0f32; 2]);
    assert!(run1(&*build("PRelu", 16, &[]).unwrap(), &[&xs, &big]).is_err());
}

#[test]
fn bit_ops() {
    let a = Tensor::from_vec(vec![4], vec![1u8, 0x80, 16, 3]);
    let b = Tensor::from_vec(vec![4], vec![7u8, 1, 2, 8]);
    let l = build(
        "BitShift",
        11,
        &[("direction", AttrValue::String("LEFT".into()))],
    )
    .unwrap();
    let r = build(
        "BitShift",
        11,
        &[("direction", AttrValue::String("RIGHT".into()))],
    )
    .unwrap();
    assert_eq!(
        &*run1(&*l, &[&a, &b]).unwrap().view::<u8>().unwrap(),
        &[128, 0, 64, 0]
    );
    assert_eq!(
        &*run1(&*r, &[&a, &b]).unwrap().view::<u8>().unwrap(),
        &[0, 64, 4, 0]
    );
    assert!(build("BitShift", 11, &[]).is_err());
    let x = Tensor::from_vec(vec![2], vec![0b1100i32, -1]);
    let y = Tensor::from_vec(vec![1], vec![0b1010i32]);
    let f = |op: &str| -> Vec<i32> {
        let t = run1(&*build(op, 18, &[]).unwrap(), &[&x, &y]).unwrap();
        t.view::<i32>().unwrap().to_vec()
    };
    assert_eq!(f("BitwiseAnd"), vec![0b1000, 0b1010]);
    assert_eq!(f("BitwiseOr"), vec![0b1110, -1]);
    assert_eq!(f("BitwiseXor"), vec![0b0110, !0b1010]);
}

#[test]
fn comparisons_and_logic_write_bools() {
    let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, f32::NAN, 4.0, 5.0, 6.0]);
    let b = Tensor::from_vec(vec![3], vec![2.0f32, 2.0, 2.0]);
    let cmp = |op: &str, a: &Tensor, b: &Tensor| -> Vec<bool> {
        let y = run1(&*build(op, 19, &[]).unwrap(), &[a, b]).unwrap();
        assert_eq!(y.dtype(), DType::Bool);
        y.view_bool().unwrap()
    };
    let (t, f) = (true, false);
    assert_eq!(cmp("Equal", &a, &b), vec![f, t, f, f, f, f]);
    assert_eq!(cmp("Less", &a, &b), vec![t, f, f, f, f, f]);
    assert_eq!(cmp("LessOrEqual", &a, &b), vec![t, t, f, f, f, f]);
    assert_eq!(cmp("Greater", &a, &b), vec![f, f, f, t, t, t]);
    assert_eq!(cmp("GreaterOrEqual", &a, &b), vec![f, t, f, t, t, t]);
    let i = Tensor::from_vec(vec![3], vec![-1i64, 0, 1]);
    let z = Tensor::scalar(0i64);
    assert_eq!(cmp("Less", &i, &z), vec![t, f, f]);
    let p = Tensor::from_bools(vec![2, 2], vec![t, t, f, f]);
    let q = Tensor::from_bools(vec![2], vec![t, f]);
    assert_eq!(cmp("And", &p, &q), vec![t, f, f, f]);
    assert_eq!(cmp("Or", &p, &q), vec![t, t, t, f]);
    assert_eq!(cmp("Xor", &p, &q), vec![f, t, t, f]);
    assert_eq!(cmp("Equal", &p, &q), vec![t, f, f, t]);
    // Logic wants bools; comparisons want equal types.
    assert!(run1(&*build("And", 7, &[]).unwrap(), &[&a, &a]).is_err());
    assert!(run1(&*build("Less", 13, &[]).unwrap(), &[&a, &i]).is_err());
}

#[test]
fn small_int_and_f16_arithmetic() {
    let a = Tensor::from_vec(vec![3], vec![200u8, 10, 7]);
    let b = Tensor::from_vec(vec![3], vec![100u8, 20, 0]);
    let r = |op: &str| -> Vec<u8> {
        let t = run1(&*build(op, 14, &[]).unwrap(), &[&a, &b]).unwrap();
        t.view::<u8>().unwrap().to_vec()
    };
    assert_eq!(r("Add"), vec![44, 30, 7]);
    assert_eq!(r("Sub"), vec![100, 246, 7]);
    assert_eq!(r("Mul"), vec![32, 200, 0]);
    assert_eq!(r("Div"), vec![2, 0, 0]);
    let h = Tensor::from_vec(vec![2], vec![f16::from_f32(1.5), f16::from_f32(-2.0)]);
    let y = run1(&*build("Mul", 14, &[]).unwrap(), &[&h, &h]).unwrap();
    assert_eq!(f64s(&y), vec![2.25, 4.0]);
}

#[test]
fn variadic_ops_broadcast_all_inputs() {
    let a = Tensor::from_vec(vec![2, 1], vec![1.0f32, 5.0]);
    let b = Tensor::from_vec(vec![3], vec![2.0f32, f32::NAN, 4.0]);
    let c = Tensor::scalar(3.0f32);
    let op = |name: &str, xs: &[&Tensor]| {
        let ins: Vec<Option<&Tensor>> = xs.iter().map(|t| Some(*t)).collect();
        f64s(
            &run(&*build(name, 13, &[]).unwrap(), &ins)
                .unwrap()
                .remove(0),
        )
    };
    let y = op("Max", &[&a, &b, &c]);
    assert_eq!((y[0], y[2], y[3], y[5]), (3.0, 4.0, 5.0, 5.0));
    assert!(y[1].is_nan() && y[4].is_nan());
    let y = op("Min", &[&a, &b, &c]);
    assert_eq!((y[0], y[2], y[3], y[5]), (1.0, 1.0, 2.0, 3.0));
    let y = op("Sum", &[&a, &c]);
    assert_eq!(y, vec![4.0, 8.0]);
    let y = op("Mean", &[&a, &c, &c]);
    assert_eq!(
        y,
        [7.0 / 3.0, 11.0 / 3.0]
            .iter()
            .map(|v: &f64| *v as f32 as f64)
            .collect::<Vec<_>>()
    );
    assert_eq!(op("Sum", &[&a]), vec![1.0, 5.0]);
    let i = Tensor::from_vec(vec![2], vec![3i32, -4]);
    let j = Tensor::from_vec(vec![2], vec![-1i32, 9]);
    let ins = [Some(&i), Some(&j)];
    let y = run(&*build("Max", 13, &[]).unwrap(), &ins)
        .unwrap()
        .remove(0);
    assert_eq!(&*y.view::<i32>().unwrap(), &[3, 9]);
    assert!(run(&*build("Sum", 13, &[]).unwrap(), &ins).is_err());
}

#[test]
fn where_selects_with_three_way_broadcast() {
    let c = Tensor::from_bools(vec![2, 1], vec![true, false]);
    let x = Tensor::from_vec(vec![3], vec![1i64, 2, 3]);
    let y = Tensor::scalar(-1i64);
    let op = build("Where", 16, &[]).unwrap();
    let r = run(&*op, &[Some(&c), Some(&x), Some(&y)])
        .unwrap()
        .remove(0);
    assert_eq!(r.shape(), &[2, 3]);
    assert_eq!(&*r.view::<i64>().unwrap(), &[1, 2, 3, -1, -1, -1]);
    let xh = Tensor::from_vec(vec![2], vec![f16::from_f32(0.5), f16::from_f32(1.5)]);
    let yh = Tensor::from_vec(vec![2], vec![f16::from_f32(-0.5), f16::from_f32(-1.5)]);
    let c = Tensor::from_bools(vec![2], vec![false, true]);
    let r = run(&*op, &[Some(&c), Some(&xh), Some(&yh)])
        .unwrap()
        .remove(0);
    assert_eq!(f64s(&r), vec![-0.5, 1.5]);
    assert!(run(&*op, &[Some(&xh), Some(&xh), Some(&yh)]).is_err());
}

#[test]
fn dropout_passes_through_at_inference() {
    let x = Tensor::from_vec(vec![3], vec![1.0f32, -2.0, 3.0]);
    let attrs = crate::Attrs::default();
    let spec = |opset, outs| crate::NodeSpec {
        name: "d",
        op_type: "Dropout",
        attrs: &attrs,
        opset,
        num_inputs: 3,
        num_outputs: outs,
    };
    let op = crate::build(&spec(13, 2)).unwrap();
    let ys = run(&*op, &[Some(&x)]).unwrap();
    assert_eq!(ys[0], x);
    assert_eq!(ys[1].view_bool().unwrap(), vec![true; 3]);
    assert!(!op.is_view());
    let op = crate::build(&spec(7, 1)).unwrap();
    assert!(op.is_view());
    let op = crate::build(&spec(13, 1)).unwrap();
    assert!(
        !op.is_view(),
        "a training_mode input must be checked when it runs"
    );
    let ratio = Tensor::scalar(0.5f32);
    let on = Tensor::from_bools(vec![], vec![true]);
    let off = Tensor::from_bools(vec![], vec![false]);
    assert_eq!(
        run(&*op, &[Some(&x), Some(&ratio), Some(&off)]).unwrap()[0],
        x
    );
    let e = run(&*op, &[Some(&x), Some(&ratio), Some(&on)]).unwrap_err();
    assert!(matches!(e, OpError::Unsupported(_)), "{e}");
    let zero = Tensor::scalar(0.0f32);
    assert_eq!(
        run(&*op, &[Some(&x), Some(&zero), Some(&on)]).unwrap()[0],
        x
    );
    // Values known only at run time: planned, then checked by the kernel.
    let (tx, tm, tr) = (ValueType::of(&x), ValueType::of(&on), ValueType::of(&ratio));
    let ins = [
        Some(InferInput {
            ty: &tx,
            value: None,
        }),
        Some(InferInput {
            ty: &tr,
            value: None,
        }),
        Some(InferInput {
            ty: &tm,
            value: None,
        }),
    ];
    let outs = op.infer(&ins).unwrap();
    assert!(op.gpu(&[Some(&tx), Some(&tr), Some(&tm)], &outs).is_none());
    let e = op
        .run_cpu(&[Some(&x), Some(&ratio), Some(&on)], &outs)
        .unwrap_err();
    assert!(matches!(e, OpError::Unsupported(_)), "{e}");
}

#[test]
fn castlike_takes_the_type_of_input_1() {
    let x = Tensor::from_vec(vec![3], vec![1.9f32, -1.9, 300.0]);
    let like = Tensor::from_vec(vec![1], vec![0i8]);
    let op = build("CastLike", 19, &[]).unwrap();
    let y = run1(&*op, &[&x, &like]).unwrap();
    assert_eq!(&*y.view::<i8>().unwrap(), &[1, -1, 127]);
    let like = Tensor::from_vec(vec![0], Vec::<f16>::new());
    let y = run1(&*op, &[&x, &like]).unwrap();
    assert_eq!(y.dtype(), DType::F16);
    assert!(run(&*op, &[Some(&x)]).is_err());
}
