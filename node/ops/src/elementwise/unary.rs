//! The one-input elementwise ops, table-driven: one enum of kinds, one float formula and one
//! integer formula per kind, one shader per element type (`shaders/unary.comp` for floats,
//! `shaders/unary_int.comp` for integers and bool) that picks the formula from an op code in
//! its push constants. A switch on a push constant is uniform across the dispatch, so it costs
//! no divergence, and one pipeline per dtype is far cheaper to build than one per (op, dtype).

use super::binary::view;
use super::broadcast;
use super::fast_f32::Fast;
use crate::numeric::num::{FLOATS, INTS, Int, NUMERIC, Num, dispatch_int, dispatch_num, erf};
use crate::tensor::{DType, Tensor};
use crate::util::{expect_dtype, groups_1d, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use vkml_shaders::{clip, unary, unary_f64, unary_int};

/// The kinds are the op codes the shaders switch on, from shaders/opcodes.toml.
pub use vkml_shaders::op::Unary as UnKind;

pub const OPS: [(&str, UnKind); 42] = [
    ("Relu", UnKind::Relu),
    ("Sigmoid", UnKind::Sigmoid),
    ("Tanh", UnKind::Tanh),
    ("Sqrt", UnKind::Sqrt),
    ("Exp", UnKind::Exp),
    ("Log", UnKind::Log),
    ("Erf", UnKind::Erf),
    ("HardSigmoid", UnKind::HardSigmoid),
    ("HardSwish", UnKind::HardSwish),
    ("LeakyRelu", UnKind::LeakyRelu),
    ("Elu", UnKind::Elu),
    ("Gelu", UnKind::Gelu),
    ("Neg", UnKind::Neg),
    ("Abs", UnKind::Abs),
    ("Reciprocal", UnKind::Reciprocal),
    ("Floor", UnKind::Floor),
    ("Ceil", UnKind::Ceil),
    ("Round", UnKind::Round),
    ("Sign", UnKind::Sign),
    ("Sin", UnKind::Sin),
    ("Cos", UnKind::Cos),
    ("Tan", UnKind::Tan),
    ("Asin", UnKind::Asin),
    ("Acos", UnKind::Acos),
    ("Atan", UnKind::Atan),
    ("Sinh", UnKind::Sinh),
    ("Cosh", UnKind::Cosh),
    ("Asinh", UnKind::Asinh),
    ("Acosh", UnKind::Acosh),
    ("Atanh", UnKind::Atanh),
    ("Softplus", UnKind::Softplus),
    ("Softsign", UnKind::Softsign),
    ("Selu", UnKind::Selu),
    ("Celu", UnKind::Celu),
    ("ThresholdedRelu", UnKind::ThresholdedRelu),
    ("Mish", UnKind::Mish),
    ("Swish", UnKind::Swish),
    ("Shrink", UnKind::Shrink),
    ("Not", UnKind::Not),
    ("BitwiseNot", UnKind::BitwiseNot),
    ("IsNaN", UnKind::IsNaN),
    ("IsInf", UnKind::IsInf),
];

const FLOATS_SIGNED: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
];

fn dtypes(k: UnKind) -> &'static [DType] {
    match k {
        // Signed integers joined Relu in opset 14; Neg takes them in every version.
        UnKind::Relu | UnKind::Neg => &FLOATS_SIGNED,
        UnKind::Abs | UnKind::Sign | UnKind::Shrink => &NUMERIC,
        UnKind::BitwiseNot => &INTS,
        UnKind::Not => &[DType::Bool],
        _ => &FLOATS,
    }
}

fn out_dtype(k: UnKind, x: DType) -> DType {
    match k {
        UnKind::IsNaN | UnKind::IsInf => DType::Bool,
        _ => x,
    }
}

/// Attribute values a formula reads: alpha, beta/gamma/bias, and a third spare.
pub(super) type P = [f64; 3];

fn sigmoid(x: f64) -> f64 {
    // Neither branch's exp can overflow.
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn softplus(x: f64) -> f64 {
    // ln(1 + e^x) without overflow for large x.
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// The formula of a float kind, evaluated in f64 and rounded once to the element type.
pub(super) fn float_fn(k: UnKind) -> fn(f64, &P) -> f64 {
    match k {
        UnKind::Relu => |x, _| if x < 0.0 { 0.0 } else { x },
        UnKind::Sigmoid => |x, _| sigmoid(x),
        UnKind::Tanh => |x, _| x.tanh(),
        UnKind::Sqrt => |x, _| x.sqrt(),
        UnKind::Exp => |x, _| x.exp(),
        UnKind::Log => |x, _| x.ln(),
        UnKind::Erf => |x, _| erf(x),
        UnKind::HardSigmoid => |x, p| (p[0] * x + p[1]).clamp(0.0, 1.0),
        UnKind::HardSwish => |x, _| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        UnKind::LeakyRelu => |x, p| if x < 0.0 { p[0] * x } else { x },
        UnKind::Elu => |x, p| if x < 0.0 { p[0] * x.exp_m1() } else { x },
        UnKind::Gelu => |x, _| 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
        UnKind::GeluTanh => |x, _| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        },
        UnKind::Neg => |x, _| -x,
        UnKind::Abs => |x, _| x.abs(),
        UnKind::Reciprocal => |x, _| 1.0 / x,
        UnKind::Floor => |x, _| x.floor(),
        UnKind::Ceil => |x, _| x.ceil(),
        UnKind::Round => |x, _| x.round_ties_even(),
        UnKind::Sign => |x, _| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x * 0.0 // 0 stays 0, NaN stays NaN
            }
        },
        UnKind::Sin => |x, _| x.sin(),
        UnKind::Cos => |x, _| x.cos(),
        UnKind::Tan => |x, _| x.tan(),
        UnKind::Asin => |x, _| x.asin(),
        UnKind::Acos => |x, _| x.acos(),
        UnKind::Atan => |x, _| x.atan(),
        UnKind::Sinh => |x, _| x.sinh(),
        UnKind::Cosh => |x, _| x.cosh(),
        UnKind::Asinh => |x, _| x.asinh(),
        UnKind::Acosh => |x, _| x.acosh(),
        UnKind::Atanh => |x, _| x.atanh(),
        UnKind::Softplus => |x, _| softplus(x),
        UnKind::Softsign => |x, _| x / (1.0 + x.abs()),
        UnKind::Selu => |x, p| {
            if x > 0.0 {
                p[1] * x
            } else {
                p[1] * p[0] * x.exp_m1()
            }
        },
        UnKind::Celu => |x, p| x.max(0.0) + (p[0] * (x / p[0]).exp_m1()).min(0.0),
        UnKind::ThresholdedRelu => |x, p| if x > p[0] { x } else { 0.0 },
        UnKind::Mish => |x, _| x * softplus(x).tanh(),
        UnKind::Swish => |x, p| x * sigmoid(p[0] * x),
        UnKind::Shrink => |x, p| {
            if x < -p[0] {
                x + p[1]
            } else if x > p[0] {
                x - p[1]
            } else {
                0.0
            }
        },
        // Not, BitwiseNot, IsNaN and IsInf have no float formula; dtypes() keeps them away.
        UnKind::Not | UnKind::BitwiseNot | UnKind::IsNaN | UnKind::IsInf => |x, _| x,
    }
}

/// The formula of an integer kind on the exact value; the caller wraps the result back.
fn int_fn(k: UnKind, x: i128) -> i128 {
    match k {
        UnKind::Neg => -x,
        UnKind::Abs => x.abs(),
        UnKind::Sign => x.signum(),
        UnKind::Relu => x.max(0),
        UnKind::BitwiseNot => !x,
        _ => x,
    }
}

#[derive(Debug)]
pub struct Unary {
    kind: UnKind,
    p: P,
}

fn f(spec: &NodeSpec<'_>, name: &str, default: f32) -> Result<f64, OpError> {
    Ok(spec.attrs.float(name, default)? as f64)
}

impl Unary {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let Some(&(_, mut kind)) = OPS.iter().find(|(n, _)| *n == spec.op_type) else {
            return Err(OpError::unsupported(format!("op {}", spec.op_type)));
        };
        let mut p = [0.0; 3];
        match kind {
            UnKind::HardSigmoid => p = [f(spec, "alpha", 0.2)?, f(spec, "beta", 0.5)?, 0.0],
            UnKind::LeakyRelu => p[0] = f(spec, "alpha", 0.01)?,
            UnKind::Elu | UnKind::Celu | UnKind::ThresholdedRelu | UnKind::Swish => {
                p[0] = f(spec, "alpha", 1.0)?
            }
            UnKind::Selu => {
                p = [
                    f(spec, "alpha", 1.673_263_2)?,
                    f(spec, "gamma", 1.050_701)?,
                    0.0,
                ]
            }
            UnKind::Shrink => p = [f(spec, "lambd", 0.5)?, f(spec, "bias", 0.0)?, 0.0],
            UnKind::IsInf => {
                p = [
                    spec.attrs.int("detect_negative", 1)? as f64,
                    spec.attrs.int("detect_positive", 1)? as f64,
                    0.0,
                ]
            }
            UnKind::Gelu => match spec.attrs.string("approximate", "none")? {
                "none" => {}
                "tanh" => kind = UnKind::GeluTanh,
                other => {
                    return Err(OpError::invalid(format!(
                        "Gelu: approximate must be 'none' or 'tanh', not '{other}'"
                    )));
                }
            },
            _ => {}
        }
        Ok(Box::new(Unary { kind, p }))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            UnKind::GeluTanh => "Gelu",
            k => OPS.iter().find(|(_, o)| *o == k).map_or("?", |(n, _)| *n),
        }
    }
}

fn via_f64<T: Num>(x: &Tensor, k: UnKind, p: &P) -> Result<Tensor, OpError> {
    let v = view::<T>(x)?;
    // The common activations get loops of their own, which the compiler inlines (and may
    // vectorise); the rest go through the table's function pointer.
    macro_rules! map {
        ($f:expr) => {
            broadcast::unary(&v, |a: T| T::from_f64($f(a.to_f64())))
        };
    }
    let y = match k {
        UnKind::Relu => map!(|x: f64| if x < 0.0 { 0.0 } else { x }),
        UnKind::Sigmoid => map!(sigmoid),
        UnKind::Tanh => map!(f64::tanh),
        UnKind::Exp => map!(f64::exp),
        UnKind::Sqrt => map!(f64::sqrt),
        UnKind::Neg => map!(|x: f64| -x),
        UnKind::Erf => map!(erf),
        UnKind::LeakyRelu => map!(|x: f64| if x < 0.0 { p[0] * x } else { x }),
        _ => {
            let f = float_fn(k);
            broadcast::unary(&v, |a: T| T::from_f64(f(a.to_f64(), p)))
        }
    };
    Ok(Tensor::from_vec(x.shape().to_vec(), y))
}

fn via_i128<T: Int>(x: &Tensor, k: UnKind) -> Result<Tensor, OpError> {
    let v = view::<T>(x)?;
    let y = broadcast::unary(&v, |a: T| T::from_i128(int_fn(k, a.to_i128())));
    Ok(Tensor::from_vec(x.shape().to_vec(), y))
}

fn classify<T: Num>(x: &Tensor, k: UnKind, p: &P) -> Result<Tensor, OpError> {
    let v = view::<T>(x)?;
    let (neg, pos) = (p[0] != 0.0, p[1] != 0.0);
    let y: Vec<bool> = v
        .iter()
        .map(|a| {
            let a = a.to_f64();
            match k {
                UnKind::IsNaN => a.is_nan(),
                _ => (a == f64::INFINITY && pos) || (a == f64::NEG_INFINITY && neg),
            }
        })
        .collect();
    Ok(Tensor::from_bools(x.shape().to_vec(), y))
}

impl Op for Unary {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        expect_dtype(x, dtypes(self.kind), &format!("{}: input", self.name()))?;
        Ok(vec![ValueType::new(
            out_dtype(self.kind, x.dtype),
            x.shape.clone(),
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let (k, p) = (self.kind, &self.p);
        expect_dtype(
            &ValueType::of(x),
            dtypes(k),
            &format!("{}: input", self.name()),
        )?;
        let bad = || {
            Err(OpError::unsupported(format!(
                "{}: input of type {}",
                self.name(),
                x.dtype()
            )))
        };
        let d = x.dtype();
        let y = match k {
            UnKind::Not => {
                let v: Vec<bool> = x
                    .view_bool()
                    .map_err(|e| OpError::invalid(e.to_string()))?
                    .into_iter()
                    .map(|b| !b)
                    .collect();
                Ok(Tensor::from_bools(x.shape().to_vec(), v))
            }
            UnKind::IsNaN | UnKind::IsInf => dispatch_num!(d, classify(x, k, p), bad()),
            _ if d == DType::F32
                && let Some(fast) = Fast::new(k, p) =>
            {
                Ok(Tensor::from_vec(
                    x.shape().to_vec(),
                    fast.map(&view::<f32>(x)?),
                ))
            }
            _ if d.is_float() || k == UnKind::Shrink => dispatch_num!(d, via_f64(x, k, p), bad()),
            _ => dispatch_int!(d, via_i128(x, k), bad()),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let k = self.kind;
        // Integer Shrink (float math) stays on the CPU.
        if k == UnKind::Shrink && !x.dtype.is_float() {
            return None;
        }
        let classify = matches!(k, UnKind::IsNaN | UnKind::IsInf);
        // f64: the formulas unary_f64.comp computes at f64's precision.
        if x.dtype == DType::F64
            && !matches!(
                k,
                UnKind::Relu
                    | UnKind::Sqrt
                    | UnKind::Exp
                    | UnKind::Log
                    | UnKind::Neg
                    | UnKind::Abs
                    | UnKind::Reciprocal
                    | UnKind::Floor
                    | UnKind::Ceil
                    | UnKind::Round
                    | UnKind::Sign
                    | UnKind::Sigmoid
                    | UnKind::LeakyRelu
                    | UnKind::ThresholdedRelu
            )
        {
            return None;
        }
        if !dtypes(self.kind).contains(&x.dtype) {
            return None;
        }
        let n = u32::try_from(outputs.first()?.numel()).ok()?;
        let buffers = || unary::Buffers {
            x: BufRef::Input(0),
            y: BufRef::Output(0),
        };
        let groups = groups_1d(n as usize, 256);
        let op = k.code();
        let float = |v: unary::Variant| {
            let [alpha, beta, gamma] = self.p.map(|v| v as f32);
            Dispatch::new(
                v,
                buffers(),
                unary::Params {
                    n,
                    op,
                    alpha,
                    beta,
                    gamma,
                },
                groups,
            )
        };
        // The integer shader takes no attributes.
        let int = |v: unary_int::Variant| {
            Dispatch::new(
                v,
                unary_int::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                unary_int::Params { n, op },
                groups,
            )
        };
        let dispatch = match x.dtype {
            DType::F64 => Dispatch::new(
                unary_f64::Variant::Main,
                unary_f64::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                unary_f64::Params {
                    n,
                    op,
                    alpha: self.p[0] as f32,
                },
                groups,
            ),
            DType::F32 if classify => float(unary::Variant::ClsF32),
            DType::F16 if classify => float(unary::Variant::ClsF16),
            DType::F32 => float(unary::Variant::F32),
            DType::F16 => float(unary::Variant::F16),
            DType::Bool => int(unary_int::Variant::U8),
            d => int(by_dtype!(
                d,
                unary_int::Variant,
                [I32, I64, I8, U8, I16, U16, U32, U64]
            )?),
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 { vec![] } else { vec![dispatch] },
        })
    }
}

/// Clip's bounds differ per opset: attributes `min`/`max` (floats) up to opset 6, inputs 1 and
/// 2 (optional scalars of the input's type) from opset 11.
#[derive(Debug)]
pub struct Clip {
    attr_bounds: Option<(f32, f32)>,
}

impl Clip {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let attr_bounds = if spec.opset < 11 {
            Some((
                spec.attrs.float("min", f32::MIN)?,
                spec.attrs.float("max", f32::MAX)?,
            ))
        } else {
            None
        };
        Ok(Box::new(Clip { attr_bounds }))
    }
}

fn scalar_of<T: Num>(t: Option<&Tensor>, what: &str) -> Result<Option<T>, OpError> {
    let Some(t) = t else { return Ok(None) };
    if t.numel() != 1 {
        return Err(OpError::invalid(format!(
            "Clip: {what} must be a single value, has shape {:?}",
            t.shape()
        )));
    }
    Ok(Some(view::<T>(t)?[0]))
}

fn clip_typed<T: Num>(
    x: &Tensor,
    lo: Option<&Tensor>,
    hi: Option<&Tensor>,
    attr: Option<(f32, f32)>,
) -> Result<Tensor, OpError> {
    let (lo, hi) = match attr {
        Some((a, b)) => (Some(T::from_f64(a as f64)), Some(T::from_f64(b as f64))),
        None => (scalar_of::<T>(lo, "min")?, scalar_of::<T>(hi, "max")?),
    };
    let v = view::<T>(x)?;
    // As numpy.clip: max(x, lo) then min(., hi), so hi wins when lo > hi; NaN stays NaN.
    let y = broadcast::unary(&v, |a: T| {
        let mut r = a;
        if let Some(l) = lo
            && r < l
        {
            r = l;
        }
        if let Some(h) = hi
            && r > h
        {
            r = h;
        }
        r
    });
    Ok(Tensor::from_vec(x.shape().to_vec(), y))
}

impl Op for Clip {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        expect_dtype(x, &NUMERIC, "Clip: input")?;
        for i in 1..3 {
            if let Some(b) = crate::util::opt(inputs, i)
                && b.ty.dtype != x.dtype
            {
                return Err(OpError::invalid(format!(
                    "Clip: bound {i} is {} but the input is {}",
                    b.ty.dtype, x.dtype
                )));
            }
        }
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let (lo, hi) = if self.attr_bounds.is_some() {
            (None, None)
        } else {
            (crate::util::opt(inputs, 1), crate::util::opt(inputs, 2))
        };
        let a = self.attr_bounds;
        if x.dtype() == DType::F32 {
            let (lo, hi) = match a {
                Some((l, h)) => (Some(l), Some(h)),
                None => (scalar_of::<f32>(lo, "min")?, scalar_of::<f32>(hi, "max")?),
            };
            let fast = Fast::clip(lo.unwrap_or(f32::NEG_INFINITY), hi.unwrap_or(f32::INFINITY));
            let y = fast.map(&view::<f32>(x)?);
            return Ok(vec![Tensor::from_vec(x.shape().to_vec(), y)]);
        }
        let y = dispatch_num!(
            x.dtype(),
            clip_typed(x, lo, hi, a),
            Err(OpError::unsupported(format!(
                "Clip: input of type {}",
                x.dtype()
            )))
        )?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let variant = by_dtype!(
            x.dtype,
            clip::Variant,
            [F32, F16, I32, I64, I8, U8, I16, U16, U32, U64]
        )?;
        let n = outputs.first()?.numel();
        // Absent bounds are flagged off; their buffer slot repeats input 0 so every address
        // the shader is given is a valid one.
        let slot = |i: usize| {
            if self.attr_bounds.is_none() && inputs.get(i).copied().flatten().is_some() {
                (BufRef::Input(i), 1u32)
            } else {
                (BufRef::Input(0), 0u32)
            }
        };
        let ((blo, flo), (bhi, fhi)) = (slot(1), slot(2));
        let (alo, ahi) = self.attr_bounds.unwrap_or((0.0, 0.0));
        // Bits: 1 = min from input 1, 2 = max from input 2, 4 = both from the float params.
        let mode = if self.attr_bounds.is_some() {
            if !x.dtype.is_float() {
                return None;
            }
            4
        } else {
            flo | (fhi << 1)
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 {
                vec![]
            } else {
                vec![Dispatch::new(
                    variant,
                    clip::Buffers {
                        x: BufRef::Input(0),
                        lo: blo,
                        hi: bhi,
                        y: BufRef::Output(0),
                    },
                    clip::Params {
                        n: u32::try_from(n).ok()?,
                        mode,
                        flo: alo,
                        fhi: ahi,
                    },
                    groups_1d(n, 256),
                )]
            },
        })
    }
}
