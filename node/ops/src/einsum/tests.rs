//! Einsum against hand-computed results, and the shader against the CPU kernel.

use crate::AttrValue;
use crate::tensor::Tensor;
use crate::testkit::{Rng, build, f64s, gpu_matches_cpu, run};

fn einsum(eq: &str, ins: &[&Tensor]) -> Result<Tensor, crate::OpError> {
    let op = build("Einsum", 12, &[("equation", AttrValue::String(eq.into()))])?;
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|t| Some(*t)).collect();
    Ok(run(&*op, &ins)?.remove(0))
}

fn m(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

#[test]
fn by_hand() {
    let a = m(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = m(&[3, 2], &[1., 0., 0., 1., 1., 1.]);
    // Matrix product: [[1+3, 2+3], [4+6, 5+6]].
    let y = einsum("ij,jk->ik", &[&a, &b]).unwrap();
    assert_eq!(
        (y.shape().to_vec(), f64s(&y)),
        (vec![2, 2], vec![4., 5., 10., 11.])
    );
    // Implicit output: the labels used once, alphabetically (i, k).
    assert_eq!(
        f64s(&einsum("ij,jk", &[&a, &b]).unwrap()),
        vec![4., 5., 10., 11.]
    );
    let y = einsum("ij->ji", &[&a]).unwrap();
    assert_eq!(
        (y.shape().to_vec(), f64s(&y)),
        (vec![3, 2], vec![1., 4., 2., 5., 3., 6.])
    );
    assert_eq!(f64s(&einsum("ij->i", &[&a]).unwrap()), vec![6., 15.]);
    assert_eq!(f64s(&einsum("ij->", &[&a]).unwrap()), vec![21.]);
    // Implicit transpose: "ba" gives labels a, b in order, i.e. the transpose.
    assert_eq!(einsum("ba", &[&a]).unwrap().shape(), &[3, 2]);
    // Diagonal and trace.
    let s = m(&[3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    assert_eq!(f64s(&einsum("ii->i", &[&s]).unwrap()), vec![1., 5., 9.]);
    assert_eq!(f64s(&einsum("ii", &[&s]).unwrap()), vec![15.]);
    // Ellipsis: batched diagonal, batch broadcast.
    let bs = m(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let y = einsum("...ii->...i", &[&bs]).unwrap();
    assert_eq!(
        (y.shape().to_vec(), f64s(&y)),
        (vec![2, 2], vec![1., 4., 5., 8.])
    );
    let v = m(&[2], &[1., 10.]);
    let y = einsum("...j,j->...", &[&bs, &v]).unwrap();
    assert_eq!(f64s(&y), vec![21., 43., 65., 87.]);
    // Scalar and outer product, integers.
    let x = Tensor::scalar(3i64);
    assert_eq!(einsum("->", &[&x]).unwrap().to_i64_vec().unwrap(), vec![3]);
    let p = Tensor::from_vec(vec![2], vec![1i32, 2]);
    let y = einsum("i,j->ij", &[&p, &p]).unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), vec![1, 2, 2, 4]);
    assert!(einsum("ij,jk->ik", &[&a, &a]).is_err());
    assert!(einsum("ij->k", &[&a]).is_err());
    assert!(einsum("i.j", &[&a]).is_err());
}

#[test]
fn gpu_kernel_matches_cpu() {
    let mut rng = Rng::new(12);
    let cases: &[(&str, &[&[usize]])] = &[
        ("bij,bjk->bik", &[&[5, 2, 3], &[5, 3, 4]]),
        ("ij->ji", &[&[3, 4]]),
        ("...ii->...i", &[&[3, 5, 5]]),
        ("i,i", &[&[5], &[5]]),
        ("ij->", &[&[30, 40]]),
        ("...j,kj->...k", &[&[2, 3, 4], &[5, 4]]),
        // Attention-like products with transposed operands, a batch broadcast, a diagonal.
        ("bhqd,bhkd->bhqk", &[&[2, 3, 70, 16], &[2, 3, 65, 16]]),
        ("bij,jk->bik", &[&[3, 20, 30], &[30, 40]]),
        ("ij,kj->ik", &[&[70, 9], &[66, 9]]),
        ("bii,bi->bi", &[&[4, 6, 6], &[4, 6]]),
        ("ik,kj->ji", &[&[5, 7], &[7, 6]]),
    ];
    let mut shaders = std::collections::BTreeSet::new();
    for (eq, shapes) in cases {
        let op = build(
            "Einsum",
            12,
            &[("equation", AttrValue::String((*eq).into()))],
        )
        .unwrap();
        let ts: Vec<Tensor> = shapes.iter().map(|s| rng.tensor_f32(s)).collect();
        let ins: Vec<Option<&Tensor>> = ts.iter().map(Some).collect();
        gpu_matches_cpu(&*op, &ins, 1e-4);
        // f64 takes the general kernel, accumulating in double.
        let wide: Vec<Tensor> = shapes
            .iter()
            .map(|s| Tensor::from_vec(s.to_vec(), rng.f64s(s.iter().product())))
            .collect();
        let wide_ins: Vec<Option<&Tensor>> = wide.iter().map(Some).collect();
        gpu_matches_cpu(&*op, &wide_ins, 1e-12);
        let types: Vec<crate::ValueType> = ts.iter().map(crate::ValueType::of).collect();
        let refs: Vec<Option<&crate::ValueType>> = types.iter().map(Some).collect();
        let infer_in: Vec<_> = types
            .iter()
            .map(|ty| Some(crate::InferInput { ty, value: None }))
            .collect();
        let outs = op.infer(&infer_in).unwrap();
        if let Some(d) = op.gpu(&refs, &outs).unwrap().dispatches.first() {
            shaders.insert(d.kernel());
        }
        let hs: Vec<Tensor> = ts
            .iter()
            .map(|t| {
                Tensor::from_vec(
                    t.shape().to_vec(),
                    f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
                )
            })
            .collect();
        let ins: Vec<Option<&Tensor>> = hs.iter().map(Some).collect();
        gpu_matches_cpu(&*op, &ins, 3e-2);
    }
    // Both the GEMM lowering and the general shader were exercised.
    assert!(
        (shaders.contains(&vkml_shaders::gemm::Variant::F32.kernel())
            || shaders.contains(&vkml_shaders::gemm_splitk::Variant::F32.kernel()))
            && shaders.contains(&vkml_shaders::einsum1::Variant::F32.kernel()),
        "{shaders:?}"
    );
}
