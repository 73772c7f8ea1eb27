//! Split-K convolutions (shaders/conv_gemm.comp's SPLIT_K variants and
//! shaders/conv_splitk_reduce.comp) against the CPU kernel, in f32 and f16: shapes that the
//! shape rule splits, and slice counts forced as `VKML_CONV_SPLITK=N` would.

use super::gpu::kernel;
use super::gpu_tests::shader_of;
use super::tests::{Case, conv_op, data};
use super::{Conv, ConvShape, WindowAttrs};
use crate::splitk::SplitK;
use crate::tensor::{DType, Tensor};
use crate::testkit::gpu::gpu_and_cpu;
use crate::testkit::{Rng, assert_within};
use crate::{Attrs, GpuKernel, InferInput, Op, OpError, ValueType};

fn tensor(shape: &[usize], v: &[f64], half: bool) -> Tensor {
    if half {
        let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x)).collect();
        Tensor::from_vec(shape.to_vec(), h)
    } else {
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Tensor::from_vec(shape.to_vec(), f)
    }
}

/// The convolution `case` describes, resolved as the op resolves it.
fn shape_of(case: &Case) -> ConvShape {
    let attrs = Attrs(
        case.attrs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    );
    let conv = Conv {
        window: WindowAttrs::parse("Conv", &attrs).unwrap(),
        group: case.group,
        pack: Default::default(),
        fused: false,
        act: None,
    };
    conv.shape(&case.x_shape(), &case.w_shape(), None).unwrap()
}

/// Conv with the split-K choice fixed rather than read from the environment; the CPU side
/// is the real op's.
#[derive(Debug)]
struct FixedSplit {
    inner: Box<dyn Op>,
    shape: ConvShape,
    bias: bool,
    mode: SplitK,
}

impl Op for FixedSplit {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        self.inner.infer(inputs)
    }
    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        self.inner.run_cpu(inputs, outputs)
    }
    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let half = inputs.first()?.as_ref()?.dtype == DType::F16;
        kernel(&self.shape, self.bias, half, self.mode)
    }
}

/// Runs `case` on the GPU (with `mode`, or the op's own choice when `None`) and on the CPU,
/// and compares. Returns the first dispatch's shader, or `None` when GPU tests are skipped.
///
/// Tolerance: relative to each output's sum of |terms| (the bound on what any summation
/// order can lose), computed by the CPU kernel on |x|, |w| and |b|: 1e-4 of it in f32. In f16
/// both sides read the same rounded inputs and sum in f32, then round once: 2^-10 of the
/// output (one f16 step, as the two sides may round a near-tie apart) on top.
fn check(case: &Case, mode: Option<SplitK>, half: bool, rng: &mut Rng) -> Option<crate::Kernel> {
    let d = data(case, rng);
    let mut vals = vec![(case.x_shape(), d.x.clone()), (case.w_shape(), d.w.clone())];
    if let Some(b) = &d.b {
        vals.push((vec![b.len()], b.clone()));
    }
    let t: Vec<Tensor> = vals.iter().map(|(s, v)| tensor(s, v, half)).collect();
    let abs: Vec<Tensor> = vals
        .iter()
        .map(|(s, v)| tensor(s, &v.iter().map(|x| x.abs()).collect::<Vec<_>>(), false))
        .collect();
    let op = conv_op(case);
    let abs_in: Vec<Option<&Tensor>> = abs.iter().map(Some).collect();
    let mag = crate::testkit::run(op.as_ref(), &abs_in).unwrap()[0]
        .to_f64_vec()
        .unwrap();

    let op: Box<dyn Op> = match mode {
        None => op,
        Some(mode) => Box::new(FixedSplit {
            inner: op,
            shape: shape_of(case),
            bias: case.bias,
            mode,
        }),
    };
    let inputs: Vec<Option<&Tensor>> = t.iter().map(Some).collect();
    let (gpu, cpu) = gpu_and_cpu(op.as_ref(), &inputs)?;
    let shader = shader_of(op.as_ref(), &t.iter().collect::<Vec<_>>());
    let (gpu, cpu) = (gpu[0].to_f64_vec().unwrap(), cpu[0].to_f64_vec().unwrap());
    let tol: Vec<f64> = mag
        .iter()
        .zip(&cpu)
        .map(|(m, y)| {
            let round = if half { y.abs() / 1024.0 } else { 0.0 };
            1e-4 * m + round + 1e-6
        })
        .collect();
    let what = format!("{case:?} ({shader}, {mode:?}, f16={half})");
    assert_within(&gpu, &cpu, &tol, &what);
    Some(shader)
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

/// Shapes the rule splits (few output tiles, long K), each with its expected slicing.
fn split_cases() -> Vec<(Case, (usize, usize))> {
    vec![
        // ResNet-50's last stage at batch 1: 1 pixel tile x 8 channel tiles, K = 4608.
        (case(1, 1, 512, 512, &[7, 7], &[3, 3]), (58, 80)),
        // A 1 x 1 convolution over 2048 channels: K = 2048 in 32 slices of 64.
        (
            Case {
                pads: vec![0; 4],
                ..case(1, 1, 2048, 64, &[7, 7], &[1, 1])
            },
            (32, 64),
        ),
        // Two groups, strided and dilated: K = 576 (36 steps), 2 tiles -> 9 slices.
        (
            Case {
                strides: vec![2, 2],
                dilations: vec![2, 2],
                ..case(1, 2, 64, 32, &[9, 9], &[3, 3])
            },
            (9, 64),
        ),
        // Batch 2, a partial channel tile, no bias, and a last slice shorter than the others:
        // K = 864 (54 steps) in 11 slices of 5 steps.
        (
            Case {
                bias: false,
                ..case(2, 1, 96, 80, &[5, 6], &[3, 3])
            },
            (11, 80),
        ),
        // 1-D: K = 640 (40 steps), one tile -> 10 slices.
        (case(1, 1, 128, 16, &[20], &[5]), (10, 64)),
        // 3-D: 4 x 4 x 4 pixels, K = 32 x 27 = 864 (54 steps), one tile -> 11 slices.
        (case(1, 1, 32, 16, &[4, 4, 4], &[3, 3, 3]), (11, 80)),
    ]
}

#[test]
fn the_rule_splits_late_layers_as_documented() {
    for (c, want) in split_cases() {
        let s = shape_of(&c);
        let k = kernel(&s, c.bias, false, SplitK::Auto).unwrap();
        assert_eq!(
            k.dispatches[0].kernel(),
            vkml_shaders::conv_gemm::Variant::F32Splitk.kernel(),
            "{c:?}"
        );
        let crate::BufRef::Table(t) = &k.dispatches[0].buffers()[4] else {
            panic!("no table")
        };
        assert_eq!((t[26] as usize, t[27] as usize), want, "{c:?}");
    }
}

#[test]
fn split_convolutions_match_the_cpu_f32_and_f16() {
    let mut rng = Rng::new(31);
    for half in [false, true] {
        for (c, _) in split_cases() {
            let Some(shader) = check(&c, None, half, &mut rng) else {
                return;
            };
            let want = if half {
                vkml_shaders::conv_gemm::Variant::F16Splitk.kernel()
            } else {
                vkml_shaders::conv_gemm::Variant::F32Splitk.kernel()
            };
            assert_eq!(shader, want, "{c:?}");
        }
    }
}

#[test]
fn forced_slice_counts_match_the_cpu() {
    let mut rng = Rng::new(5);
    // K = 5 x 9 = 45: three 16-wide steps, the last one 13 long; forced to 3 slices of one
    // step each, the last slice is partial.
    let small = case(1, 1, 5, 20, &[6, 6], &[3, 3]);
    // K = 7 x 3 x 3 = 63 (4 steps) asked for 3 slices: 2 slices of 2 steps. Two groups, 2
    // images, stride 2.
    let grouped = Case {
        strides: vec![2, 2],
        ..case(2, 2, 7, 17, &[7, 8], &[3, 3])
    };
    // 16 tiles (450 pixels x 70 channels), K = 81 in 6 steps: too short for the rule to
    // split, forced into 3 slices of 2 steps.
    let wide = case(2, 1, 9, 70, &[15, 15], &[3, 3]);
    for half in [false, true] {
        for c in [&small, &grouped, &wide] {
            let Some(shader) = check(c, Some(SplitK::Forced(3)), half, &mut rng) else {
                return;
            };
            assert!(is_split(shader), "{shader}");
        }
        // Off keeps the one-pass shader even where the rule would split.
        let (late, _) = &split_cases()[2];
        let Some(shader) = check(late, Some(SplitK::Off), half, &mut rng) else {
            return;
        };
        assert!(!is_split(shader), "{shader}");
    }
}

/// Whether `k` is one of the implicit GEMM's split-K variants.
fn is_split(k: crate::Kernel) -> bool {
    use vkml_shaders::conv_gemm::Variant;
    [Variant::F32Splitk, Variant::F16Splitk]
        .iter()
        .any(|v| v.kernel() == k)
}
