//! The common one-input float ops on f32 tensors, computed in f32 by loops the compiler
//! vectorises (eight lanes in pulp's AVX2 + FMA context where the CPU has it, SSE2's four
//! otherwise), instead of the table's f64 formula through a function pointer per element:
//! that path cost a YOLO-style model's Sigmoids 44% of its time on the CPU (issue 24).
//!
//! Every formula is branch-free so the loops vectorise: selects, not `if` on data, and no
//! calls into libm (`exp` is a Cephes-style range reduction and polynomial, `erf` a rational
//! approximation). Each stays within a few ulp of the f64 formula rounded to f32
//! (fast_f32_tests.rs states the bounds), with NaN, infinities and overflow as in f64.

use super::broadcast::PARALLEL_MIN;
use super::unary::UnKind;
use crate::numeric::num::erf as erf_f64;
use rayon::prelude::*;

/// Elements per rayon task on large tensors.
const TASK_ELEMS: usize = 16 * 1024;

/// An op with an f32 loop here: a unary kind, or Clip.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Unary(UnKind),
    Clip,
}

/// An op with an f32 loop here, with the attribute values it reads (Clip's bounds as alpha
/// and beta).
#[derive(Debug, Clone, Copy)]
pub struct Fast {
    kind: Kind,
    alpha: f32,
    beta: f32,
}

impl Fast {
    /// `p` holds the attributes as `Unary` keeps them; `None` for kinds left to the f64 path
    /// (the rarer ones, and those whose f32 formula would cancel, as Elu's exp(x) - 1).
    pub fn new(kind: UnKind, p: &[f64; 3]) -> Option<Fast> {
        let covered = matches!(
            kind,
            UnKind::Relu
                | UnKind::Sigmoid
                | UnKind::Tanh
                | UnKind::Exp
                | UnKind::Erf
                | UnKind::Gelu
                | UnKind::GeluTanh
                | UnKind::HardSigmoid
                | UnKind::HardSwish
                | UnKind::LeakyRelu
                | UnKind::Neg
                | UnKind::Abs
                | UnKind::Sqrt
                | UnKind::Reciprocal
                | UnKind::Floor
                | UnKind::Ceil
                | UnKind::Round
                | UnKind::Softsign
                | UnKind::Swish
                | UnKind::ThresholdedRelu
        );
        // The attributes were f32 in the model, so these conversions are exact.
        covered.then_some(Fast {
            kind: Kind::Unary(kind),
            alpha: p[0] as f32,
            beta: p[1] as f32,
        })
    }

    /// Clip to `[lo, hi]` as `clip_typed` does it: max with lo, then min with hi (so hi wins
    /// when lo > hi), NaN passing through; an absent bound is an infinity.
    pub fn clip(lo: f32, hi: f32) -> Fast {
        Fast {
            kind: Kind::Clip,
            alpha: lo,
            beta: hi,
        }
    }

    /// The op over `x`, in parallel for large tensors.
    pub fn map(&self, x: &[f32]) -> Vec<f32> {
        // Zeroed, then overwritten: extending an empty vector through the loop instead
        // measured slower (a 32K-element Sigmoid 3.6 us -> 6.6 us; the cause not looked into).
        let mut y = vec![0.0f32; x.len()];
        if x.len() >= PARALLEL_MIN {
            y.par_chunks_mut(TASK_ELEMS)
                .zip(x.par_chunks(TASK_ELEMS))
                .for_each(|(y, x)| self.run(x, y));
        } else {
            self.run(x, &mut y);
        }
        y
    }

    /// The op over `y` in place, on this thread. The vector loops read one slice and write
    /// another, so each block goes through a buffer on the stack (in L1, a small part of the
    /// loop's cost).
    pub fn in_place(&self, y: &mut [f32]) {
        let mut buf = [0.0f32; 1024];
        for part in y.chunks_mut(buf.len()) {
            let x = &mut buf[..part.len()];
            x.copy_from_slice(part);
            self.run(x, part);
        }
    }

    /// `y[i] = op(x[i])`; the slices have one length.
    fn run(&self, x: &[f32], y: &mut [f32]) {
        let job = Job {
            op: *self,
            x,
            y: &mut *y,
        };
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            simd.vectorize(job);
            return self.fix_tail(x, y);
        }
        pulp::NullaryFnOnce::call(job);
        self.fix_tail(x, y);
    }

    /// Gelu of x < -1 is x/2 times 1 + erf(x/sqrt 2) (or 1 + tanh(...)), where the sum
    /// cancels: the f32 formula loses up to 7e-5 of relative precision by x = -3, so those
    /// elements, rare in activations, are recomputed in f64.
    fn fix_tail(&self, x: &[f32], y: &mut [f32]) {
        let exact: fn(f64) -> f64 = match self.kind {
            Kind::Unary(UnKind::Gelu) => {
                |x| 0.5 * x * (1.0 + erf_f64(x * std::f64::consts::FRAC_1_SQRT_2))
            }
            Kind::Unary(UnKind::GeluTanh) => |x| {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            },
            _ => return,
        };
        for (o, &v) in y.iter_mut().zip(x) {
            if v < -1.0 {
                *o = exact(v as f64) as f32;
            }
        }
    }
}

/// One slice's loop, a struct so that pulp can compile it inside its AVX2 context.
struct Job<'a> {
    op: Fast,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl pulp::NullaryFnOnce for Job<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Job { op, x, y } = self;
        let (a, b) = (op.alpha, op.beta);
        let Kind::Unary(kind) = op.kind else {
            return each(x, y, |v| {
                let v = if v < a { a } else { v };
                if v > b { b } else { v }
            });
        };
        // One loop per kind: a match inside the loop would keep it from vectorising.
        match kind {
            UnKind::Relu => each(x, y, |v| if v < 0.0 { 0.0 } else { v }),
            UnKind::Sigmoid => each(x, y, sigmoid),
            UnKind::Tanh => each(x, y, tanh),
            UnKind::Exp => each(x, y, exp),
            UnKind::Erf => each(x, y, erf),
            UnKind::Gelu => each(x, y, |v| 0.5 * v * (1.0 + erf(v * FRAC_1_SQRT_2))),
            UnKind::GeluTanh => each(x, y, gelu_tanh),
            // In f64 (still vectorised, at half the lanes), as a x + b cancels near the
            // clamp's ends: f32 would lose most of a small result's digits there.
            UnKind::HardSigmoid => each(x, y, |v| clamp01(a as f64 * v as f64 + b as f64) as f32),
            UnKind::HardSwish => each(x, y, |v| {
                let v = v as f64;
                (v * clamp01(v / 6.0 + 0.5)) as f32
            }),
            UnKind::LeakyRelu => each(x, y, |v| if v < 0.0 { a * v } else { v }),
            UnKind::Neg => each(x, y, |v| -v),
            UnKind::Abs => each(x, y, f32::abs),
            UnKind::Sqrt => each(x, y, f32::sqrt),
            UnKind::Reciprocal => each(x, y, |v| 1.0 / v),
            UnKind::Floor => each(x, y, f32::floor),
            UnKind::Ceil => each(x, y, f32::ceil),
            UnKind::Round => each(x, y, f32::round_ties_even),
            UnKind::Softsign => each(x, y, |v| v / (1.0 + v.abs())),
            UnKind::Swish => each(x, y, |v| v * sigmoid(a * v)),
            UnKind::ThresholdedRelu => each(x, y, |v| if v > a { v } else { 0.0 }),
            // Fast::new admits no other kind.
            _ => {}
        }
    }
}

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

#[inline(always)]
fn each(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// Clamps to [0, 1], NaN passing through (as f64's clamp in the table's formula).
#[inline(always)]
fn clamp01(v: f64) -> f64 {
    let v = if v < 0.0 { 0.0 } else { v };
    if v > 1.0 { 1.0 } else { v }
}

/// e^x within 2 ulp over the normal range; overflow gives inf, e^-inf 0, subnormal results are
/// rounded once. Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so that
/// n ln2's high part is exact: 0.693359375, nine bits, which the literal 0.693_359_4 rounds
/// to), e^r by a degree-7 polynomial, times 2^n.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Past these bounds e^x is inf or rounds to 0; clamping keeps n's scale factors finite.
    // NaN passes through the selects and the arithmetic below.
    let x = if x > 89.0 { 89.0 } else { x };
    let x = if x < -104.0 { -104.0 } else { x };
    // Rounds x log2(e) to an integer without a call to `round` (libm, unvectorised, on SSE2):
    // adding 1.5 * 2^23 leaves the integer in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = x - n * 0.693_359_4;
    let r = r - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_6e-1,
        0.5,
    ] {
        p = p * r + c;
    }
    let p = p * (r * r) + r + 1.0;
    // 2^n as two normal factors, as n reaches -150 and 128: p * 2^n1 is exact, and the second
    // product rounds once into the subnormals or overflows to inf.
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    p * pow2(n1) * pow2(n2)
}

/// 1 / (1 + e^-x), from e^-|x| so that it cannot overflow: for x < 0 it is e^x / (1 + e^x),
/// which keeps the tiny results of large negative x (subnormal included) instead of 0.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let num = if x >= 0.0 { 1.0 } else { e };
    num / (1.0 + e)
}

/// tanh, odd, computed on |x|: Cephes' tanhf polynomial below 0.625, where 1 - 2/(e^2x + 1)
/// would cancel, and that formula above (e^2x = inf gives 1).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let mut p = -5.704_988_7e-3;
    for c in [
        2.063_908_8e-2,
        -5.373_971_5e-2,
        1.333_144_2e-1,
        -3.333_328e-1,
    ] {
        p = p * z + c;
    }
    let small = a + a * z * p;
    let big = 1.0 - 2.0 / (exp(a + a) + 1.0);
    (if a < 0.625 { small } else { big }).copysign(x)
}

/// erf within 7 ulp: x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf rounds to +-1 past
/// that), the rational approximation of Eigen's generic_fast_erf_float.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = if x > 4.0 { 4.0 } else { x };
    let x = if x < -4.0 { -4.0 } else { x };
    let z = x * x;
    let mut p = -2.726_142_4e-10;
    for c in [
        2.770_681_5e-8,
        -2.101_024e-6,
        -5.692_506_2e-5,
        -7.349_906_4e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ] {
        p = p * z + c;
    }
    let mut q = -1.456_607_15e-5;
    for c in [
        -2.133_740_5e-4,
        -1.682_827e-3,
        -7.373_329_3e-3,
        -1.426_473_9e-2,
    ] {
        q = q * z + c;
    }
    x * p / q
}

#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    // sqrt(2 / pi)
    const C: f32 = 0.797_884_6;
    0.5 * x * (1.0 + tanh(C * (x + 0.044_715 * x * x * x)))
}
