//! Conv's shaders against its CPU kernel (itself checked against the reference in tests.rs),
//! on the same random configurations plus shapes that span several tiles.

use super::tests::{Case, conv_op, data, tensors};
use crate::tensor::Tensor;
use crate::testkit::gpu::gpu_and_cpu;
use crate::testkit::{Rng, assert_within};
use crate::{InferInput, Op, ValueType};

/// The shader of `op`'s first dispatch for these inputs.
pub(crate) fn shader_of(op: &dyn Op, inputs: &[&Tensor]) -> crate::Kernel {
    let types: Vec<ValueType> = inputs.iter().map(|t| ValueType::of(t)).collect();
    let infer_in: Vec<_> = types
        .iter()
        .map(|ty| Some(InferInput { ty, value: None }))
        .collect();
    let out_types = op.infer(&infer_in).unwrap();
    let refs: Vec<Option<&ValueType>> = types.iter().map(Some).collect();
    op.gpu(&refs, &out_types).expect("a GPU kernel").dispatches[0].kernel()
}

/// Runs `case` on the GPU and on the CPU; `None` when GPU tests are skipped.
/// Tolerance: 1e-4 relative to the sum of |terms| of each output (the reference's bound on
/// what any summation order can lose), which is at least the output's own magnitude.
fn check(case: &Case, rng: &mut Rng) -> Option<crate::Kernel> {
    let d = data(case, rng);
    let (_, _, mag) = case.reference(&d.x, &d.w, d.b.as_deref());
    let op = conv_op(case);
    let t = tensors(case, &d, false);
    let inputs: Vec<Option<&Tensor>> = t.iter().map(Some).collect();
    let (gpu, cpu) = gpu_and_cpu(op.as_ref(), &inputs)?;
    let shader = shader_of(op.as_ref(), &t.iter().collect::<Vec<_>>());
    let tol: Vec<f64> = mag.iter().map(|m| 1e-4 * m + 1e-6).collect();
    let what = format!("{case:?} ({shader})");
    assert_within(
        &gpu[0].to_f64_vec().unwrap(),
        &cpu[0].to_f64_vec().unwrap(),
        &tol,
        &what,
    );
    Some(shader)
}

#[test]
fn shaders_match_the_cpu_on_random_configurations() {
    let mut rng = Rng::new(7);
    let mut shaders = std::collections::BTreeSet::new();
    for i in 0..150 {
        let case = Case::random(&mut rng, 1 + i % 3);
        match check(&case, &mut rng) {
            Some(s) => shaders.insert(s),
            None => return,
        };
    }
    // Both kernels were exercised (the implicit GEMM maybe also split along K).
    use vkml_shaders::{conv_direct, conv_gemm};
    for kernel in [
        conv_direct::Variant::F32.kernel(),
        conv_gemm::Variant::F32.kernel(),
    ] {
        assert!(
            shaders.contains(&kernel),
            "{kernel} never chosen: {shaders:?}"
        );
    }
}

fn case(n: usize, group: usize, cg: usize, ocg: usize, input: &[usize], kernel: &[usize]) -> Case {
    let rank = input.len();
    Case {
        n,
        group,
        cg,
        ocg,
        input: input.to_vec(),
        kernel: kernel.to_vec(),
        strides: vec![1; rank],
        dilations: vec![1; rank],
        pads: vec![1; 2 * rank],
        auto_pad: "NOTSET",
        kernel_attr: false,
        bias: true,
    }
}

#[test]
fn shaders_match_the_cpu_across_many_tiles() {
    let mut rng = Rng::new(21);
    let cases = [
        // 2 x 17 x 19 pixels = 11 pixel tiles, 96 channels = 2 channel tiles, K = 144.
        case(2, 1, 16, 96, &[17, 19], &[3, 3]),
        // Two groups of 20 channels, strided and dilated.
        Case {
            strides: vec![2, 1],
            dilations: vec![1, 2],
            ..case(1, 2, 5, 20, &[23, 21], &[3, 3])
        },
        // Long 1-D signal, K not a multiple of the 16-wide slice.
        case(3, 1, 7, 33, &[300], &[5]),
        // 3-D.
        case(1, 1, 3, 17, &[6, 7, 8], &[3, 2, 3]),
        // Depthwise, larger than a workgroup.
        Case {
            strides: vec![2, 2],
            ..case(2, 24, 1, 1, &[15, 15], &[3, 3])
        },
        // Pointwise.
        Case {
            pads: vec![0; 4],
            ..case(1, 1, 64, 64, &[9, 9], &[1, 1])
        },
    ];
    for c in &cases {
        if check(c, &mut rng).is_none() {
            return;
        }
    }
}
