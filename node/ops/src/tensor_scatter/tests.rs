//! TensorScatter against hand-worked updates, its refusals, and the shader against the CPU
//! kernel (ONNX's own node tests run in tests/conformance.rs).

use crate::tensor::Tensor;
use crate::testkit::{f64s, gpu_matches_cpu, run};
use crate::{AttrValue, Attrs, NodeSpec, Op, OpError};

fn build(attrs: &[(&str, AttrValue)], inputs: usize) -> Result<Box<dyn Op>, OpError> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    crate::build(&NodeSpec {
        name: "t",
        op_type: "TensorScatter",
        attrs: &attrs,
        opset: 24,
        num_inputs: inputs,
        num_outputs: 1,
    })
}

#[test]
fn rows_land_at_each_batch_entry_s_index_and_wrap_when_circular() {
    // Cache [2, 4, 1] (batch 2, 4 rows of 1), update [2, 2, 1], axis -2.
    let past = Tensor::from_vec(vec![2, 4, 1], (0..8).map(|x| x as f32).collect());
    let update = Tensor::from_vec(vec![2, 2, 1], vec![10.0f32, 11.0, 20.0, 21.0]);
    let idx = Tensor::from_vec(vec![2], vec![1i64, 2]);
    let linear = build(&[], 3).unwrap();
    let y = run(&*linear, &[Some(&past), Some(&update), Some(&idx)]).unwrap();
    assert_eq!(f64s(&y[0]), [0.0, 10.0, 11.0, 3.0, 4.0, 5.0, 20.0, 21.0]);
    // Without indices every entry starts at 0.
    let y = run(&*linear, &[Some(&past), Some(&update), None]).unwrap();
    assert_eq!(f64s(&y[0]), [10.0, 11.0, 2.0, 3.0, 20.0, 21.0, 6.0, 7.0]);
    // Circular: entry 1 from row 3 wraps to row 0.
    let circular = build(&[("mode", AttrValue::String("circular".into()))], 3).unwrap();
    let idx = Tensor::from_vec(vec![2], vec![0i64, 3]);
    let y = run(&*circular, &[Some(&past), Some(&update), Some(&idx)]).unwrap();
    assert_eq!(f64s(&y[0]), [10.0, 11.0, 2.0, 3.0, 21.0, 5.0, 6.0, 20.0]);
    // Linear mode refuses rows past the end.
    let e = run(&*linear, &[Some(&past), Some(&update), Some(&idx)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("leaves the cache's 4 rows"), "{e}");
    let e = build(&[("mode", AttrValue::String("ring".into()))], 3)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("linear or circular"), "{e}");
    let batch_axis = build(&[("axis", AttrValue::Int(0))], 3).unwrap();
    let e = run(&*batch_axis, &[Some(&past), Some(&update), None])
        .unwrap_err()
        .to_string();
    assert!(e.contains("after the batch axis"), "{e}");
}

#[test]
fn the_shader_matches_the_cpu_kernel() {
    // A [1, 2, 8, 3] cache (BNSH-like) updated on axis 2, in both modes and both float types.
    let past: Vec<f32> = (0..48).map(|x| x as f32 * 0.5).collect();
    let update: Vec<f32> = (0..18).map(|x| -(x as f32)).collect();
    for mode in ["linear", "circular"] {
        let op = build(&[("mode", AttrValue::String(mode.into()))], 3).unwrap();
        let idx = Tensor::from_vec(vec![1], vec![if mode == "linear" { 4i64 } else { 6 }]);
        let p = Tensor::from_vec(vec![1, 2, 8, 3], past.clone());
        let u = Tensor::from_vec(vec![1, 2, 3, 3], update.clone());
        gpu_matches_cpu(&*op, &[Some(&p), Some(&u), Some(&idx)], 0.0);
        let h = |t: &Tensor| {
            Tensor::from_vec(
                t.shape().to_vec(),
                f64s(t).iter().map(|&v| half::f16::from_f64(v)).collect(),
            )
        };
        let (ph, uh) = (h(&p), h(&u));
        gpu_matches_cpu(&*op, &[Some(&ph), Some(&uh), Some(&idx)], 0.0);
        gpu_matches_cpu(&*op, &[Some(&p), Some(&u), None], 0.0);
    }
}
