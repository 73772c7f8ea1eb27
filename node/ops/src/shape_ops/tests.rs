//! Hand-derived cases for the view ops, Constant and Shape, across the opsets where their
//! rules changed.

use crate::tensor::{DType, Tensor};
use crate::testkit::*;
use crate::{AttrValue, BufRef, ValueType};
use half::f16;

fn shares_bytes(a: &Tensor, b: &Tensor) -> bool {
    a.bytes().as_ptr() == b.bytes().as_ptr() && a.bytes().len() == b.bytes().len()
}

fn shape_of(t: Result<Tensor, crate::OpError>) -> Vec<usize> {
    t.expect("runs").shape().to_vec()
}

// ---- Reshape ----

#[test]
fn reshape_keeps_bytes_and_order() {
    let x = iota_f32(&[2, 3]);
    let y = run_node("Reshape", 13, vec![], &[Some(&x), Some(&i64s(&[3, 2]))]).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(
        y.view::<f32>().unwrap().to_vec(),
        vec![0., 1., 2., 3., 4., 5.]
    );
    assert!(shares_bytes(&x, &y), "Reshape must not copy");
}

#[test]
fn reshape_zero_copies_and_minus_one_infers() {
    let x = iota_f32(&[2, 3, 4]);
    let r = |s: &[i64]| shape_of(run_node("Reshape", 13, vec![], &[Some(&x), Some(&i64s(s))]));
    assert_eq!(r(&[0, -1]), vec![2, 12]);
    assert_eq!(r(&[-1, 4]), vec![6, 4]);
    assert_eq!(r(&[0, 0, -1]), vec![2, 3, 4]);
    assert_eq!(r(&[4, 0, 2]), vec![4, 3, 2]);
    assert_eq!(r(&[-1]), vec![24]);
}

#[test]
fn reshape_to_and_from_scalars() {
    let x = Tensor::from_vec(vec![1, 1], vec![7i64]);
    let y = run_node("Reshape", 13, vec![], &[Some(&x), Some(&i64s(&[]))]).unwrap();
    assert_eq!(y.shape(), &[] as &[usize]);
    assert_eq!(y.view::<i64>().unwrap()[0], 7);
    let s = Tensor::scalar(3u8);
    assert_eq!(
        shape_of(run_node(
            "Reshape",
            13,
            vec![],
            &[Some(&s), Some(&i64s(&[1, -1, 1]))]
        )),
        vec![1, 1, 1]
    );
}

#[test]
fn reshape_zero_size_tensors() {
    let x = Tensor::zeros(DType::F32, vec![2, 0, 3]);
    // The 0 copies input dim 0 (= 2), and -1 becomes 0 / 2 = 0.
    assert_eq!(
        shape_of(run_node(
            "Reshape",
            13,
            vec![],
            &[Some(&x), Some(&i64s(&[0, -1]))]
        )),
        vec![2, 0]
    );
    // Here the 0 copies a zero-size dim, so -1 could be anything: refused, as onnxruntime does.
    let z = Tensor::zeros(DType::F32, vec![0, 3]);
    assert_err(
        run_node("Reshape", 13, vec![], &[Some(&z), Some(&i64s(&[0, -1]))]),
        false,
        "ambiguous",
    );
}

#[test]
fn reshape_allowzero_from_opset_14() {
    let x = Tensor::zeros(DType::F32, vec![0, 3]);
    let az = || vec![("allowzero", AttrValue::Int(1))];
    // With allowzero the 0 is a size: [0, 3] -> [3, 0].
    assert_eq!(
        shape_of(run_node(
            "Reshape",
            14,
            az(),
            &[Some(&x), Some(&i64s(&[3, 0]))]
        )),
        vec![3, 0]
    );
    // Without it the 0 copies dim 1 (= 3): [0, 3] -> [3, 3] has 9 elements, not 0.
    assert_err(
        run_node("Reshape", 14, vec![], &[Some(&x), Some(&i64s(&[3, 0]))]),
        false,
        "elements",
    );
    let y = iota_f32(&[2, 3]);
    assert_err(
        run_node("Reshape", 14, az(), &[Some(&y), Some(&i64s(&[0, -1]))]),
        false,
        "both 0 and -1",
    );
    assert_err(op("Reshape", 13, az(), 2), false, "opset 14");
    assert_err(
        op("Reshape", 14, vec![("allowzero", AttrValue::Int(2))], 2),
        false,
        "allowzero",
    );
}

#[test]
fn reshape_before_opset_5_reads_the_attribute() {
    let x = iota_f32(&[2, 3]);
    let y = run_node("Reshape", 1, vec![("shape", ints(&[3, -1]))], &[Some(&x)]).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_err(op("Reshape", 4, vec![], 1), false, "'shape' attribute");
    assert_err(
        op("Reshape", 5, vec![("shape", ints(&[6]))], 2),
        false,
        "input 1",
    );
}

#[test]
fn impossible_reshapes_are_errors() {
    let x = iota_f32(&[2, 3]);
    let bad = |s: &[i64], needle: &str| {
        assert_err(
            run_node("Reshape", 13, vec![], &[Some(&x), Some(&i64s(s))]),
            false,
            needle,
        )
    };
    bad(&[4, 2], "6 elements, the shape 8");
    bad(&[-1, -1], "at most one");
    bad(&[4, -1], "do not divide");
    bad(&[2, -2], "negative");
    bad(&[1, 1, 0], "rank 2");
    bad(&[i64::MAX, 4], "largest size");
    bad(&[1 << 32, 1 << 32], "overflows");
}

#[test]
fn reshape_needs_its_shape_at_plan_time() {
    let x = iota_f32(&[2, 3]);
    let s = i64s(&[6]);
    let op = op("Reshape", 13, vec![], 2).unwrap();
    assert_err(
        infer_partly(op.as_ref(), &[Some(&x), Some(&s)], &[0]),
        true,
        "planned",
    );
    assert_err(
        infer_known(op.as_ref(), &[Some(&x), None]),
        false,
        "missing",
    );
    assert_err(
        run_node(
            "Reshape",
            13,
            vec![],
            &[Some(&x), Some(&Tensor::scalar(6.0f32))],
        ),
        false,
        "int64",
    );
}

#[test]
fn reshape_moves_every_dtype_unchanged() {
    let cases = [
        Tensor::from_vec(vec![2, 2], vec![1i64, -2, 3, i64::MIN]),
        Tensor::from_vec(vec![2, 2], vec![0u8, 1, 254, 255]),
        Tensor::from_bools(vec![2, 2], vec![true, false, false, true]),
        Tensor::from_vec(
            vec![2, 2],
            [0.5f32, -1.0, 65504.0, 1e-3].map(f16::from_f32).to_vec(),
        ),
    ];
    for x in cases {
        let y = run_node("Reshape", 21, vec![], &[Some(&x), Some(&i64s(&[4]))]).unwrap();
        assert_eq!((y.dtype(), y.shape()), (x.dtype(), &[4usize][..]));
        assert_eq!(y.bytes(), x.bytes());
    }
}

#[test]
fn view_ops_copy_words_on_the_gpu() {
    let op = op("Reshape", 13, vec![], 2).unwrap();
    assert!(op.is_view());
    let k = op
        .gpu(&[], &[ValueType::new(DType::F32, vec![3, 2])])
        .expect("f32 has a kernel");
    assert_eq!(k.dispatches.len(), 1);
    assert_eq!(
        k.dispatches[0].kernel(),
        vkml_shaders::copy::Variant::Main.kernel()
    );
    assert_eq!(k.dispatches[0].params, vec![6]);
    assert_eq!(
        k.dispatches[0].buffers,
        vec![BufRef::Input(0), BufRef::Output(0)]
    );
    // Two f16 are one word; three u8 are not a whole word, so they move one byte each.
    let k = op.gpu(&[], &[ValueType::new(DType::F16, vec![2])]).unwrap();
    assert_eq!(k.dispatches[0].params, vec![1]);
    let k = op.gpu(&[], &[ValueType::new(DType::U8, vec![3])]).unwrap();
    assert_eq!(
        k.dispatches[0].kernel(),
        vkml_shaders::remap::Variant::B1.kernel()
    );
    assert_eq!(k.dispatches[0].params[0], 3);
    let empty = op
        .gpu(&[], &[ValueType::new(DType::F32, vec![0, 5])])
        .unwrap();
    assert!(empty.dispatches.is_empty());
}

// ---- Flatten ----

#[test]
fn flatten_axes() {
    let x = iota_f32(&[2, 3, 4]);
    let f = |opset, axis: Option<i64>| {
        let attrs = axis
            .map(|a| vec![("axis", AttrValue::Int(a))])
            .unwrap_or_default();
        run_node("Flatten", opset, attrs, &[Some(&x)]).map(|t| t.shape().to_vec())
    };
    assert_eq!(f(1, None).unwrap(), vec![2, 12]);
    assert_eq!(f(1, Some(0)).unwrap(), vec![1, 24]);
    assert_eq!(f(9, Some(2)).unwrap(), vec![6, 4]);
    assert_eq!(f(9, Some(3)).unwrap(), vec![24, 1]);
    assert_eq!(f(11, Some(-1)).unwrap(), vec![6, 4]);
    assert_eq!(f(13, Some(-3)).unwrap(), vec![1, 24]);
    assert_err(f(9, Some(-1)), false, "[0, 3]");
    assert_err(f(11, Some(4)), false, "[-3, 3]");
    assert_err(f(11, Some(-4)), false, "[-3, 3]");
}

#[test]
fn flatten_scalar_and_empty() {
    let s = Tensor::scalar(1.5f32);
    let y = run_node(
        "Flatten",
        13,
        vec![("axis", AttrValue::Int(0))],
        &[Some(&s)],
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 1]);
    // The default axis 1 is past a scalar's rank 0.
    assert_err(
        run_node("Flatten", 13, vec![], &[Some(&s)]),
        false,
        "axis 1",
    );
    let z = Tensor::zeros(DType::U8, vec![3, 0, 2]);
    assert_eq!(
        shape_of(run_node("Flatten", 13, vec![], &[Some(&z)])),
        vec![3, 0]
    );
    let y = run_node("Flatten", 13, vec![], &[Some(&z)]).unwrap();
    assert!(shares_bytes(&z, &y));
}

// ---- Squeeze ----

#[test]
fn squeeze_with_attribute_axes() {
    let x = Tensor::zeros(DType::F32, vec![1, 3, 1, 2]);
    let sq = |opset, axes: Option<&[i64]>| {
        let attrs = axes.map(|a| vec![("axes", ints(a))]).unwrap_or_default();
        run_node("Squeeze", opset, attrs, &[Some(&x)]).map(|t| t.shape().to_vec())
    };
    assert_eq!(sq(1, Some(&[0, 2])).unwrap(), vec![3, 2]);
    assert_eq!(sq(1, Some(&[2])).unwrap(), vec![1, 3, 2]);
    assert_eq!(sq(1, None).unwrap(), vec![3, 2]);
    assert_eq!(sq(11, Some(&[-2])).unwrap(), vec![1, 3, 2]);
    assert_eq!(sq(11, Some(&[0, -4])).unwrap(), vec![3, 1, 2]);
    assert_err(sq(1, Some(&[-2])), false, "opset 11");
    assert_err(sq(11, Some(&[1])), false, "size 3");
    assert_err(sq(11, Some(&[4])), false, "out of range");
    assert_err(sq(11, Some(&[-5])), false, "out of range");
}

#[test]
fn squeeze_with_input_axes() {
    let x = Tensor::from_vec(vec![1, 2, 1], vec![5i64, 6]);
    let sq = |axes: Option<&Tensor>| {
        run_node("Squeeze", 13, vec![], &[Some(&x), axes]).map(|t| t.shape().to_vec())
    };
    assert_eq!(sq(Some(&i64s(&[-1]))).unwrap(), vec![1, 2]);
    assert_eq!(sq(Some(&i64s(&[0, 2]))).unwrap(), vec![2]);
    assert_eq!(sq(None).unwrap(), vec![2]);
    // onnxruntime's reading: an empty list squeezes every unit axis; a repeat counts once.
    assert_eq!(sq(Some(&i64s(&[]))).unwrap(), vec![2]);
    assert_eq!(sq(Some(&i64s(&[0, 0]))).unwrap(), vec![2, 1]);
    let y = run_node("Squeeze", 21, vec![], &[Some(&x), Some(&i64s(&[0]))]).unwrap();
    assert!(shares_bytes(&x, &y));
    let op13 = op("Squeeze", 13, vec![], 2).unwrap();
    assert_err(
        infer_partly(op13.as_ref(), &[Some(&x), Some(&i64s(&[0]))], &[0]),
        true,
        "planned",
    );
    assert_err(
        op("Squeeze", 13, vec![("axes", ints(&[0]))], 1),
        false,
        "input 1",
    );
}

#[test]
fn squeeze_scalar_and_empty() {
    let s = Tensor::scalar(true as u8);
    assert_eq!(
        shape_of(run_node("Squeeze", 13, vec![], &[Some(&s)])),
        Vec::<usize>::new()
    );
    let z = Tensor::zeros(DType::Bool, vec![1, 0, 1]);
    assert_eq!(
        shape_of(run_node("Squeeze", 13, vec![], &[Some(&z)])),
        vec![0]
    );
    assert_err(
        run_node("Squeeze", 13, vec![], &[Some(&z), Some(&i64s(&[1]))]),
        false,
        "size 0",
    );
}

// ---- Unsqueeze ----

#[test]
fn unsqueeze_axes_index_the_output() {
    let x = Tensor::zeros(DType::F16, vec![3, 4, 5]);
    let un = |opset, axes: &[i64]| {
        let (attrs, inputs) = if opset >= 13 {
            (vec![], vec![Some(x.clone()), Some(i64s(axes))])
        } else {
            (vec![("axes", ints(axes))], vec![Some(x.clone())])
        };
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        run_node("Unsqueeze", opset, attrs, &refs).map(|t| t.shape().to_vec())
    };
    assert_eq!(un(1, &[0, 4]).unwrap(), vec![1, 3, 4, 5, 1]);
    assert_eq!(un(1, &[4, 0]).unwrap(), vec![1, 3, 4, 5, 1]);
    assert_eq!(un(1, &[1, 2]).unwrap(), vec![3, 1, 1, 4, 5]);
    assert_eq!(un(11, &[-1]).unwrap(), vec![3, 4, 5, 1]);
    assert_eq!(un(11, &[-1, -5]).unwrap(), vec![1, 3, 4, 5, 1]);
    assert_err(un(11, &[-1, -6]), false, "out of range");
    assert_eq!(un(13, &[2, -1]).unwrap(), vec![3, 4, 1, 5, 1]);
    assert_eq!(un(13, &[]).unwrap(), vec![3, 4, 5]);
    assert_err(un(1, &[-1]), false, "opset 11");
    assert_err(un(13, &[1, 1]), false, "more than once");
    // Output rank 5: -5 and 0 are the same axis.
    assert_err(un(13, &[0, -5]), false, "more than once");
    assert_err(un(13, &[4]), false, "out of range");
    assert_err(un(13, &[-5]), false, "out of range");
}

#[test]
fn unsqueeze_needs_axes() {
    assert_err(op("Unsqueeze", 11, vec![], 1), false, "'axes' attribute");
    let x = Tensor::scalar(2.0f32);
    let y = run_node("Unsqueeze", 13, vec![], &[Some(&x), Some(&i64s(&[0]))]).unwrap();
    assert_eq!(y.shape(), &[1]);
    assert!(shares_bytes(&x, &y));
    let op13 = op("Unsqueeze", 13, vec![], 2).unwrap();
    assert_err(infer_known(op13.as_ref(), &[Some(&x)]), false, "missing");
    assert_err(
        infer_partly(op13.as_ref(), &[Some(&x), Some(&i64s(&[0]))], &[0]),
        true,
        "planned",
    );
    let z = Tensor::zeros(DType::I64, vec![0]);
    assert_eq!(
        shape_of(run_node(
            "Unsqueeze",
            13,
            vec![],
            &[Some(&z), Some(&i64s(&[0]))]
        )),
        vec![1, 0]
    );
}

// ---- Identity ----

#[test]
fn identity_is_the_input() {
    let x = Tensor::from_bools(vec![3], vec![true, false, true]);
    let y = run_node("Identity", 16, vec![], &[Some(&x)]).unwrap();
    assert_eq!(y, x);
    assert!(shares_bytes(&x, &y));
    assert!(op("Identity", 1, vec![], 1).unwrap().is_view());
}

// ---- Constant ----

#[test]
fn constant_value_attributes() {
    let c = |opset, attrs| run_node("Constant", opset, attrs, &[]);
    let t = Tensor::from_vec(vec![2], vec![1u8, 2]);
    assert_eq!(
        c(1, vec![("value", AttrValue::Tensor(t.clone()))]).unwrap(),
        t
    );
    assert_eq!(
        c(12, vec![("value_float", AttrValue::Float(2.5))]).unwrap(),
        Tensor::scalar(2.5f32)
    );
    assert_eq!(
        c(
            13,
            vec![("value_floats", AttrValue::Floats(vec![1.0, -1.0]))]
        )
        .unwrap(),
        Tensor::from_vec(vec![2], vec![1.0f32, -1.0])
    );
    assert_eq!(
        c(19, vec![("value_int", AttrValue::Int(-3))]).unwrap(),
        Tensor::scalar(-3i64)
    );
    assert_eq!(
        c(21, vec![("value_ints", ints(&[4, 5, 6]))]).unwrap(),
        i64s(&[4, 5, 6])
    );
    assert_eq!(
        c(13, vec![("value_ints", ints::<i64>(&[]))]).unwrap(),
        Tensor::zeros(DType::I64, vec![0])
    );
}

#[test]
fn constant_errors() {
    let b = |opset, attrs| op("Constant", opset, attrs, 0).map(|_| ());
    assert_err(
        b(12, vec![("value_string", AttrValue::String("a".into()))]),
        true,
        "string",
    );
    assert_err(
        b(12, vec![("value_strings", AttrValue::Strings(vec![]))]),
        true,
        "string",
    );
    let t = Tensor::scalar(1.0f32);
    assert_err(
        b(11, vec![("sparse_value", AttrValue::Tensor(t.clone()))]),
        true,
        "sparse",
    );
    assert_err(
        b(11, vec![("value_int", AttrValue::Int(1))]),
        false,
        "opset 12",
    );
    assert_err(b(13, vec![]), false, "one value attribute");
    assert_err(
        b(
            13,
            vec![
                ("value", AttrValue::Tensor(t)),
                ("value_int", AttrValue::Int(1)),
            ],
        ),
        false,
        "exactly one",
    );
    assert_err(b(13, vec![("value", AttrValue::Int(1))]), false, "a tensor");
}

#[test]
fn constant_and_shape_stay_on_the_cpu() {
    let c = op("Constant", 13, vec![("value_int", AttrValue::Int(1))], 0).unwrap();
    assert!(c.gpu(&[], &[ValueType::new(DType::I64, vec![])]).is_none());
    let s = op("Shape", 13, vec![], 1).unwrap();
    let ty = ValueType::new(DType::F32, vec![2]);
    assert!(
        s.gpu(&[Some(&ty)], &[ValueType::new(DType::I64, vec![1])])
            .is_none()
    );
    assert!(!c.is_view() && !s.is_view());
}

// ---- Shape ----

#[test]
fn shape_and_its_slices() {
    let x = Tensor::zeros(DType::U8, vec![2, 3, 4]);
    let sh = |opset, attrs| run_node("Shape", opset, attrs, &[Some(&x)]);
    let at = |s: Option<i64>, e: Option<i64>| {
        let mut v = vec![];
        if let Some(s) = s {
            v.push(("start", AttrValue::Int(s)));
        }
        if let Some(e) = e {
            v.push(("end", AttrValue::Int(e)));
        }
        sh(15, v).unwrap()
    };
    assert_eq!(sh(1, vec![]).unwrap(), i64s(&[2, 3, 4]));
    assert_eq!(at(Some(-1), None), i64s(&[4]));
    assert_eq!(at(None, Some(-1)), i64s(&[2, 3]));
    assert_eq!(at(Some(1), Some(2)), i64s(&[3]));
    assert_eq!(at(Some(2), Some(1)), i64s(&[]));
    assert_eq!(at(Some(-10), Some(10)), i64s(&[2, 3, 4]));
    assert_eq!(at(Some(5), None), i64s(&[]));
    assert_eq!(at(Some(i64::MIN), Some(i64::MAX)), i64s(&[2, 3, 4]));
    assert_err(
        op("Shape", 14, vec![("start", AttrValue::Int(1))], 1),
        false,
        "opset 15",
    );
    let op13 = op("Shape", 13, vec![], 1).unwrap();
    assert_err(op13.infer(&[]), false, "missing");
}

#[test]
fn shape_of_scalars_and_empty_tensors() {
    let s = Tensor::scalar(f16::ONE);
    assert_eq!(
        run_node("Shape", 13, vec![], &[Some(&s)]).unwrap(),
        i64s(&[])
    );
    let z = Tensor::zeros(DType::Bool, vec![0, 7]);
    assert_eq!(
        run_node("Shape", 21, vec![], &[Some(&z)]).unwrap(),
        i64s(&[0, 7])
    );
}

// ---- The copy shader, through the Vulkan test harness ----

#[test]
fn gpu_view_copies_match_the_cpu() {
    let x = random_tensor(DType::F16, &[6, 34], 1);
    type Case = (
        &'static str,
        i64,
        Vec<(&'static str, AttrValue)>,
        Vec<Option<Tensor>>,
    );
    let cases: [Case; 7] = [
        (
            "Reshape",
            13,
            vec![],
            vec![Some(x.clone()), Some(i64s(&[-1, 17]))],
        ),
        (
            "Flatten",
            13,
            vec![],
            vec![Some(random_tensor(DType::I64, &[3, 5, 7], 2))],
        ),
        (
            "Squeeze",
            13,
            vec![],
            vec![Some(random_tensor(DType::U8, &[1, 4, 1, 33], 3))],
        ),
        (
            "Unsqueeze",
            13,
            vec![],
            vec![Some(random_tensor(DType::F32, &[999], 4)), Some(i64s(&[0]))],
        ),
        (
            "Identity",
            13,
            vec![],
            vec![Some(random_tensor(DType::Bool, &[2, 2, 3], 5))],
        ),
        // Not whole words: element copies instead of word copies.
        (
            "Identity",
            13,
            vec![],
            vec![Some(random_tensor(DType::Bool, &[3], 6))],
        ),
        (
            "Squeeze",
            13,
            vec![],
            vec![Some(random_tensor(DType::F16, &[1, 3, 1], 7))],
        ),
    ];
    for (name, opset, attrs, inputs) in cases {
        let op = op(name, opset, attrs, inputs.len()).unwrap();
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        if !gpu_same_bytes(op.as_ref(), &refs, name) {
            return;
        }
    }
}
