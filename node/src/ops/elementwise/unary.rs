//! Relu, Sigmoid, Tanh.

use super::binary::view;
use super::broadcast;
use crate::ops::util::{expect_dtype, groups_1d, req};
use crate::ops::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use crate::tensor::{DType, Element, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnKind {
    Relu,
    Sigmoid,
    Tanh,
}

impl UnKind {
    fn name(self) -> &'static str {
        match self {
            UnKind::Relu => "Relu",
            UnKind::Sigmoid => "Sigmoid",
            UnKind::Tanh => "Tanh",
        }
    }

    fn dtypes(self) -> &'static [DType] {
        match self {
            // Signed integers joined Relu in opset 14.
            UnKind::Relu => &[
                DType::F32,
                DType::F64,
                DType::I8,
                DType::I16,
                DType::I32,
                DType::I64,
            ],
            UnKind::Sigmoid | UnKind::Tanh => &[DType::F32, DType::F64],
        }
    }

    fn shader(self) -> &'static str {
        match self {
            UnKind::Relu => "unary_relu",
            UnKind::Sigmoid => "unary_sigmoid",
            UnKind::Tanh => "unary_tanh",
        }
    }
}

/// The float math of these ops (and Softmax's), written once for f32 and f64.
pub trait Real: Element + Copy + PartialOrd + Default {
    const ONE: Self;
    fn exp(self) -> Self;
    fn tanh(self) -> Self;
    fn neg(self) -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn to_f64(self) -> f64;
    fn is_nan(self) -> bool;
    fn from_f64(v: f64) -> Self;
}

macro_rules! real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ONE: Self = 1.0;
            fn exp(self) -> Self { <$t>::exp(self) }
            fn tanh(self) -> Self { <$t>::tanh(self) }
            fn neg(self) -> Self { -self }
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn div(self, o: Self) -> Self { self / o }
            fn to_f64(self) -> f64 { self as f64 }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
            fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
real!(f32, f64);

/// `max(x, 0)`, keeping NaN as NaN.
fn relu<T: Copy + PartialOrd + Default>(x: T) -> T {
    if x < T::default() { T::default() } else { x }
}

/// `1 / (1 + e^-x)`, evaluated so that neither branch overflows: for x < 0, `e^x / (1 + e^x)`.
pub fn sigmoid<T: Real>(x: T) -> T {
    if x >= T::default() {
        T::ONE.div(T::ONE.add(x.neg().exp()))
    } else {
        let e = x.exp();
        e.div(T::ONE.add(e))
    }
}

#[derive(Debug)]
pub struct Unary {
    kind: UnKind,
}

impl Unary {
    pub fn build(_spec: &NodeSpec<'_>, kind: UnKind) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Unary { kind }))
    }

    fn run_float<T: Real>(&self, x: &Tensor) -> Result<Tensor, OpError> {
        let v = view::<T>(x)?;
        let y = match self.kind {
            UnKind::Relu => broadcast::unary(&v, relu::<T>),
            UnKind::Sigmoid => broadcast::unary(&v, sigmoid::<T>),
            UnKind::Tanh => broadcast::unary(&v, T::tanh),
        };
        Ok(Tensor::from_vec(x.shape().to_vec(), y))
    }

    fn run_int<T: Element + Copy + PartialOrd + Default>(
        &self,
        x: &Tensor,
    ) -> Result<Tensor, OpError> {
        let v = view::<T>(x)?;
        Ok(Tensor::from_vec(
            x.shape().to_vec(),
            broadcast::unary(&v, relu::<T>),
        ))
    }
}

impl Op for Unary {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        expect_dtype(
            x,
            self.kind.dtypes(),
            &format!("{}: input", self.kind.name()),
        )?;
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        expect_dtype(
            &ValueType::of(x),
            self.kind.dtypes(),
            &format!("{}: input", self.kind.name()),
        )?;
        let y = match x.dtype() {
            DType::F32 => self.run_float::<f32>(x),
            DType::F64 => self.run_float::<f64>(x),
            DType::I8 => self.run_int::<i8>(x),
            DType::I16 => self.run_int::<i16>(x),
            DType::I32 => self.run_int::<i32>(x),
            DType::I64 => self.run_int::<i64>(x),
            other => Err(OpError::unsupported(format!(
                "{}: input of type {other}",
                self.kind.name()
            ))),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        if x.dtype != DType::F32 {
            return None;
        }
        let n = outputs.first()?.numel();
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 {
                vec![]
            } else {
                vec![Dispatch {
                    shader: self.kind.shader(),
                    buffers: vec![BufRef::Input(0), BufRef::Output(0)],
                    params: vec![u32::try_from(n).ok()?],
                    groups: groups_1d(n, 256),
                }]
            },
        })
    }
}
