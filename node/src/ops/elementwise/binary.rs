//! Add, Sub, Mul, Div: numpy broadcasting (opset >= 7) and the older `broadcast`/`axis` form.

use super::broadcast;
use crate::ops::util::{broadcast_shapes, broadcast_strides, groups_1d, req};
use crate::ops::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use crate::tensor::{DType, Element, Tensor, numel};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinKind {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinKind {
    fn name(self) -> &'static str {
        match self {
            BinKind::Add => "Add",
            BinKind::Sub => "Sub",
            BinKind::Mul => "Mul",
            BinKind::Div => "Div",
        }
    }

    /// Shader for this op on this dtype (`shaders/binary_<op>[_<int type>].comp`).
    fn shader(self, dtype: DType) -> Option<&'static str> {
        Some(match (self, dtype) {
            (BinKind::Add, DType::F32) => "binary_add",
            (BinKind::Sub, DType::F32) => "binary_sub",
            (BinKind::Mul, DType::F32) => "binary_mul",
            (BinKind::Div, DType::F32) => "binary_div",
            (BinKind::Add, DType::I32) => "binary_add_i32",
            (BinKind::Sub, DType::I32) => "binary_sub_i32",
            (BinKind::Mul, DType::I32) => "binary_mul_i32",
            (BinKind::Div, DType::I32) => "binary_div_i32",
            (BinKind::Add, DType::I64) => "binary_add_i64",
            (BinKind::Sub, DType::I64) => "binary_sub_i64",
            (BinKind::Mul, DType::I64) => "binary_mul_i64",
            (BinKind::Div, DType::I64) => "binary_div_i64",
            _ => return None,
        })
    }
}

/// Arithmetic as ONNX runtimes do it: IEEE for floats; for integers two's-complement
/// wrap-around, and C's truncating division, where dividing by zero (undefined in ONNX) gives 0
/// instead of a trap.
pub trait Arith: Element + Copy {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
}

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn mul(self, o: Self) -> Self { self * o }
            fn div(self, o: Self) -> Self { self / o }
        }
    )*};
}
arith_float!(f32, f64);

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn div(self, o: Self) -> Self {
                // wrapping_div only overflows for MIN / -1, which it wraps to MIN.
                if o == 0 { 0 } else { self.wrapping_div(o) }
            }
        }
    )*};
}
arith_int!(i8, i16, i32, i64, u8, u16, u32, u64);

const DTYPES: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

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
    pub fn build(spec: &NodeSpec<'_>, kind: BinKind) -> Result<Box<dyn Op>, OpError> {
        let legacy = if spec.opset < 7 {
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
            Some(ax) => crate::ops::util::axis(ax, a.len())?,
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

    fn run_typed<T: Arith>(
        &self,
        a: &Tensor,
        b: &Tensor,
        b_shape: &[usize],
        out: &[usize],
    ) -> Result<Tensor, OpError> {
        let (x, y) = (view::<T>(a)?, view::<T>(b)?);
        let f: fn(T, T) -> T = match self.kind {
            BinKind::Add => T::add,
            BinKind::Sub => T::sub,
            BinKind::Mul => T::mul,
            BinKind::Div => T::div,
        };
        let v = broadcast::binary(&x, a.shape(), &y, b_shape, out, f);
        Ok(Tensor::from_vec(out.to_vec(), v))
    }
}

pub fn view<T: Element>(t: &Tensor) -> Result<std::borrow::Cow<'_, [T]>, OpError> {
    t.view::<T>().map_err(|e| OpError::invalid(e.to_string()))
}

impl Op for Binary {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let name = self.kind.name();
        let (a, b) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty);
        if a.dtype != b.dtype {
            return Err(OpError::invalid(format!(
                "{name}: input types differ: {} and {}",
                a.dtype, b.dtype
            )));
        }
        crate::ops::util::expect_dtype(a, &DTYPES, &format!("{name}: input"))?;
        let b_shape = self.b_shape(&a.shape, &b.shape)?;
        let out = broadcast_shapes(&a.shape, &b_shape).map_err(|_| {
            OpError::invalid(format!(
                "{name}: shapes {:?} and {:?} cannot be broadcast together",
                a.shape, b.shape
            ))
        })?;
        Ok(vec![ValueType::new(a.dtype, out)])
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
        let y = match a.dtype() {
            DType::F32 => self.run_typed::<f32>(a, b, &bs, out),
            DType::F64 => self.run_typed::<f64>(a, b, &bs, out),
            DType::I8 => self.run_typed::<i8>(a, b, &bs, out),
            DType::I16 => self.run_typed::<i16>(a, b, &bs, out),
            DType::I32 => self.run_typed::<i32>(a, b, &bs, out),
            DType::I64 => self.run_typed::<i64>(a, b, &bs, out),
            DType::U8 => self.run_typed::<u8>(a, b, &bs, out),
            DType::U16 => self.run_typed::<u16>(a, b, &bs, out),
            DType::U32 => self.run_typed::<u32>(a, b, &bs, out),
            DType::U64 => self.run_typed::<u64>(a, b, &bs, out),
            other => Err(OpError::unsupported(format!(
                "{}: input of type {other}",
                self.kind.name()
            ))),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let (a, b) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?);
        let out = outputs.first()?;
        let shader = self.kind.shader(a.dtype)?;
        let b_shape = self.b_shape(&a.shape, &b.shape).ok()?;
        let params = binary_params(&a.shape, &b_shape, &out.shape)?;
        let n = out.numel();
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 {
                vec![]
            } else {
                vec![Dispatch {
                    shader,
                    buffers: vec![BufRef::Input(0), BufRef::Input(1), BufRef::Output(0)],
                    params,
                    groups: groups_1d(n, 256),
                }]
            },
        })
    }
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

/// Push-constant words of the binary shaders: mode, n, then the collapsed output dims padded at
/// the front with 1s to rank 6, then A's and B's element strides (0 on broadcast axes). None
/// when the collapsed rank or a size does not fit.
pub fn binary_params(a: &[usize], b: &[usize], out: &[usize]) -> Option<Vec<u32>> {
    let n = numel(out);
    let word = |v: usize| u32::try_from(v).ok();
    let mut p = vec![0u32; 2 + 3 * GPU_RANK];
    p[1] = word(n)?;
    let (na, nb) = (numel(a), numel(b));
    p[0] = if na == n && nb == n {
        mode::SAME
    } else if na == n && nb == 1 {
        mode::B_SCALAR
    } else if na == 1 && nb == n {
        mode::A_SCALAR
    } else {
        mode::STRIDED
    };
    if p[0] == mode::STRIDED {
        let lay = broadcast::collapse(out, &[broadcast_strides(a, out), broadcast_strides(b, out)]);
        let r = lay.dims.len();
        if r > GPU_RANK {
            return None;
        }
        let pad = GPU_RANK - r;
        for i in 0..GPU_RANK {
            p[2 + i] = if i < pad { 1 } else { word(lay.dims[i - pad])? };
            if i >= pad {
                p[2 + GPU_RANK + i] = word(lay.strides[0][i - pad])?;
                p[2 + 2 * GPU_RANK + i] = word(lay.strides[1][i - pad])?;
            }
        }
    }
    Some(p)
}
