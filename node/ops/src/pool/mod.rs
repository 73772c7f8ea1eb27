//! MaxPool (opsets 1, 8, 10, 11, 12, 22), AveragePool (1, 7, 10, 11, 19, 22) and the global
//! pools (GlobalAveragePool, GlobalMaxPool), for 1 to 3 spatial axes.
//!
//! Conventions where the spec leaves room, chosen to match onnxruntime:
//! - ceil_mode drops a last window that would start past the input and its leading padding;
//! - AveragePool with count_include_pad divides by the taps inside the input and its explicit
//!   padding, not the part of a ceil_mode window that overhangs both;
//! - a window that covers no input element gives the lowest finite value (max) or 0 (average).

mod cpu;
#[cfg(test)]
mod fast_tests;
mod gpu;
#[cfg(test)]
mod gpu_tests;
mod padded;
mod qlinear;
#[cfg(test)]
mod qlinear_tests;
#[cfg(test)]
mod tests;

use super::util::req;
use super::via_f32::ViaF32;
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::numeric::float::{FLOAT_DTYPES, Float};
use crate::tensor::{DType, Tensor};
use crate::window::geometry::{Axis, WindowAttrs};

pub fn register(r: &mut Registry) {
    // f16 / bf16 run through f32 on the CPU; MaxPool's 8-bit integers too, exactly.
    r.add("MaxPool", |s| {
        Ok(ViaF32::with(build_max(s)?, &[DType::U8, DType::I8]))
    });
    r.add("AveragePool", |s| Ok(ViaF32::half(build_avg(s)?)));
    r.add("LpPool", |s| Ok(ViaF32::half(build_lp(s)?)));
    r.add("GlobalAveragePool", |s| {
        Ok(ViaF32::half(build_global_avg(s)?))
    });
    r.add("GlobalMaxPool", |s| Ok(ViaF32::half(build_global_max(s)?)));
    qlinear::register(r);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Avg {
        count_include_pad: bool,
    },
    /// `(sum |x|^p)^(1/p)` over the taps inside the input.
    Lp {
        p: u32,
    },
}

impl PoolKind {
    fn op_name(self) -> &'static str {
        match self {
            PoolKind::Max => "MaxPool",
            PoolKind::Avg { .. } => "AveragePool",
            PoolKind::Lp { .. } => "LpPool",
        }
    }
}

fn flag(spec: &NodeSpec<'_>, name: &str) -> Result<bool, OpError> {
    match spec.attrs.int(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::invalid(format!(
            "{}: '{name}' must be 0 or 1, got {v}",
            spec.op_type
        ))),
    }
}

fn check_arity(spec: &NodeSpec<'_>, max_outputs: usize) -> Result<(), OpError> {
    if spec.num_inputs != 1 {
        return Err(OpError::invalid(format!(
            "{} takes 1 input, got {}",
            spec.op_type, spec.num_inputs
        )));
    }
    if !(1..=max_outputs).contains(&spec.num_outputs) {
        return Err(OpError::invalid(format!(
            "{} has at most {max_outputs} output(s), got {}",
            spec.op_type, spec.num_outputs
        )));
    }
    Ok(())
}

fn build_pool(spec: &NodeSpec<'_>, kind: PoolKind) -> Result<Box<dyn Op>, OpError> {
    // MaxPool's optional Indices output exists from opset 8.
    let max_outputs = if kind == PoolKind::Max && spec.opset >= 8 {
        2
    } else {
        1
    };
    check_arity(spec, max_outputs)?;
    let window = WindowAttrs::parse(spec.op_type, spec.attrs)?;
    if window.kernel_shape.is_none() {
        return Err(OpError::invalid(format!(
            "{}: the 'kernel_shape' attribute is required",
            spec.op_type
        )));
    }
    Ok(Box::new(Pool {
        kind,
        window,
        ceil_mode: flag(spec, "ceil_mode")?,
        // Only shapes how Indices are numbered; the pooled values do not depend on it.
        column_major_indices: flag(spec, "storage_order")?,
        indices: spec.num_outputs == 2,
    }))
}

fn build_max(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    build_pool(spec, PoolKind::Max)
}

fn build_avg(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let count_include_pad = flag(spec, "count_include_pad")?;
    build_pool(spec, PoolKind::Avg { count_include_pad })
}

fn build_lp(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    // Opset 1 wrote p as a float; later opsets as an int.
    let p = match spec.attrs.get("p") {
        Some(super::AttrValue::Float(f)) if f.fract() == 0.0 => *f as i64,
        Some(super::AttrValue::Float(f)) => {
            return Err(OpError::unsupported(format!(
                "LpPool with a fractional p = {f}"
            )));
        }
        _ => spec.attrs.int("p", 2)?,
    };
    let p = u32::try_from(p).ok().filter(|&p| p >= 1).ok_or_else(|| {
        OpError::invalid(format!("LpPool: p must be a positive integer, got {p}"))
    })?;
    build_pool(spec, PoolKind::Lp { p })
}

fn build_global_avg(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    check_arity(spec, 1)?;
    Ok(Box::new(GlobalPool { max: false }))
}

fn build_global_max(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    check_arity(spec, 1)?;
    Ok(Box::new(GlobalPool { max: true }))
}

/// MaxPool or AveragePool.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    kind: PoolKind,
    window: WindowAttrs,
    ceil_mode: bool,
    column_major_indices: bool,
    /// MaxPool's second output is wanted.
    indices: bool,
}

/// A pool resolved against an input shape.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolShape {
    pub n: usize,
    pub c: usize,
    pub axes: Vec<Axis>,
}

impl PoolShape {
    pub fn in_plane(&self) -> usize {
        Axis::input_volume(&self.axes)
    }
    pub fn out_plane(&self) -> usize {
        Axis::output_volume(&self.axes)
    }
    pub fn output_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.c];
        s.extend(self.axes.iter().map(|a| a.output));
        s
    }
    /// Padded in front to three axes that do nothing, as Conv does.
    pub fn axes3(&self) -> [Axis; 3] {
        Axis::pad_to_3(&self.axes)
    }
}

fn check_float(op: &str, dtype: DType) -> Result<(), OpError> {
    if FLOAT_DTYPES.contains(&dtype) {
        Ok(())
    } else {
        Err(OpError::unsupported(format!(
            "{op} on {dtype} (implemented: float, double)"
        )))
    }
}

impl Pool {
    fn name(&self) -> &'static str {
        self.kind.op_name()
    }

    fn shape(&self, x: &[usize]) -> Result<PoolShape, OpError> {
        let op = self.name();
        if x.len() < 3 {
            return Err(OpError::invalid(format!(
                "{op}: X must be N x C x spatial..., got shape {x:?}"
            )));
        }
        if x.len() > 5 {
            return Err(OpError::unsupported(format!(
                "{op} with {} spatial axes (1 to 3 are implemented)",
                x.len() - 2
            )));
        }
        let kernel = self.window.kernel_shape.as_deref().unwrap_or_default();
        let axes = self.window.resolve(op, &x[2..], kernel, self.ceil_mode)?;
        let s = PoolShape {
            n: x[0],
            c: x[1],
            axes,
        };
        crate::size::check_shape(&s.output_shape(), &format!("{op}'s output"))?;
        Ok(s)
    }

    fn run_typed<T: Float>(&self, s: &PoolShape, x: &Tensor) -> Result<Vec<Tensor>, OpError> {
        let xv = x
            .view::<T>()
            .map_err(|e| OpError::invalid(format!("{}: {e}", self.name())))?;
        let shape = s.output_shape();
        Ok(match self.kind {
            PoolKind::Max => {
                let (y, idx) = cpu::max_pool(s, &xv, self.indices, self.column_major_indices);
                let mut out = vec![Tensor::from_vec(shape.clone(), y)];
                if let Some(idx) = idx {
                    out.push(Tensor::from_vec(shape, idx));
                }
                out
            }
            PoolKind::Avg { count_include_pad } => {
                vec![Tensor::from_vec(
                    shape,
                    cpu::avg_pool(s, &xv, count_include_pad),
                )]
            }
            PoolKind::Lp { p } => vec![Tensor::from_vec(shape, cpu::lp_pool(s, &xv, p))],
        })
    }
}

impl Op for Pool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        check_float(self.name(), x.dtype)?;
        let shape = self.shape(&x.shape)?.output_shape();
        let mut out = vec![ValueType::new(x.dtype, shape.clone())];
        if self.indices {
            out.push(ValueType::new(DType::I64, shape));
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        check_float(self.name(), x.dtype())?;
        let s = self.shape(x.shape())?;
        match x.dtype() {
            DType::F32 => self.run_typed::<f32>(&s, x),
            _ => self.run_typed::<f64>(&s, x),
        }
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = super::util::opt(inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F16 | DType::U8 | DType::I8) {
            return None;
        }
        let indices = self.indices.then_some(self.column_major_indices);
        gpu::pool(&self.shape(&x.shape).ok()?, self.kind, indices, x.dtype)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // One operation per tap of each output window.
        let taps = self.window.kernel_shape.iter().flatten();
        let taps = taps.fold(1u64, |p, &k| p.saturating_mul(k as u64));
        outputs
            .first()
            .map_or(0, |o| (o.numel() as u64).saturating_mul(taps))
    }
}

/// GlobalAveragePool or GlobalMaxPool: one value per (batch, channel).
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalPool {
    max: bool,
}

impl GlobalPool {
    fn name(&self) -> &'static str {
        if self.max {
            "GlobalMaxPool"
        } else {
            "GlobalAveragePool"
        }
    }

    /// (planes, plane size, output shape).
    fn shape(&self, x: &[usize]) -> Result<(usize, usize, Vec<usize>), OpError> {
        if x.len() < 2 {
            return Err(OpError::invalid(format!(
                "{}: X must be N x C x spatial..., got shape {x:?}",
                self.name()
            )));
        }
        let plane: usize = x[2..].iter().product();
        if plane == 0 {
            return Err(OpError::invalid(format!(
                "{}: X has shape {x:?}, with no spatial elements to pool",
                self.name()
            )));
        }
        let mut out = x.to_vec();
        out[2..].fill(1);
        Ok((x[0] * x[1], plane, out))
    }
}

impl Op for GlobalPool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        check_float(self.name(), x.dtype)?;
        Ok(vec![ValueType::new(x.dtype, self.shape(&x.shape)?.2)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        check_float(self.name(), x.dtype())?;
        let (_, plane, shape) = self.shape(x.shape())?;
        let err = |e| OpError::invalid(format!("{}: {e}", self.name()));
        Ok(vec![match x.dtype() {
            DType::F32 => Tensor::from_vec(
                shape,
                cpu::global_pool(&x.view::<f32>().map_err(err)?, plane, self.max),
            ),
            _ => Tensor::from_vec(
                shape,
                cpu::global_pool(&x.view::<f64>().map_err(err)?, plane, self.max),
            ),
        }])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = super::util::opt(inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F16) {
            return None;
        }
        let (planes, plane, _) = self.shape(&x.shape).ok()?;
        gpu::global_pool(planes, plane, self.max, x.dtype == DType::F16)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        super::util::opt(inputs, 0).map_or(0, |x| x.numel() as u64)
    }
}
