//! The two-input elementwise ops with numpy broadcasting (opset >= 7) and the older
//! `broadcast`/`axis` form: arithmetic (Add Sub Mul Div Mod Pow PRelu), bitwise (BitShift,
//! BitwiseAnd/Or/Xor), logic on bools (And Or Xor) and comparisons (bool output).
//!
//! On the GPU every kind runs through `shaders/binary.comp` (one pipeline per element type, the
//! op chosen by a push-constant code, as in unary.rs); comparisons through its `cmp_*` variants,
//! which write bools.

use super::broadcast;
use crate::numeric::num::{INTS, Int, NUMERIC, Num, dispatch_int, dispatch_num};
use crate::tensor::{DType, Element, Tensor, numel};
use crate::util::{broadcast_shapes, broadcast_strides, expect_dtype, groups_1d, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use vkml_shaders::{binary, pow};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinKind {
    Add,
    Sub,
    Mul,
    Div,
    /// `fmod` attribute: C's fmod (true) or numpy.mod (false).
    Mod(bool),
    Pow,
    PRelu,
    /// Left (true) or right.
    BitShift(bool),
    BitAnd,
    BitOr,
    BitXor,
    And,
    Or,
    Xor,
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl BinKind {
    pub fn from_op(op: &str, spec: &NodeSpec<'_>) -> Result<Option<BinKind>, OpError> {
        Ok(Some(match op {
            "Add" => BinKind::Add,
            "Sub" => BinKind::Sub,
            "Mul" => BinKind::Mul,
            "Div" => BinKind::Div,
            "Mod" => BinKind::Mod(spec.attrs.int("fmod", 0)? != 0),
            "Pow" => BinKind::Pow,
            "PRelu" => BinKind::PRelu,
            "BitShift" => match spec.attrs.string_opt("direction")? {
                Some("LEFT") => BinKind::BitShift(true),
                Some("RIGHT") => BinKind::BitShift(false),
                other => {
                    return Err(OpError::invalid(format!(
                        "BitShift: direction must be LEFT or RIGHT, found {other:?}"
                    )));
                }
            },
            "BitwiseAnd" => BinKind::BitAnd,
            "BitwiseOr" => BinKind::BitOr,
            "BitwiseXor" => BinKind::BitXor,
            "And" => BinKind::And,
            "Or" => BinKind::Or,
            "Xor" => BinKind::Xor,
            "Equal" => BinKind::Equal,
            "Less" => BinKind::Less,
            "LessOrEqual" => BinKind::LessOrEqual,
            "Greater" => BinKind::Greater,
            "GreaterOrEqual" => BinKind::GreaterOrEqual,
            _ => return Ok(None),
        }))
    }

    fn name(self) -> &'static str {
        match self {
            BinKind::Add => "Add",
            BinKind::Sub => "Sub",
            BinKind::Mul => "Mul",
            BinKind::Div => "Div",
            BinKind::Mod(_) => "Mod",
            BinKind::Pow => "Pow",
            BinKind::PRelu => "PRelu",
            BinKind::BitShift(_) => "BitShift",
            BinKind::BitAnd => "BitwiseAnd",
            BinKind::BitOr => "BitwiseOr",
            BinKind::BitXor => "BitwiseXor",
            BinKind::And => "And",
            BinKind::Or => "Or",
            BinKind::Xor => "Xor",
            BinKind::Equal => "Equal",
            BinKind::Less => "Less",
            BinKind::LessOrEqual => "LessOrEqual",
            BinKind::Greater => "Greater",
            BinKind::GreaterOrEqual => "GreaterOrEqual",
        }
    }

    fn is_compare(self) -> bool {
        matches!(
            self,
            BinKind::Equal
                | BinKind::Less
                | BinKind::LessOrEqual
                | BinKind::Greater
                | BinKind::GreaterOrEqual
        )
    }

    fn dtypes(self) -> &'static [DType] {
        const EQUAL: [DType; 14] = [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I8,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::U8,
            DType::U16,
            DType::U32,
            DType::U64,
            DType::Bool,
            DType::String,
        ];
        match self {
            BinKind::BitShift(_) => &[DType::U8, DType::U16, DType::U32, DType::U64],
            BinKind::BitAnd | BinKind::BitOr | BinKind::BitXor => &INTS,
            BinKind::And | BinKind::Or | BinKind::Xor => &[DType::Bool],
            BinKind::Equal => &EQUAL,
            _ => &NUMERIC,
        }
    }

    /// binary.comp's op code: an arithmetic one, or a comparison's (the `cmp_*` variants).
    fn code(self) -> u32 {
        use vkml_shaders::op::{Binary as B, Compare as C};
        match self {
            BinKind::Add => B::Add.code(),
            BinKind::Sub => B::Sub.code(),
            BinKind::Mul => B::Mul.code(),
            BinKind::Div => B::Div.code(),
            BinKind::Mod(false) => B::Mod.code(),
            BinKind::Mod(true) => B::Fmod.code(),
            BinKind::Pow => u32::MAX, // pow.comp takes no op code
            BinKind::PRelu => B::PRelu.code(),
            BinKind::BitShift(true) => B::Shl.code(),
            BinKind::BitShift(false) => B::Shr.code(),
            BinKind::BitAnd | BinKind::And => B::And.code(),
            BinKind::BitOr | BinKind::Or => B::Or.code(),
            BinKind::BitXor | BinKind::Xor => B::Xor.code(),
            BinKind::Equal => C::Eq.code(),
            BinKind::Less => C::Lt.code(),
            BinKind::LessOrEqual => C::Le.code(),
            BinKind::Greater => C::Gt.code(),
            BinKind::GreaterOrEqual => C::Ge.code(),
        }
    }
}

/// The binary.comp variant for an element type: an arithmetic one, or (`compare`) one of the
/// `cmp_*` ones, which write bools. Bools run as u8.
pub fn variant_for(dtype: DType, compare: bool) -> Option<binary::Variant> {
    use binary::Variant as V;
    let dtype = if dtype == DType::Bool {
        DType::U8
    } else {
        dtype
    };
    if compare {
        Some(match dtype {
            DType::F32 => V::CmpF32,
            DType::F16 => V::CmpF16,
            DType::F64 => V::CmpF64,
            DType::I32 => V::CmpI32,
            DType::I64 => V::CmpI64,
            DType::I8 => V::CmpI8,
            DType::U8 => V::CmpU8,
            DType::I16 => V::CmpI16,
            DType::U16 => V::CmpU16,
            DType::U32 => V::CmpU32,
            DType::U64 => V::CmpU64,
            _ => return None,
        })
    } else {
        by_dtype!(
            dtype,
            binary::Variant,
            [F32, F16, F64, I32, I64, I8, U8, I16, U16, U32, U64]
        )
    }
}

/// Up to opset 6 these ops broadcast only when asked (`broadcast=1`), and then B's shape is a
/// contiguous run of A's, starting at `axis` (default: aligned to the right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Legacy {
    broadcast: bool,
    axis: Option<i64>,
}

#[derive(Debug)]
pub struct Binary {
    kind: BinKind,
    legacy: Option<Legacy>,
}

impl Binary {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let kind = BinKind::from_op(spec.op_type, spec)?
            .ok_or_else(|| OpError::unsupported(format!("op {}", spec.op_type)))?;
        // Opset 7 brought numpy broadcasting to the ops that existed before it.
        let legacy = if spec.opset < 7 && kind != BinKind::PRelu {
            Some(Legacy {
                broadcast: spec.attrs.int("broadcast", 0)? != 0,
                axis: spec.attrs.int_opt("axis")?,
            })
        } else {
            None
        };
        Ok(Box::new(Binary { kind, legacy }))
    }

    /// B's shape as numpy broadcasting should see it, after the legacy rules.
    fn b_shape(&self, a: &[usize], b: &[usize]) -> Result<Vec<usize>, OpError> {
        let name = self.kind.name();
        let Some(legacy) = self.legacy else {
            return Ok(b.to_vec());
        };
        if !legacy.broadcast {
            if a != b {
                return Err(OpError::invalid(format!(
                    "{name}: shapes {a:?} and {b:?} differ and broadcast=0 (opset < 7)"
                )));
            }
            return Ok(b.to_vec());
        }
        if b.len() > a.len() {
            return Err(OpError::invalid(format!(
                "{name}: B {b:?} has a higher rank than A {a:?} (legacy broadcast)"
            )));
        }
        let axis = match legacy.axis {
            None => a.len() - b.len(),
            Some(ax) => crate::util::axis(ax, a.len())?,
        };
        if axis + b.len() > a.len() {
            return Err(OpError::invalid(format!(
                "{name}: B {b:?} does not fit into A {a:?} at axis {axis} (legacy broadcast)"
            )));
        }
        let mut shape = vec![1; a.len()];
        shape[axis..axis + b.len()].copy_from_slice(b);
        for (i, (&x, &y)) in a.iter().zip(&shape).enumerate() {
            if y != 1 && x != y {
                return Err(OpError::invalid(format!(
                    "{name}: B {b:?} does not match A {a:?} at axis {i} (legacy broadcast)"
                )));
            }
        }
        Ok(shape)
    }
}

pub fn view<T: Element>(t: &Tensor) -> Result<std::borrow::Cow<'_, [T]>, OpError> {
    t.view::<T>().map_err(|e| OpError::invalid(e.to_string()))
}

/// Shapes of one binary evaluation: A's, B's (after legacy placement) and the output's.
struct Shapes<'a> {
    a: &'a [usize],
    b: &'a [usize],
    out: &'a [usize],
}

fn arith<T: Num>(k: BinKind, a: &Tensor, b: &Tensor, s: &Shapes<'_>) -> Result<Tensor, OpError> {
    let (x, y) = (view::<T>(a)?, view::<T>(b)?);
    let v = match k {
        BinKind::Add => broadcast::binary(&x, s.a, &y, s.b, s.out, T::add),
        BinKind::Sub => broadcast::binary(&x, s.a, &y, s.b, s.out, T::sub),
        BinKind::Mul => broadcast::binary(&x, s.a, &y, s.b, s.out, T::mul),
        BinKind::Div => broadcast::binary(&x, s.a, &y, s.b, s.out, T::div),
        BinKind::Mod(fmod) => {
            broadcast::binary(&x, s.a, &y, s.b, s.out, |p: T, q: T| p.modulo(q, fmod))
        }
        BinKind::PRelu => broadcast::binary(&x, s.a, &y, s.b, s.out, |p: T, q: T| {
            if p < T::default() { p.mul(q) } else { p }
        }),
        _ => return Err(OpError::invalid(format!("{}: not arithmetic", k.name()))),
    };
    Ok(Tensor::from_vec(s.out.to_vec(), v))
}

fn bits<T: Int>(k: BinKind, a: &Tensor, b: &Tensor, s: &Shapes<'_>) -> Result<Tensor, OpError> {
    let (x, y) = (view::<T>(a)?, view::<T>(b)?);
    let f: fn(T, T) -> T = match k {
        BinKind::BitShift(true) => T::shl,
        BinKind::BitShift(false) => T::shr,
        BinKind::BitAnd => T::and,
        BinKind::BitOr => T::or,
        _ => T::xor,
    };
    let v = broadcast::binary(&x, s.a, &y, s.b, s.out, f);
    Ok(Tensor::from_vec(s.out.to_vec(), v))
}

/// Integer `x^e` for a non-negative integral exponent, wrapping like repeated multiplication.
fn int_pow<T: Num>(x: T, mut e: u64) -> T {
    let (mut base, mut acc) = (x, T::from_f64(1.0));
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.mul(base);
        }
        base = base.mul(base);
        e >>= 1;
    }
    acc
}

/// Pow with any numeric exponent type: floats compute in f64 and round once; integer bases
/// raised to a non-negative integral exponent are exact (wrapping), otherwise the f64 result
/// is truncated toward zero, as onnxruntime's `static_cast<T>(std::pow(x, e))`.
fn pow<T: Num>(a: &Tensor, b: &Tensor, s: &Shapes<'_>) -> Result<Tensor, OpError> {
    let x = view::<T>(a)?;
    let e = b
        .to_f64_vec()
        .map_err(|e| OpError::invalid(e.to_string()))?;
    let v = broadcast::binary(&x, s.a, &e, s.b, s.out, |p: T, q: f64| {
        if !T::IS_FLOAT && q >= 0.0 && q.fract() == 0.0 && q < u64::MAX as f64 {
            int_pow(p, q as u64)
        } else {
            T::from_f64(p.to_f64().powf(q))
        }
    });
    Ok(Tensor::from_vec(s.out.to_vec(), v))
}

fn compare<T: Num>(k: BinKind, a: &Tensor, b: &Tensor, s: &Shapes<'_>) -> Result<Tensor, OpError> {
    let (x, y) = (view::<T>(a)?, view::<T>(b)?);
    let f: fn(T, T) -> u8 = match k {
        BinKind::Equal => |p, q| u8::from(p == q),
        BinKind::Less => |p, q| u8::from(p < q),
        BinKind::LessOrEqual => |p, q| u8::from(p <= q),
        BinKind::Greater => |p, q| u8::from(p > q),
        _ => |p, q| u8::from(p >= q),
    };
    bool_tensor(s.out, broadcast::binary(&x, s.a, &y, s.b, s.out, f))
}

fn bool_tensor(shape: &[usize], bytes: Vec<u8>) -> Result<Tensor, OpError> {
    Tensor::from_bytes(DType::Bool, shape.to_vec(), bytes.into())
        .map_err(|e| OpError::invalid(e.to_string()))
}

/// Bools as 0/1 bytes (any non-zero byte is true).
fn bool_bytes(t: &Tensor) -> Result<Vec<u8>, OpError> {
    Ok(t.view_bool()
        .map_err(|e| OpError::invalid(e.to_string()))?
        .into_iter()
        .map(u8::from)
        .collect())
}

fn logic(k: BinKind, a: &Tensor, b: &Tensor, s: &Shapes<'_>) -> Result<Tensor, OpError> {
    let (x, y) = (bool_bytes(a)?, bool_bytes(b)?);
    let f: fn(u8, u8) -> u8 = match k {
        BinKind::And => |p, q| p & q,
        BinKind::Or => |p, q| p | q,
        BinKind::Xor => |p, q| p ^ q,
        _ => |p, q| u8::from(p == q), // Equal on bools
    };
    bool_tensor(s.out, broadcast::binary(&x, s.a, &y, s.b, s.out, f))
}

/// Equal on strings (CPU only: string tensors never reach a GPU).
fn strings_equal(a: &Tensor, b: &Tensor, s: &Shapes<'_>) -> Result<Tensor, OpError> {
    let bad = |e: crate::TensorError| OpError::invalid(e.to_string());
    let (x, y) = (a.strings().map_err(bad)?, b.strings().map_err(bad)?);
    bool_tensor(
        s.out,
        broadcast::binary(&x, s.a, &y, s.b, s.out, |p, q| u8::from(p == q)),
    )
}

impl Op for Binary {
    fn strings(&self) -> bool {
        self.kind == BinKind::Equal
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let k = self.kind;
        let name = k.name();
        let (a, b) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty);
        if k == BinKind::Pow {
            expect_dtype(a, &NUMERIC, "Pow: base")?;
            expect_dtype(b, &NUMERIC, "Pow: exponent")?;
        } else {
            if a.dtype != b.dtype {
                return Err(OpError::invalid(format!(
                    "{name}: input types differ: {} and {}",
                    a.dtype, b.dtype
                )));
            }
            expect_dtype(a, k.dtypes(), &format!("{name}: input"))?;
        }
        let b_shape = self.b_shape(&a.shape, &b.shape)?;
        let out = broadcast_shapes(&a.shape, &b_shape).map_err(|_| {
            OpError::invalid(format!(
                "{name}: shapes {:?} and {:?} cannot be broadcast together",
                a.shape, b.shape
            ))
        })?;
        // PRelu broadcasts the slope to X only (unidirectional).
        if k == BinKind::PRelu && out != a.shape {
            return Err(OpError::invalid(format!(
                "PRelu: slope {:?} does not broadcast to X {:?}",
                b.shape, a.shape
            )));
        }
        let dtype = if k.is_compare() { DType::Bool } else { a.dtype };
        Ok(vec![ValueType::new(dtype, out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
        let out = &outputs
            .first()
            .ok_or_else(|| OpError::invalid("no output type given"))?
            .shape;
        let bs = self.b_shape(a.shape(), b.shape())?;
        let s = Shapes {
            a: a.shape(),
            b: &bs,
            out,
        };
        let k = self.kind;
        let d = a.dtype();
        let bad = || {
            Err(OpError::unsupported(format!(
                "{}: input of type {d}",
                k.name()
            )))
        };
        let y = match k {
            BinKind::Pow => dispatch_num!(d, pow(a, b, &s), bad()),
            BinKind::And | BinKind::Or | BinKind::Xor => logic(k, a, b, &s),
            BinKind::Equal if d == DType::Bool => logic(k, a, b, &s),
            BinKind::Equal if d == DType::String => strings_equal(a, b, &s),
            _ if k.is_compare() => dispatch_num!(d, compare(k, a, b, &s), bad()),
            BinKind::BitShift(_) | BinKind::BitAnd | BinKind::BitOr | BinKind::BitXor => {
                dispatch_int!(d, bits(k, a, b, &s), bad())
            }
            _ => dispatch_num!(d, arith(k, a, b, &s), bad()),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let (a, b) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?);
        if a.dtype == DType::String {
            return None;
        }
        let out = outputs.first()?;
        let k = self.kind;
        let b_shape = self.b_shape(&a.shape, &b.shape).ok()?;
        // Types from elsewhere (a cluster fragment) may disagree with the rule: no kernel
        // rather than strides for a shape the inputs do not broadcast to.
        if broadcast_shapes(&a.shape, &b_shape).ok()? != out.shape {
            return None;
        }
        if k == BinKind::Pow {
            return pow_kernel(a, b, &b_shape, &out.shape);
        }
        if a.dtype != b.dtype {
            return None;
        }
        if !k.dtypes().contains(&a.dtype) {
            return None;
        }
        let variant = variant_for(a.dtype, k.is_compare())?;
        binary_kernel(variant, k.code(), 0.0, &a.shape, &b_shape, &out.shape)
    }
}

/// pow.comp's variant for a base and an exponent type, `pow_<base>_<exponent>`.
fn pow_variant(base: DType, exponent: DType) -> Option<pow::Variant> {
    use DType::{F16, F32, I32, I64, U32, U64};
    use pow::Variant as V;
    Some(match (base, exponent) {
        (F32, F32) => V::F32F32,
        (F32, F16) => V::F32F16,
        (F32, I32) => V::F32I32,
        (F32, I64) => V::F32I64,
        (F32, U32) => V::F32U32,
        (F32, U64) => V::F32U64,
        (F16, F16) => V::F16F16,
        (F16, F32) => V::F16F32,
        (F16, I32) => V::F16I32,
        (F16, I64) => V::F16I64,
        (I32, I32) => V::I32I32,
        (I32, I64) => V::I32I64,
        (I32, F32) => V::I32F32,
        (I64, I64) => V::I64I64,
        (I64, I32) => V::I64I32,
        (I64, F32) => V::I64F32,
        _ => return None,
    })
}

fn pow_kernel(a: &ValueType, b: &ValueType, b_shape: &[usize], out: &[usize]) -> Option<GpuKernel> {
    let variant = pow_variant(a.dtype, b.dtype)?;
    let w = binary_params(&a.shape, b_shape, out)?;
    let n = numel(out);
    Some(GpuKernel {
        scratch: vec![],
        dispatches: if n == 0 {
            vec![]
        } else {
            vec![Dispatch::new(
                variant,
                pow::Buffers {
                    a: BufRef::Input(0),
                    b: BufRef::Input(1),
                    y: BufRef::Output(0),
                },
                pow::Params {
                    mode: w.mode,
                    n: w.n,
                    dims: w.dims,
                    sa: w.sa,
                    sb: w.sb,
                },
                groups_1d(n, 256),
            )]
        },
    })
}

/// One dispatch of a binary.comp variant over inputs 0 and 1.
pub fn binary_kernel(
    variant: binary::Variant,
    op: u32,
    alpha: f32,
    a: &[usize],
    b: &[usize],
    out: &[usize],
) -> Option<GpuKernel> {
    let d = binary_dispatch(
        variant,
        [BufRef::Input(0), BufRef::Input(1)],
        op,
        alpha,
        a,
        b,
        out,
    )?;
    Some(GpuKernel {
        scratch: vec![],
        dispatches: d.into_iter().collect(),
    })
}

/// A binary.comp dispatch reading `ins` into output 0; `None` inside when there is nothing to
/// compute (an empty output).
pub fn binary_dispatch(
    variant: binary::Variant,
    ins: [BufRef; 2],
    op: u32,
    alpha: f32,
    a: &[usize],
    b: &[usize],
    out: &[usize],
) -> Option<Option<Dispatch>> {
    let w = binary_params(a, b, out)?;
    let n = numel(out);
    if n == 0 {
        return Some(None);
    }
    let [a, b] = ins;
    Some(Some(Dispatch::new(
        variant,
        binary::Buffers {
            a,
            b,
            y: BufRef::Output(0),
        },
        binary::Params {
            mode: w.mode,
            n: w.n,
            dims: w.dims,
            sa: w.sa,
            sb: w.sb,
            op,
            alpha,
        },
        groups_1d(n, 256),
    )))
}

/// Highest iteration rank the binary shaders take after collapsing.
pub const GPU_RANK: usize = 6;

/// How the binary shaders walk their operands (`mode`, the first parameter).
pub mod mode {
    /// Both operands have the output's shape: `y[i] = a[i] op b[i]`.
    pub const SAME: u32 = 0;
    /// B is one element: `y[i] = a[i] op b[0]`.
    pub const B_SCALAR: u32 = 1;
    /// A is one element: `y[i] = a[0] op b[i]`.
    pub const A_SCALAR: u32 = 2;
    /// General broadcast through the dims and strides that follow.
    pub const STRIDED: u32 = 3;
}

/// How the binary shaders (binary.comp, pow.comp) walk their operands: the first parameters
/// of both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Walk {
    /// One of [`mode`].
    pub mode: u32,
    /// Output elements.
    pub n: u32,
    /// The collapsed output dims, padded at the front with 1s to rank 6 (strided mode only).
    pub dims: [u32; GPU_RANK],
    /// A's and B's element strides over `dims` (0 on broadcast axes).
    pub sa: [u32; GPU_RANK],
    pub sb: [u32; GPU_RANK],
}

/// The walk of `out` from `a` and `b`; None when the collapsed rank or a size does not fit.
pub fn binary_params(a: &[usize], b: &[usize], out: &[usize]) -> Option<Walk> {
    let n = numel(out);
    let word = |v: usize| u32::try_from(v).ok();
    let mut w = Walk {
        n: word(n)?,
        ..Walk::default()
    };
    let (na, nb) = (numel(a), numel(b));
    w.mode = if na == n && nb == n {
        mode::SAME
    } else if na == n && nb == 1 {
        mode::B_SCALAR
    } else if na == 1 && nb == n {
        mode::A_SCALAR
    } else {
        mode::STRIDED
    };
    if w.mode == mode::STRIDED {
        let lay = broadcast::collapse(out, &[broadcast_strides(a, out), broadcast_strides(b, out)]);
        let r = lay.dims.len();
        if r > GPU_RANK {
            return None;
        }
        let pad = GPU_RANK - r;
        for i in 0..GPU_RANK {
            w.dims[i] = if i < pad { 1 } else { word(lay.dims[i - pad])? };
            if i >= pad {
                w.sa[i] = word(lay.strides[0][i - pad])?;
                w.sb[i] = word(lay.strides[1][i - pad])?;
            }
        }
    }
    Some(w)
}
