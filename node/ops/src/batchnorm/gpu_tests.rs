//! The BatchNormalization shader against the CPU kernel (checked against the formula in
//! tests.rs).

use super::tests::random_params;
use crate::AttrValue;
use crate::tensor::Tensor;
use crate::testkit::gpu::gpu_and_cpu;
use crate::testkit::{Rng, assert_within, node, tensor};

fn check(opset: i64, spatial: bool, shape: &[usize], rng: &mut Rng) -> bool {
    let stat_shape: Vec<usize> = if spatial {
        vec![shape[1]]
    } else {
        shape[1..].to_vec()
    };
    let x = tensor(shape, &rng.values(shape.iter().product()), false);
    let p = random_params(rng, stat_shape.iter().product());
    let mut inputs: Vec<Tensor> = vec![x];
    inputs.extend(p.iter().map(|v| tensor(&stat_shape, v, false)));
    let mut attrs = vec![("epsilon", AttrValue::Float(1e-3))];
    if !spatial {
        attrs.push(("spatial", AttrValue::Int(0)));
    }
    let op = node("BatchNormalization", opset, attrs, 5, 1).unwrap();
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    let Some((gpu, cpu)) = gpu_and_cpu(op.as_ref(), &refs) else {
        return false;
    };
    // Relative to the terms' size: y = x * a + b can cancel.
    let c = cpu[0].to_f64_vec().unwrap();
    let tol: Vec<f64> = c.iter().map(|v| 1e-4 * (v.abs() + 10.0)).collect();
    assert_within(
        &gpu[0].to_f64_vec().unwrap(),
        &c,
        &tol,
        &format!("{shape:?} spatial={spatial}"),
    );
    true
}

#[test]
fn shader_matches_the_cpu() {
    let mut rng = Rng::new(17);
    let shapes: [&[usize]; 5] = [
        &[2, 3, 4, 5],
        &[1, 16, 33],
        &[4, 7],
        &[2, 3, 2, 3, 4],
        &[1, 64, 30, 30],
    ];
    for shape in shapes {
        if !check(15, true, shape, &mut rng) {
            return;
        }
    }
    check(7, false, &[3, 2, 4, 5], &mut rng);
}
