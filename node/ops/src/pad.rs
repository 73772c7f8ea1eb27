//! Pad: a remap whose source coordinate on each axis starts at minus the leading pad, with the
//! mode as the border rule (constant, edge, reflect, and from opset 19 wrap).

use super::remap::{Border, Remap};
use super::shape_ops::int_list;
use super::slice::run_remap;
use super::util::{const_input, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::size::{self, Size};
use crate::tensor::{DType, Tensor, strides};
use vkml_shaders::pad_table;

pub fn register(r: &mut Registry) {
    r.add("Pad", build);
}

#[derive(Debug)]
struct Pad {
    border: Border,
    /// Before opset 11: pads and the (float) value are attributes.
    attrs: Option<(Vec<i64>, f32)>,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let border = match spec.attrs.string("mode", "constant")? {
        "constant" => Border::Constant,
        "edge" => Border::Edge,
        "reflect" => Border::Reflect,
        "wrap" if spec.opset >= 19 => Border::Wrap,
        other => {
            return Err(OpError::invalid(format!(
                "Pad mode '{other}' is not one of constant, edge, reflect{} at opset {}",
                if spec.opset >= 19 { ", wrap" } else { "" },
                spec.opset
            )));
        }
    };
    let attrs = if spec.opset < 11 {
        let name = if spec.opset < 2 { "paddings" } else { "pads" };
        let pads = spec
            .attrs
            .ints_opt(name)?
            .ok_or_else(|| OpError::invalid(format!("Pad needs its '{name}' attribute")))?;
        Some((pads.to_vec(), spec.attrs.float("value", 0.0)?))
    } else {
        None
    };
    Ok(Box::new(Pad { border, attrs }))
}

/// `v` in `dtype`'s little-endian bytes (integers truncate toward zero, as a C cast does).
pub(crate) fn value_bits(dtype: DType, v: f64) -> u64 {
    match dtype {
        DType::F32 => (v as f32).to_bits() as u64,
        DType::F64 => v.to_bits(),
        DType::F16 => half::f16::from_f64(v).to_bits() as u64,
        DType::BF16 => half::bf16::from_f64(v).to_bits() as u64,
        DType::Bool => (v != 0.0) as u64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => v as u64,
        DType::I8 => v as i8 as u8 as u64,
        DType::I16 => v as i16 as u16 as u64,
        DType::I32 => v as i32 as u32 as u64,
        DType::I64 => v as i64 as u64,
        d => match crate::lowp::Float::of(d) {
            Some(crate::lowp::Float::E8M0) => {
                crate::lowp::encode_e8m0(v as f32, true, crate::lowp::Round::Up) as u64
            }
            Some(f) => f.encode(v, true) as u64,
            None => crate::lowp::wrap_int(d, v as i64) as u64,
        },
    }
}

/// The first element of `t` as raw bits.
fn first_bits(t: &Tensor) -> u64 {
    let mut b = [0u8; 8];
    let n = t.dtype().size().min(t.bytes().len());
    b[..n].copy_from_slice(&t.bytes()[..n]);
    u64::from_le_bytes(b)
}

impl Pad {
    /// Per-axis (begin, end) pads for rank `rank`.
    fn pads(
        &self,
        rank: usize,
        pads: &[i64],
        axes: Option<&[i64]>,
    ) -> Result<Vec<(i64, i64)>, OpError> {
        let axes: Vec<usize> = match axes {
            Some(a) => a
                .iter()
                .map(|&a| super::util::axis_of_tensor(a, rank))
                .collect::<Result<_, _>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(OpError::invalid(format!(
                "Pad pads has {} entries for {} axes (two per axis)",
                pads.len(),
                axes.len()
            )));
        }
        // Pads may be negative (cropping) but no larger than a size either way, so the
        // arithmetic on them below cannot overflow.
        for &p in pads {
            Size::new(
                p.unsigned_abs() as usize,
                format_args!("a pad of Pad's {pads:?}"),
            )?;
        }
        let mut out = vec![(0, 0); rank];
        for (j, &a) in axes.iter().enumerate() {
            out[a] = (pads[j], pads[j + axes.len()]);
        }
        Ok(out)
    }

    fn remap(&self, shape: &[usize], pads: &[(i64, i64)], constant: u64) -> Result<Remap, OpError> {
        let out: Vec<usize> = shape
            .iter()
            .zip(pads)
            .map(|(&d, &(b, e))| {
                let n = d as i128 + b as i128 + e as i128;
                if n < 0 {
                    Err(OpError::invalid(format!(
                        "Pad pads ({b}, {e}) remove more than the axis's {d} elements"
                    )))
                } else {
                    let what = format_args!("Pad of an axis of {d} by ({b}, {e})");
                    Ok(Size::new(usize::try_from(n).unwrap_or(usize::MAX), what)?.get())
                }
            })
            .collect::<Result<_, OpError>>()?;
        size::check_shape(&out, "Pad's output")?;
        if self.border != Border::Constant && shape.iter().zip(&out).any(|(&d, &o)| d == 0 && o > 0)
        {
            return Err(OpError::invalid(
                "Pad cannot extend an empty axis except with a constant",
            ));
        }
        let st = strides(shape);
        let mut m = Remap::new(&out);
        m.constant = constant;
        for (k, a) in m.axes.iter_mut().enumerate() {
            a.in_dim = shape[k];
            a.in_stride = st[k];
            a.start = -pads[k].0;
            a.step = 1;
            a.border = self.border;
        }
        Ok(m)
    }

    fn plan(&self, x: &ValueType, values: [Option<&Tensor>; 3]) -> Result<Remap, OpError> {
        let rank = x.shape.len();
        let (pads, constant) = match &self.attrs {
            Some((p, v)) => (self.pads(rank, p, None)?, value_bits(x.dtype, *v as f64)),
            None => {
                let p = int_list(
                    values[0].ok_or_else(|| OpError::invalid("Pad needs its pads input"))?,
                    "Pad's pads",
                )?;
                let axes = values[2].map(|t| int_list(t, "Pad's axes")).transpose()?;
                let c = match values[1] {
                    Some(t) if t.numel() > 0 => {
                        if t.dtype() != x.dtype {
                            return Err(OpError::invalid(format!(
                                "Pad constant_value is {} but the data is {}",
                                t.dtype(),
                                x.dtype
                            )));
                        }
                        first_bits(t)
                    }
                    _ => 0,
                };
                (self.pads(rank, &p, axes.as_deref())?, c)
            }
        };
        self.remap(&x.shape, &pads, constant)
    }
}

impl Op for Pad {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let mut vals = [None; 3];
        if self.attrs.is_none() {
            vals[0] = Some(const_input(inputs, 1)?);
            if opt(inputs, 3).is_some() {
                vals[2] = Some(const_input(inputs, 3)?);
            }
            // The constant does not change the shape; its value may come at run time.
            vals[1] = opt(inputs, 2).and_then(|i| i.value);
        }
        let m = self.plan(x, vals)?;
        Ok(vec![ValueType::new(
            x.dtype,
            m.axes.iter().map(|a| a.out_dim).collect(),
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let ty = ValueType::of(x);
        let m = self.plan(&ty, [opt(inputs, 1), opt(inputs, 2), opt(inputs, 3)])?;
        let out = ValueType::new(x.dtype(), m.axes.iter().map(|a| a.out_dim).collect());
        Ok(vec![run_remap(x, &m, &out)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = inputs.first().copied().flatten()?;
        let y = outputs.first()?;
        let es = x.dtype.size();
        if y.numel() == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        if x.numel() == 0 {
            // Nothing to read; the remap kernel still needs a real input buffer.
            return None;
        }
        if let Some((p, v)) = &self.attrs {
            let pads = self.pads(x.shape.len(), p, None).ok()?;
            let m = self
                .remap(&x.shape, &pads, value_bits(x.dtype, *v as f64))
                .ok()?;
            let d = m.dispatch(
                es,
                BufRef::Input(0),
                BufRef::Output(0),
                x.numel(),
                y.numel(),
            )?;
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![d],
            });
        }
        // The pads are run-time buffers: the pre-pass writes the starts (and the constant)
        // into a copy of the table built for zero leading pads; the extents come from the
        // output shape.
        let rank = x.shape.len();
        let st = strides(&x.shape);
        let mut m = Remap::new(&y.shape);
        for (k, a) in m.axes.iter_mut().enumerate() {
            a.in_dim = x.shape[k];
            a.in_stride = st[k];
            a.step = 1;
            a.border = self.border;
        }
        let table = m.table()?;
        let words = table.len();
        let pads = inputs.get(1).copied().flatten()?;
        if pads.dtype != DType::I64 {
            return None;
        }
        let value = inputs.get(2).copied().flatten().filter(|v| v.numel() > 0);
        if value.is_some_and(|v| v.dtype != x.dtype) {
            return None;
        }
        let axes = inputs.get(3).copied().flatten();
        let axes_words = match axes.map(|a| a.dtype) {
            None => 0,
            Some(DType::I32) => 1,
            Some(DType::I64) => 2,
            Some(_) => return None,
        };
        let listed = axes.map_or(rank, |a| a.numel());
        let pre = Dispatch::new(
            by_width!(es, pad_table::Variant)?,
            pad_table::Buffers {
                tmpl: BufRef::Table(table),
                pads: BufRef::Input(1),
                // Absent inputs are stood in for by present ones the flags keep unread.
                value: BufRef::Input(if value.is_some() { 2 } else { 0 }),
                axes: BufRef::Input(if axes.is_some() { 3 } else { 1 }),
                y: BufRef::Scratch(0),
            },
            pad_table::Params {
                words: words as u32,
                rank: rank as u32,
                listed: listed as u32,
                axes_words,
                has_value: value.is_some() as u32,
            },
            [1, 1, 1],
        );
        let main = m.dispatch_with(
            es,
            BufRef::Input(0),
            BufRef::Scratch(0),
            BufRef::Output(0),
            x.numel(),
            y.numel(),
        )?;
        Some(GpuKernel {
            scratch: vec![(words * 4) as u64],
            dispatches: vec![pre, main],
        })
    }

    // With the pads, the constant and the axes known while planning, the table is built here,
    // sparing `gpu`'s device pre-pass (a dispatch and a barrier). The constant alone may be a
    // run-time value; then `gpu` reads it on the device.
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let known = (1..inputs.len()).all(|i| opt(inputs, i).is_none_or(|v| v.value.is_some()));
        let x = req(inputs, 0).ok()?.ty;
        let y = outputs.first()?;
        if self.attrs.is_some() || !known || y.numel() == 0 || x.numel() == 0 {
            let types = super::util::types_of(inputs);
            return self.gpu(&types, outputs);
        }
        let vals = [1, 2, 3].map(|i| opt(inputs, i).and_then(|v| v.value));
        let d = self.plan(x, vals).ok()?.dispatch(
            x.dtype.size(),
            BufRef::Input(0),
            BufRef::Output(0),
            x.numel(),
            y.numel(),
        )?;
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![d],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
