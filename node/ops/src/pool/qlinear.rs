//! com.microsoft QLinearGlobalAveragePool and QLinearAveragePool, ONNX Runtime's pools of
//! 8-bit quantized values (X, x_scale, x_zero_point, y_scale, y_zero_point; one scale and zero
//! point each, zero points optional; NCHW, `channels_last` 0). They are what ONNX Runtime's
//! quantizer writes in its QOperator format, and what graph/fuse_qdq.rs makes of a
//! GlobalAveragePool between DequantizeLinear and QuantizeLinear.
//!
//! The arithmetic is ONNX Runtime's own, so results agree with its kernels:
//! - global: the plane's integers summed, then requantized once as MLAS does,
//!   `round_even((sum - x_zero * n) * (x_scale / (y_scale * n))) + y_zero`, in f32;
//! - windowed: the window's dequantized values (`x_scale * (x - x_zero)`, f32) averaged as
//!   AveragePool averages, then quantized as QuantizeLinear does.
//!
//! GPU: shaders/qlinear_pool_global.comp (a workgroup per plane) and shaders/qlinear_pool.comp
//! (a thread per output, windows without dilations).

use super::{GlobalPool, Pool, PoolKind, cpu, flag};
use crate::tensor::{DType, Tensor};
use crate::util::{groups_1d, opt, req};
use crate::window::geometry::Axis;
use crate::window::geometry::WindowAttrs;
use crate::{
    BufRef, Dispatch, GpuKernel, InferInput, MS_DOMAIN, NodeSpec, Op, OpError, Registry, ValueType,
};
use vkml_shaders::{op, qlinear_pool, qlinear_pool_global};

pub fn register(r: &mut Registry) {
    r.add_in(MS_DOMAIN, "QLinearGlobalAveragePool", |s| {
        check(s)?;
        Ok(Box::new(QAvgPool { window: None }))
    });
    r.add_in(MS_DOMAIN, "QLinearAveragePool", |s| {
        check(s)?;
        let window = WindowAttrs::parse(s.op_type, s.attrs)?;
        if window.kernel_shape.is_none() {
            return Err(OpError::invalid(
                "QLinearAveragePool: the 'kernel_shape' attribute is required",
            ));
        }
        let pool = Pool {
            kind: PoolKind::Avg {
                count_include_pad: flag(s, "count_include_pad")?,
            },
            window,
            ceil_mode: flag(s, "ceil_mode")?,
            column_major_indices: false,
            indices: false,
        };
        Ok(Box::new(QAvgPool { window: Some(pool) }))
    });
}

fn check(s: &NodeSpec<'_>) -> Result<(), OpError> {
    if !(4..=5).contains(&s.num_inputs) || s.num_outputs != 1 {
        return Err(OpError::invalid(format!(
            "{} takes 4 or 5 inputs (X, x_scale, x_zero_point, y_scale, optional \
             y_zero_point) and gives 1 output, got {} and {}",
            s.op_type, s.num_inputs, s.num_outputs
        )));
    }
    if flag(s, "channels_last")? {
        return Err(OpError::unsupported(format!(
            "{} with channels_last (NCHW is implemented)",
            s.op_type
        )));
    }
    Ok(())
}

#[derive(Debug)]
struct QAvgPool {
    /// The windowed pool's geometry; `None` for the global pool.
    window: Option<Pool>,
}

/// The integer range of an 8-bit type.
fn range(d: DType) -> (i64, i64) {
    if d == DType::I8 {
        (-128, 127)
    } else {
        (0, 255)
    }
}

impl QAvgPool {
    fn name(&self) -> &'static str {
        match self.window {
            Some(_) => "QLinearAveragePool",
            None => "QLinearGlobalAveragePool",
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> OpError {
        OpError::invalid(format!("{}: {e}", self.name()))
    }

    fn output_shape(&self, x: &[usize]) -> Result<Vec<usize>, OpError> {
        match &self.window {
            Some(pool) => Ok(pool.shape(x)?.output_shape()),
            None => Ok(GlobalPool { max: false }.shape(x)?.2),
        }
    }

    /// (x_scale, x_zero, y_scale, y_zero) from the inputs.
    fn qparams(&self, inputs: &[Option<&Tensor>]) -> Result<(f32, i64, f32, i64), OpError> {
        let scale = |i| -> Result<f32, OpError> {
            Ok(req(inputs, i)?.view::<f32>().map_err(|e| self.err(e))?[0])
        };
        let zero = |i| -> Result<i64, OpError> {
            opt(inputs, i).map_or(Ok(0), |z| Ok(z.to_i64_vec().map_err(|e| self.err(e))?[0]))
        };
        Ok((scale(1)?, zero(2)?, scale(3)?, zero(4)?))
    }
}

impl Op for QAvgPool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !matches!(x.dtype, DType::U8 | DType::I8) {
            return Err(self.err(format!("X is {}; it must be uint8 or int8", x.dtype)));
        }
        for (i, what) in [(1, "x_scale"), (3, "y_scale")] {
            let t = req(inputs, i)?.ty;
            if t.dtype != DType::F32 || t.numel() != 1 {
                return Err(self.err(format!("{what} is {t}; one float is implemented")));
            }
        }
        for (i, what) in [(2, "x_zero_point"), (4, "y_zero_point")] {
            if let Some(z) = opt(inputs, i)
                && (z.ty.dtype != x.dtype || z.ty.numel() != 1)
            {
                return Err(self.err(format!("{what} is {}; one {} is expected", z.ty, x.dtype)));
            }
        }
        Ok(vec![ValueType::new(x.dtype, self.output_shape(&x.shape)?)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let (xs, xz, ys, yz) = self.qparams(inputs)?;
        let xv = x.to_i64_vec().map_err(|e| self.err(e))?;
        let out = &outputs[0];
        let (lo, hi) = range(out.dtype);
        let q: Vec<i64> = match &self.window {
            None => {
                let n = (x.numel() / out.numel().max(1)).max(1);
                let scale = xs / (ys * n as f32);
                xv.chunks(n)
                    .map(|plane| {
                        let sum: i64 = plane.iter().sum::<i64>() - xz * n as i64;
                        let v = sum as f32 * scale;
                        let v = if v.is_nan() { 0.0 } else { v };
                        let v = v.clamp((lo - yz) as f32, (hi - yz) as f32);
                        v.round_ties_even() as i64 + yz
                    })
                    .collect()
            }
            Some(pool) => {
                let s = pool.shape(x.shape())?;
                let PoolKind::Avg { count_include_pad } = pool.kind else {
                    unreachable!("built as an average pool")
                };
                let deq: Vec<f32> = xv.iter().map(|&v| xs * (v - xz) as f32).collect();
                cpu::avg_pool(&s, &deq, count_include_pad)
                    .into_iter()
                    .map(|a| {
                        let v = (a / ys).round_ties_even();
                        let v = if v.is_nan() { 0.0 } else { v.clamp(-1e9, 1e9) };
                        (v as i64 + yz).clamp(lo, hi)
                    })
                    .collect()
            }
        };
        let bytes: Vec<u8> = q.into_iter().map(|v| v as u8).collect();
        let y = Tensor::from_bytes(out.dtype, out.shape.clone(), bytes.into())
            .map_err(|e| self.err(e))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        if let Some(pool) = &self.window {
            return windowed_gpu(pool, inputs, outputs);
        }
        let x = opt(inputs, 0)?;
        let planes = outputs.first()?.numel();
        let plane = x.numel() / planes.max(1);
        // The int32 sum must not overflow: 2^23 values of at most 255.
        if planes == 0 || plane >= 1 << 23 || x.numel() > i32::MAX as usize {
            return None;
        }
        let variant = match x.dtype {
            DType::U8 => qlinear_pool_global::Variant::U8,
            DType::I8 => qlinear_pool_global::Variant::I8,
            _ => return None,
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                qlinear_pool_global::Buffers {
                    x: BufRef::Input(0),
                    xs: BufRef::Input(1),
                    xz: zero(inputs, 2),
                    ys: BufRef::Input(3),
                    yz: zero(inputs, 4),
                    y: BufRef::Output(0),
                },
                qlinear_pool_global::Params {
                    planes: planes as u32,
                    plane_size: plane as u32,
                },
                // One workgroup of 256 per plane.
                groups_1d(planes * 256, 256),
            )],
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        if let Some(pool) = &self.window {
            return pool.flops(inputs, outputs);
        }
        opt(inputs, 0).map_or(0, |x| x.numel() as u64)
    }
}

/// QLinearAveragePool's dispatch (shaders/qlinear_pool.comp), for windows without dilations.
fn windowed_gpu(
    pool: &Pool,
    inputs: &[Option<&ValueType>],
    outputs: &[ValueType],
) -> Option<GpuKernel> {
    let x = opt(inputs, 0)?;
    let s = pool.shape(&x.shape).ok()?;
    let y_len = outputs.first()?.numel();
    if x.numel() > i32::MAX as usize || y_len == 0 || y_len > i32::MAX as usize {
        return None;
    }
    let a = s.axes3();
    if a.iter().any(|a| a.dilation != 1) {
        return None;
    }
    let each = |f: fn(&Axis) -> usize| -> [u32; 3] { std::array::from_fn(|i| f(&a[i]) as u32) };
    let variant = match x.dtype {
        DType::U8 => qlinear_pool::Variant::U8,
        DType::I8 => qlinear_pool::Variant::I8,
        _ => return None,
    };
    let PoolKind::Avg { count_include_pad } = pool.kind else {
        return None;
    };
    let mode = if count_include_pad {
        op::Pool::AvgIncludePad
    } else {
        op::Pool::Avg
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            qlinear_pool::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
                xs: BufRef::Input(1),
                xz: zero(inputs, 2),
                ys: BufRef::Input(3),
                yz: zero(inputs, 4),
            },
            qlinear_pool::Params {
                planes: (s.n * s.c) as u32,
                in_size: each(|a| a.input),
                out_size: each(|a| a.output),
                kernel: each(|a| a.kernel),
                stride: each(|a| a.stride),
                pad: each(|a| a.pad_begin),
                lim: each(|a| a.input + a.pad_end),
                mode: mode.code(),
            },
            groups_1d(y_len, 256),
        )],
    })
}

/// A zero point's buffer: the input, or a zero when it is left out.
fn zero(inputs: &[Option<&ValueType>], i: usize) -> BufRef {
    match opt(inputs, i) {
        Some(_) => BufRef::Input(i),
        None => BufRef::Table(vec![0]),
    }
}
