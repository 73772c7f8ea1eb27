//! Slice and Split: parts of a tensor along axes, both remaps (see remap.rs).

use super::remap::Remap;
use super::shape_ops::{attr_since, int_list};
use super::util::{const_input, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, strides};
use vkml_shaders::slice_table;

pub fn register(r: &mut Registry) {
    r.add("Slice", build_slice);
    r.add("Split", build_split);
}

/// Output bytes of a remap applied on the CPU.
pub(crate) fn run_remap(x: &Tensor, r: &Remap, out: &ValueType) -> Result<Tensor, OpError> {
    let es = x.dtype().size();
    let mut data = vec![0u8; out.bytes()];
    r.apply(x.bytes(), es, &mut data);
    Tensor::from_bytes(out.dtype, out.shape.clone(), data.into())
        .map_err(|e| OpError::invalid(e.to_string()))
}

/// Slice-1's starts, ends and optional axes.
type SliceAttrs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// Slice-1 takes starts, ends and axes as attributes; from opset 10 they are inputs 1..4.
#[derive(Debug)]
struct Slice {
    attrs: Option<SliceAttrs>,
}

fn build_slice(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    if spec.opset < 10 {
        let get = |n: &str| -> Result<Vec<i64>, OpError> {
            Ok(spec
                .attrs
                .ints_opt(n)?
                .ok_or_else(|| OpError::invalid(format!("Slice-1 needs its '{n}' attribute")))?
                .to_vec())
        };
        let axes = spec.attrs.ints_opt("axes")?.map(<[i64]>::to_vec);
        return Ok(Box::new(Slice {
            attrs: Some((get("starts")?, get("ends")?, axes)),
        }));
    }
    Ok(Box::new(Slice { attrs: None }))
}

/// One sliced axis: where it starts, its step and how many elements it keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Range1 {
    pub start: i64,
    pub step: i64,
    pub len: usize,
}

/// ONNX's Slice arithmetic for one axis of `dim` elements.
pub(crate) fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> Range1 {
    let d = dim as i64;
    let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (fix(start), fix(end));
    let (s, e) = if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1))
    };
    let span = if step > 0 { e - s } else { s - e };
    let mag = step.unsigned_abs() as i128;
    let len = if span <= 0 || d == 0 {
        0
    } else {
        ((span as i128 + mag - 1) / mag) as usize
    };
    Range1 {
        start: s,
        step,
        len,
    }
}

impl Slice {
    /// Per-axis ranges (unsliced axes keep everything) for an input of `shape`.
    fn ranges(
        &self,
        shape: &[usize],
        starts: &[i64],
        ends: &[i64],
        axes: Option<&[i64]>,
        steps: Option<&[i64]>,
    ) -> Result<Vec<Range1>, OpError> {
        let rank = shape.len();
        if rank == 0 && !starts.is_empty() {
            // `util::axis` takes axis 0 of a scalar (for ops where that means the whole value);
            // a scalar has no axis to slice.
            return Err(OpError::invalid(
                "Slice of a scalar: the data must have rank 1 or more",
            ));
        }
        if starts.len() != ends.len() {
            return Err(OpError::invalid(format!(
                "Slice starts has {} entries but ends has {}",
                starts.len(),
                ends.len()
            )));
        }
        let mut out: Vec<Range1> = shape
            .iter()
            .map(|&d| Range1 {
                start: 0,
                step: 1,
                len: d,
            })
            .collect();
        let mut seen = vec![false; rank];
        for j in 0..starts.len() {
            let a = match axes {
                Some(ax) => *ax
                    .get(j)
                    .ok_or_else(|| OpError::invalid("Slice axes has fewer entries than starts"))?,
                None => j as i64,
            };
            let a = super::util::axis(a, rank)?;
            if std::mem::replace(&mut seen[a], true) {
                return Err(OpError::invalid(format!("Slice names axis {a} twice")));
            }
            let step = match steps {
                Some(s) => *s
                    .get(j)
                    .ok_or_else(|| OpError::invalid("Slice steps has fewer entries than starts"))?,
                None => 1,
            };
            if step == 0 {
                return Err(OpError::invalid("Slice steps must not be 0"));
            }
            out[a] = slice_axis(shape[a], starts[j], ends[j], step);
        }
        Ok(out)
    }

    fn ranges_from(
        &self,
        shape: &[usize],
        values: [Option<&Tensor>; 4],
    ) -> Result<Vec<Range1>, OpError> {
        if let Some((s, e, a)) = &self.attrs {
            return self.ranges(shape, s, e, a.as_deref(), None);
        }
        let list = |t: Option<&Tensor>, what: &str| t.map(|t| int_list(t, what)).transpose();
        let starts = list(values[0], "Slice starts")?
            .ok_or_else(|| OpError::invalid("Slice needs its starts input"))?;
        let ends = list(values[1], "Slice ends")?
            .ok_or_else(|| OpError::invalid("Slice needs its ends input"))?;
        let axes = list(values[2], "Slice axes")?;
        let steps = list(values[3], "Slice steps")?;
        self.ranges(shape, &starts, &ends, axes.as_deref(), steps.as_deref())
    }
}

fn slice_remap(shape: &[usize], ranges: &[Range1]) -> Remap {
    let out: Vec<usize> = ranges.iter().map(|r| r.len).collect();
    let st = strides(shape);
    let mut m = Remap::new(&out);
    for (k, a) in m.axes.iter_mut().enumerate() {
        a.in_dim = shape[k];
        a.in_stride = st[k];
        a.start = ranges[k].start;
        a.step = ranges[k].step;
    }
    m
}

impl Op for Slice {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let mut vals = [None; 4];
        if self.attrs.is_none() {
            vals[0] = Some(const_input(inputs, 1)?);
            vals[1] = Some(const_input(inputs, 2)?);
            for (k, v) in vals.iter_mut().enumerate().skip(2) {
                if opt(inputs, k + 1).is_some() {
                    *v = Some(const_input(inputs, k + 1)?);
                }
            }
        }
        let r = self.ranges_from(&x.shape, vals)?;
        Ok(vec![ValueType::new(
            x.dtype,
            r.iter().map(|r| r.len).collect(),
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let vals = [1, 2, 3, 4].map(|i| opt(inputs, i));
        let r = self.ranges_from(x.shape(), vals)?;
        let out = ValueType::new(x.dtype(), r.iter().map(|r| r.len).collect());
        if outputs.first().is_some_and(|o| *o != out) {
            return Err(OpError::invalid(format!(
                "the output was planned as {} but the inputs give {out}",
                outputs[0]
            )));
        }
        Ok(vec![run_remap(x, &slice_remap(x.shape(), &r), &out)?])
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
        if let Some((s, e, a)) = &self.attrs {
            let r = self.ranges(&x.shape, s, e, a.as_deref(), None).ok()?;
            let d = slice_remap(&x.shape, &r).dispatch(
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
        // Starts and steps are run-time buffers: a one-invocation pre-pass writes them into
        // a copy of the table whose other entries follow from the shapes.
        let starts = inputs.get(1).copied().flatten()?;
        let idx_words = match starts.dtype {
            DType::I32 => 1,
            DType::I64 => 2,
            _ => return None,
        };
        for i in [3, 4] {
            if let Some(t) = inputs.get(i).copied().flatten()
                && t.dtype != starts.dtype
            {
                return None;
            }
        }
        let has = |i: usize| inputs.get(i).copied().flatten().is_some();
        let mut m = slice_remap(
            &x.shape,
            &y.shape
                .iter()
                .map(|&len| super::slice::Range1 {
                    start: 0,
                    step: 1,
                    len,
                })
                .collect::<Vec<_>>(),
        );
        m.in_base = 0;
        let table = m.table()?;
        let words = table.len();
        let pick = |i: usize| {
            if has(i) {
                BufRef::Input(i)
            } else {
                BufRef::Input(1)
            }
        };
        let pre = Dispatch::new(
            slice_table::Variant::Main,
            slice_table::Buffers {
                tmpl: BufRef::Table(table),
                starts: BufRef::Input(1),
                axes: pick(3),
                steps: pick(4),
                y: BufRef::Scratch(0),
            },
            slice_table::Params {
                words: words as u32,
                rank: x.shape.len() as u32,
                listed: starts.numel() as u32,
                idx_words,
                has_axes: has(3) as u32,
                has_steps: has(4) as u32,
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

    // The shape rule needs starts, ends, axes and steps, so while planning they are known: the
    // table is built here, sparing `gpu`'s device pre-pass (a dispatch and a barrier).
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let known = (1..inputs.len()).all(|i| opt(inputs, i).is_none_or(|v| v.value.is_some()));
        if self.attrs.is_some() || !known {
            let types = super::util::types_of(inputs);
            return self.gpu(&types, outputs);
        }
        let x = req(inputs, 0).ok()?.ty;
        let y = outputs.first()?;
        if y.numel() == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        let vals = [1, 2, 3, 4].map(|i| opt(inputs, i).and_then(|v| v.value));
        let r = self.ranges_from(&x.shape, vals).ok()?;
        let d = slice_remap(&x.shape, &r).dispatch(
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

/// Where Split's sizes come from.
#[derive(Debug)]
enum Sizes {
    /// The attribute (opsets 1..12; Split-1 may also take them as input 1).
    Attr(Vec<i64>),
    /// Input 1 when present (opset 13 on, and Split-1), else equal parts.
    Input,
}

#[derive(Debug)]
struct Split {
    axis: i64,
    sizes: Sizes,
    outputs: usize,
    /// Opset 18: equal parts of ceil(dim / n), the last one smaller.
    uneven_ok: bool,
}

fn build_split(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    attr_since(spec, "num_outputs", 18)?;
    let sizes = match spec.attrs.ints_opt("split")? {
        Some(s) if spec.opset < 13 => Sizes::Attr(s.to_vec()),
        Some(_) => {
            return Err(OpError::invalid(
                "Split from opset 13 takes its sizes as input 1, not as an attribute",
            ));
        }
        None => Sizes::Input,
    };
    if let Some(n) = spec.attrs.int_opt("num_outputs")?
        && n as usize != spec.num_outputs
    {
        return Err(OpError::invalid(format!(
            "Split num_outputs is {n} but the node has {} outputs",
            spec.num_outputs
        )));
    }
    Ok(Box::new(Split {
        axis: spec.attrs.int("axis", 0)?,
        sizes,
        outputs: spec.num_outputs,
        uneven_ok: spec.opset >= 18,
    }))
}

impl Split {
    fn parts(
        &self,
        shape: &[usize],
        split: Option<&Tensor>,
    ) -> Result<(usize, Vec<usize>), OpError> {
        let axis = super::util::axis_of_tensor(self.axis, shape.len())?;
        let dim = shape[axis];
        let list = match (&self.sizes, split) {
            (Sizes::Attr(s), _) => Some(s.clone()),
            (Sizes::Input, Some(t)) => Some(int_list(t, "Split's split")?),
            (Sizes::Input, None) => None,
        };
        let parts = match list {
            Some(l) => {
                if l.iter().any(|&v| v < 0) {
                    return Err(OpError::invalid(format!("Split sizes {l:?} are negative")));
                }
                let l: Vec<usize> = l.iter().map(|&v| v as usize).collect();
                // Summed wide: sizes that wrap around to the axis's length are not a split of it.
                if l.iter().map(|&v| v as u128).sum::<u128>() != dim as u128 {
                    return Err(OpError::invalid(format!(
                        "Split sizes {l:?} do not add up to axis {axis}'s {dim}"
                    )));
                }
                if l.len() != self.outputs {
                    return Err(OpError::invalid(format!(
                        "Split has {} sizes for {} outputs",
                        l.len(),
                        self.outputs
                    )));
                }
                l
            }
            None => {
                let n = self.outputs.max(1);
                if dim.is_multiple_of(n) {
                    vec![dim / n; n]
                } else if self.uneven_ok {
                    let chunk = dim.div_ceil(n);
                    (0..n)
                        .map(|i| dim.saturating_sub(i * chunk).min(chunk))
                        .collect()
                } else {
                    return Err(OpError::invalid(format!(
                        "Split of {dim} into {n} equal parts: {dim} does not divide by {n}"
                    )));
                }
            }
        };
        Ok((axis, parts))
    }

    fn remaps(&self, shape: &[usize], axis: usize, parts: &[usize]) -> Vec<(Remap, Vec<usize>)> {
        let st = strides(shape);
        let mut offset = 0;
        parts
            .iter()
            .map(|&len| {
                let mut out = shape.to_vec();
                out[axis] = len;
                let mut m = Remap::new(&out);
                for (k, a) in m.axes.iter_mut().enumerate() {
                    a.in_dim = shape[k];
                    a.in_stride = st[k];
                    a.step = 1;
                }
                m.axes[axis].start = offset as i64;
                offset += len;
                (m, out)
            })
            .collect()
    }
}

impl Op for Split {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let split = match (&self.sizes, opt(inputs, 1)) {
            (Sizes::Input, Some(_)) => Some(const_input(inputs, 1)?),
            _ => None,
        };
        let (axis, parts) = self.parts(&x.shape, split)?;
        Ok(parts
            .iter()
            .map(|&p| {
                let mut s = x.shape.clone();
                s[axis] = p;
                ValueType::new(x.dtype, s)
            })
            .collect())
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let (axis, parts) = self.parts(x.shape(), opt(inputs, 1))?;
        self.remaps(x.shape(), axis, &parts)
            .into_iter()
            .map(|(m, shape)| run_remap(x, &m, &ValueType::new(x.dtype(), shape)))
            .collect()
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = inputs.first().copied().flatten()?;
        let axis = super::util::axis_of_tensor(self.axis, x.shape.len()).ok()?;
        let parts: Vec<usize> = outputs
            .iter()
            .map(|o| *o.shape.get(axis).unwrap_or(&0))
            .collect();
        let mut dispatches = Vec::new();
        for (i, (m, out)) in self.remaps(&x.shape, axis, &parts).into_iter().enumerate() {
            let n = crate::tensor::numel(&out);
            if n > 0 {
                dispatches.push(m.dispatch(
                    x.dtype.size(),
                    BufRef::Input(0),
                    BufRef::Output(i),
                    x.numel(),
                    n,
                )?);
            }
        }
        Some(GpuKernel {
            scratch: vec![],
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
