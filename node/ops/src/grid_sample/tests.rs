//! A 1-D case by hand; the GPU against the CPU over every mode, padding and alignment (ONNX's
//! node tests check the CPU against ONNX's reference).

use super::*;
use crate::AttrValue;
use crate::testkit::{Rng, gpu_matches_cpu, op, run};

fn grid_sample(mode: &str, padding: &str, align: i64) -> Box<dyn Op> {
    let attrs = vec![
        ("mode", AttrValue::String(mode.into())),
        ("padding_mode", AttrValue::String(padding.into())),
        ("align_corners", AttrValue::Int(align)),
    ];
    op("GridSample", 20, attrs, 2).unwrap()
}

#[test]
fn linear_in_one_axis_by_hand() {
    // x = [10, 20, 30, 40]; align_corners: g = -1 is 0, g = 1 is 3, g = 0 is 1.5 (25); g = 2
    // is 4.5, past the end: zeros padding reads 0 at 4 and 5 (0), border clamps to 3 (40).
    let x = Tensor::from_vec(vec![1, 1, 4], vec![10.0f32, 20.0, 30.0, 40.0]);
    let g = Tensor::from_vec(vec![1, 4, 1], vec![-1.0f32, 1.0, 0.0, 2.0]);
    let y = run(&*grid_sample("linear", "zeros", 1), &[Some(&x), Some(&g)]).unwrap();
    assert_eq!(y[0].to_f64_vec().unwrap(), [10.0, 40.0, 25.0, 0.0]);
    let y = run(&*grid_sample("linear", "border", 1), &[Some(&x), Some(&g)]).unwrap();
    assert_eq!(y[0].to_f64_vec().unwrap(), [10.0, 40.0, 25.0, 40.0]);
}

#[test]
fn gpu_matches_the_cpu() {
    let mut rng = Rng::new(9);
    let x2 = rng.tensor_f32(&[2, 3, 5, 6]);
    let g2 = Tensor::from_vec(
        vec![2, 4, 3, 2],
        rng.f32s(48).into_iter().map(|v| v * 1.4).collect(),
    );
    let x3 = rng.tensor_f32(&[1, 2, 3, 4, 5]);
    let g3 = Tensor::from_vec(
        vec![1, 2, 3, 2, 3],
        rng.f32s(36).into_iter().map(|v| v * 1.3).collect(),
    );
    for mode in ["nearest", "linear", "cubic"] {
        for padding in ["zeros", "border", "reflection"] {
            for align in [0, 1] {
                let o = grid_sample(mode, padding, align);
                gpu_matches_cpu(&*o, &[Some(&x2), Some(&g2)], 1e-4);
                gpu_matches_cpu(&*o, &[Some(&x3), Some(&g3)], 1e-4);
            }
        }
    }
}
