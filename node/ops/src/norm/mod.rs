//! Normalisations over contiguous rows: LayerNormalization (opset 17), InstanceNormalization,
//! GroupNormalization (opset 18: scale and bias per group; 21: per channel); and, on the CPU
//! only, MeanVarianceNormalization and LpNormalization.
//!
//! Layer, instance and group normalisation all normalise rows of `len` contiguous elements:
//! `y = (x - mean) / sqrt(var + epsilon) * scale + bias`, with the scale element of row `r`,
//! position `j` at `(r % p) * q + (j / d) % s` (see [`Rows`]).

mod cpu;
mod gpu;
mod other;
#[cfg(test)]
mod tests;

use super::util::{opt, req};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("LayerNormalization", |s| Norm::build(s, Kind::Layer));
    r.add("InstanceNormalization", |s| Norm::build(s, Kind::Instance));
    r.add("GroupNormalization", |s| Norm::build(s, Kind::Group));
    other::register(r);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Layer,
    Instance,
    Group,
}

#[derive(Debug)]
struct Norm {
    kind: Kind,
    axis: i64,
    epsilon: f32,
    groups: usize,
    /// Opset 18's GroupNormalization: scale and bias per group rather than per channel.
    per_group: bool,
    /// The dtype of LayerNormalization's Mean and InvStdDev outputs.
    stash: DType,
    num_outputs: usize,
}

/// `rows` rows of `len` contiguous elements; the scale and bias index of row `r`, element `j`
/// is `(r % p) * q + (j / d) % s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub rows: usize,
    pub len: usize,
    pub p: usize,
    pub q: usize,
    pub d: usize,
    pub s: usize,
}

impl Rows {
    pub fn param(&self, r: usize, j: usize) -> usize {
        (r % self.p) * self.q + (j / self.d) % self.s
    }
}

const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::F64, DType::BF16];

impl Norm {
    fn build(spec: &NodeSpec<'_>, kind: Kind) -> Result<Box<dyn Op>, OpError> {
        let a = spec.attrs;
        let stash = match a.int("stash_type", 1)? {
            1 => DType::F32,
            other => DType::from_onnx_code(other as i32)
                .filter(|d| d.is_float())
                .ok_or_else(|| {
                    OpError::invalid(format!("stash_type {other} is not a float type"))
                })?,
        };
        let groups = a.int("num_groups", 1)?;
        if kind == Kind::Group && groups < 1 {
            return Err(OpError::invalid(format!(
                "GroupNormalization: num_groups must be positive, got {groups}"
            )));
        }
        Ok(Box::new(Norm {
            kind,
            axis: a.int("axis", -1)?,
            epsilon: a.float("epsilon", 1e-5)?,
            groups: groups as usize,
            per_group: kind == Kind::Group && spec.opset < 21,
            stash,
            num_outputs: spec.num_outputs.max(1),
        }))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Layer => "LayerNormalization",
            Kind::Instance => "InstanceNormalization",
            Kind::Group => "GroupNormalization",
        }
    }

    /// The row layout, after checking the scale and bias shapes. LayerNormalization's scale
    /// may broadcast to the normalised shape: `None` for `p` etc. then means "expand first".
    fn rows(
        &self,
        x: &[usize],
        scale: &[usize],
        bias: Option<&[usize]>,
    ) -> Result<(Rows, usize), OpError> {
        let name = self.name();
        let bad =
            |what: &str| OpError::invalid(format!("{name}: {what} (input {x:?}, scale {scale:?})"));
        let count = |s: &[usize]| s.iter().product::<usize>();
        match self.kind {
            Kind::Layer => {
                let a = super::util::axis(self.axis, x.len())?;
                let norm = &x[a..];
                for s in std::iter::once(scale).chain(bias) {
                    super::util::broadcast_shapes(s, norm)
                        .ok()
                        .filter(|b| b == norm)
                        .ok_or_else(|| {
                            bad("scale or bias does not broadcast to the normalised shape")
                        })?;
                }
                let len = count(norm);
                let rows = Rows {
                    rows: count(&x[..a]),
                    len,
                    p: 1,
                    q: 0,
                    d: 1,
                    s: len,
                };
                Ok((rows, a))
            }
            Kind::Instance | Kind::Group => {
                if x.len() < 2 {
                    return Err(bad("the input needs a batch and a channel axis"));
                }
                let (n, c) = (x[0], x[1]);
                let spatial = count(&x[2..]);
                let g = if self.kind == Kind::Instance {
                    c
                } else {
                    self.groups
                };
                if g == 0 || c % g != 0 {
                    return Err(bad(&format!("{c} channels do not split into {g} groups")));
                }
                let per = if self.per_group { g } else { c };
                for s in std::iter::once(scale).chain(bias) {
                    if s != [per] {
                        return Err(bad(&format!("scale and bias must have shape [{per}]")));
                    }
                }
                let cg = c / g;
                let rows = if self.per_group {
                    Rows {
                        rows: n * g,
                        len: cg * spatial,
                        p: g,
                        q: 1,
                        d: 1,
                        s: 1,
                    }
                } else {
                    Rows {
                        rows: n * g,
                        len: cg * spatial,
                        p: g,
                        q: cg,
                        d: spatial.max(1),
                        s: cg,
                    }
                };
                Ok((rows, 1))
            }
        }
    }

    fn stats_shape(&self, x: &[usize], axis: usize) -> Vec<usize> {
        x.iter()
            .enumerate()
            .map(|(i, &d)| if i < axis { d } else { 1 })
            .collect()
    }
}

impl Op for Norm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        super::util::expect_dtype(x, FLOATS, &format!("{}: input", self.name()))?;
        let scale = req(inputs, 1)?.ty;
        let bias = opt(inputs, 2).map(|b| b.ty);
        if self.kind != Kind::Layer && bias.is_none() {
            return Err(OpError::invalid(format!(
                "{}: bias (input 2) is required",
                self.name()
            )));
        }
        for t in std::iter::once(scale).chain(bias) {
            if t.dtype != x.dtype {
                return Err(OpError::invalid(format!(
                    "{}: scale and bias must be {} like the input, found {}",
                    self.name(),
                    x.dtype,
                    t.dtype
                )));
            }
        }
        let (_, axis) = self.rows(&x.shape, &scale.shape, bias.map(|b| &b.shape[..]))?;
        let mut out = vec![x.clone()];
        if self.kind == Kind::Layer {
            let st = ValueType::new(self.stash, self.stats_shape(&x.shape, axis));
            out.extend(std::iter::repeat_n(st, self.num_outputs.clamp(1, 3) - 1));
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let scale = req(inputs, 1)?;
        let bias = opt(inputs, 2);
        let (rows, axis) = self.rows(x.shape(), scale.shape(), bias.map(Tensor::shape))?;
        let norm_shape = &x.shape()[axis..];
        let (y, mean, inv) = cpu::normalize(
            x,
            scale,
            bias,
            rows,
            norm_shape,
            self.epsilon as f64,
            self.kind == Kind::Layer,
        )?;
        let mut out = vec![y];
        for (o, v) in outputs.iter().skip(1).zip([mean, inv]) {
            out.push(super::numeric::from_f64(o.dtype, o.shape.clone(), v)?);
        }
        Ok(out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let scale = req(inputs, 1).ok()?;
        let bias = opt(inputs, 2);
        let (rows, _) = self
            .rows(&x.shape, &scale.shape, bias.map(|b| &b.shape[..]))
            .ok()?;
        if self.kind == Kind::Layer {
            // Broadcast scale or bias would need expanding first: leave those to the CPU.
            if scale.numel() != rows.len || bias.is_some_and(|b| b.numel() != rows.len) {
                return None;
            }
            if outputs.len() > 1 && self.stash != DType::F32 {
                return None;
            }
        }
        gpu::kernel(
            x.dtype,
            rows,
            self.epsilon,
            bias.is_some(),
            outputs.len().saturating_sub(1),
        )
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |x| 8 * x.numel() as u64)
    }
}
