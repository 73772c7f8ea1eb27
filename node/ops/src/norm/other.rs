//! MeanVarianceNormalization and LpNormalization: CPU kernels in f64; on the GPU
//! shaders/norm_axes.comp (f32, f16).

use crate::numeric::{from_f64, offsets, resolve_axes};
use crate::tensor::{DType, Tensor};
use crate::util::{axis, expect_dtype, groups_1d, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, Op, OpError, Registry, ValueType};
use vkml_shaders::norm_axes;

pub fn register(r: &mut Registry) {
    r.add("MeanVarianceNormalization", |s| {
        Ok(Box::new(Mvn {
            axes: s
                .attrs
                .ints_opt("axes")?
                .map_or_else(|| vec![0, 2, 3], <[i64]>::to_vec),
        }))
    });
    r.add("LpNormalization", |s| {
        let p = s.attrs.int("p", 2)?;
        if p != 1 && p != 2 {
            return Err(OpError::invalid(format!(
                "LpNormalization: p must be 1 or 2, got {p}"
            )));
        }
        Ok(Box::new(LpNorm {
            axis: s.attrs.int("axis", -1)?,
            p,
        }))
    });
}

fn floats(x: &ValueType, what: &str) -> Result<Vec<ValueType>, OpError> {
    expect_dtype(x, &[DType::F32, DType::F16, DType::F64, DType::BF16], what)?;
    Ok(vec![x.clone()])
}

fn f64s(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

/// norm_axes.comp over the (ascending) `axes` of `x`, in `mode` (0 MVN, 1 L1, 2 L2).
fn axes_kernel(x: &ValueType, axes: &[usize], mode: u32) -> Option<GpuKernel> {
    let variant = by_dtype!(x.dtype, norm_axes::Variant, [F32, F16])?;
    u32::try_from(x.numel()).ok()?;
    let st = crate::tensor::strides(&x.shape);
    let kept: Vec<usize> = (0..x.shape.len()).filter(|a| !axes.contains(a)).collect();
    let nout: usize = kept.iter().map(|&a| x.shape[a]).product();
    let nred: usize = axes.iter().map(|&a| x.shape[a]).product();
    let mut table = vec![kept.len() as u32];
    table.extend(kept.iter().map(|&a| x.shape[a] as u32));
    table.extend(kept.iter().map(|&a| st[a] as u32));
    table.push(axes.len() as u32);
    table.extend(axes.iter().map(|&a| x.shape[a] as u32));
    table.extend(axes.iter().map(|&a| st[a] as u32));
    if x.numel() == 0 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            norm_axes::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
                t: BufRef::Table(table),
            },
            norm_axes::Params {
                nout: nout as u32,
                nred: nred as u32,
                mode,
            },
            groups_1d(nout, 256),
        )],
    })
}

/// `(x - mean) / (sqrt(var) + 1e-9)` over `axes`, as ONNX's function body defines it.
#[derive(Debug)]
struct Mvn {
    axes: Vec<i64>,
}

impl Op for Mvn {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        resolve_axes(&self.axes, x.shape.len(), "MeanVarianceNormalization")?;
        floats(x, "MeanVarianceNormalization: input")
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let shape = x.shape();
        let mut axes = resolve_axes(&self.axes, shape.len(), "MeanVarianceNormalization")?;
        axes.sort_unstable();
        let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
        let (outer, inner) = (offsets(shape, &kept), offsets(shape, &axes));
        let v = f64s(x)?;
        let mut y = vec![0.0; v.len()];
        let n = inner.len().max(1) as f64;
        for &o in &outer {
            let mean = inner.iter().map(|&i| v[o + i]).sum::<f64>() / n;
            let var = inner
                .iter()
                .map(|&i| (v[o + i] - mean).powi(2))
                .sum::<f64>()
                / n;
            let den = var.sqrt() + 1e-9;
            for &i in &inner {
                y[o + i] = (v[o + i] - mean) / den;
            }
        }
        Ok(vec![from_f64(x.dtype(), shape.to_vec(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let mut axes = resolve_axes(&self.axes, x.shape.len(), "MeanVarianceNormalization").ok()?;
        axes.sort_unstable();
        axes_kernel(x, &axes, 0)
    }
}

/// `x / ||x||_p` along one axis.
#[derive(Debug)]
struct LpNorm {
    axis: i64,
    p: i64,
}

impl Op for LpNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.shape.is_empty() {
            return Err(OpError::invalid(
                "LpNormalization: the input is a scalar, it has no axis",
            ));
        }
        axis(self.axis, x.shape.len())?;
        floats(x, "LpNormalization: input")
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let shape = x.shape();
        if shape.is_empty() {
            return Err(OpError::invalid(
                "LpNormalization: the input is a scalar, it has no axis",
            ));
        }
        let a = axis(self.axis, shape.len())?;
        let kept: Vec<usize> = (0..shape.len()).filter(|&k| k != a).collect();
        let (outer, inner) = (offsets(shape, &kept), offsets(shape, &[a]));
        let v = f64s(x)?;
        let mut y = vec![0.0; v.len()];
        for &o in &outer {
            let norm = if self.p == 1 {
                inner.iter().map(|&i| v[o + i].abs()).sum::<f64>()
            } else {
                inner
                    .iter()
                    .map(|&i| v[o + i] * v[o + i])
                    .sum::<f64>()
                    .sqrt()
            };
            // A zero vector stays zero (ONNX's reference), rather than 0 / 0 = NaN.
            let scale = if norm == 0.0 { 0.0 } else { 1.0 / norm };
            for &i in &inner {
                y[o + i] = v[o + i] * scale;
            }
        }
        Ok(vec![from_f64(x.dtype(), shape.to_vec(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        if x.shape.is_empty() {
            return None;
        }
        let a = axis(self.axis, x.shape.len()).ok()?;
        axes_kernel(x, &[a], self.p as u32)
    }
}
