//! Einsum (opset 12): a general parser (repeated labels are diagonals, `...` broadcasts,
//! without `->` the output is the ellipsis then the labels used once, alphabetically) and one
//! strided-sum formulation for every equation: each output element sums, over the labels not
//! in the output, the product of the inputs at offsets given by per-label strides (a label
//! repeated within one input adds its strides, which walks the diagonal). On the GPU, equations that are batched
//! matrix products run on the tiled GEMM (lower.rs), the rest on shaders/einsum1.comp and
//! einsum2.comp (one or two inputs, over one body, einsum.glsl).

mod equation;
mod lower;
#[cfg(test)]
mod tests;

use super::numeric::{Wide, narrow, widen};
use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use equation::{Equation, Plan};
use vkml_shaders::{einsum1, einsum2};

pub fn register(r: &mut Registry) {
    r.add("Einsum", build);
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let eq = spec
        .attrs
        .string_opt("equation")?
        .ok_or_else(|| OpError::invalid("Einsum: attribute 'equation' is required"))?;
    Ok(Box::new(Einsum {
        eq: Equation::parse(eq)?,
    }))
}

#[derive(Debug)]
struct Einsum {
    eq: Equation,
}

fn run_plan<T: Copy>(
    p: &Plan,
    ins: &[Vec<T>],
    zero: T,
    add: impl Fn(T, T) -> T,
    mul: impl Fn(T, T) -> T,
) -> Vec<T> {
    let nout = p.out_count();
    let nsum = p.sum_count();
    let no = p.out_sizes.len();
    let mut y = Vec::with_capacity(nout);
    let labels = no + p.sum_sizes.len();
    let mut idx = vec![0usize; labels];
    for o in 0..nout {
        let mut r = o;
        for l in (0..no).rev() {
            idx[l] = r % p.out_sizes[l];
            r /= p.out_sizes[l];
        }
        let mut acc = zero;
        for s in 0..nsum {
            let mut r = s;
            for l in (0..p.sum_sizes.len()).rev() {
                idx[no + l] = r % p.sum_sizes[l];
                r /= p.sum_sizes[l];
            }
            let mut prod: Option<T> = None;
            for (k, st) in p.strides.iter().enumerate() {
                let off: usize = st.iter().zip(&idx).map(|(s, i)| s * i).sum();
                let v = ins[k][off];
                prod = Some(match prod {
                    None => v,
                    Some(q) => mul(q, v),
                });
            }
            acc = add(acc, prod.unwrap_or(zero));
        }
        y.push(acc);
    }
    y
}

impl Op for Einsum {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let shapes: Vec<&[usize]> = (0..inputs.len().max(1))
            .map(|i| req(inputs, i).map(|t| &t.ty.shape[..]))
            .collect::<Result<_, _>>()?;
        let d = req(inputs, 0)?.ty.dtype;
        if d == DType::Bool || inputs.iter().flatten().any(|t| t.ty.dtype != d) {
            return Err(OpError::invalid(
                "Einsum: inputs must share one numeric dtype",
            ));
        }
        let plan = self.eq.plan(&shapes)?;
        Ok(vec![ValueType::new(d, plan.out_shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let ts: Vec<&Tensor> = (0..inputs.len().max(1))
            .map(|i| req(inputs, i))
            .collect::<Result<_, _>>()?;
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
        let plan = self.eq.plan(&shapes)?;
        let wide: Vec<Wide> = ts.iter().map(|t| widen(t)).collect::<Result<_, _>>()?;
        let out = if let Some(Wide::F(_)) = wide.first() {
            let v: Vec<Vec<f64>> = wide
                .into_iter()
                .map(|w| match w {
                    Wide::F(v) => v,
                    Wide::I(v) => v.into_iter().map(|x| x as f64).collect(),
                })
                .collect();
            Wide::F(run_plan(&plan, &v, 0.0, |a, b| a + b, |a, b| a * b))
        } else {
            let v: Vec<Vec<i64>> = wide
                .into_iter()
                .map(|w| match w {
                    Wide::I(v) => v,
                    Wide::F(v) => v.into_iter().map(|x| x as i64).collect(),
                })
                .collect();
            Wide::I(run_plan(&plan, &v, 0, i64::wrapping_add, i64::wrapping_mul))
        };
        Ok(vec![narrow(ts[0].dtype(), plan.out_shape, out)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let ts: Vec<&ValueType> = inputs.iter().copied().collect::<Option<_>>()?;
        if ts.is_empty() || ts.len() > 2 {
            return None;
        }
        let (half, double) = match ts[0].dtype {
            DType::F32 => (false, false),
            DType::F16 => (true, false),
            DType::F64 => (false, true),
            _ => return None,
        };
        let shapes: Vec<&[usize]> = ts.iter().map(|t| &t.shape[..]).collect();
        let plan = self.eq.plan(&shapes).ok()?;
        for t in &ts {
            u32::try_from(t.numel()).ok()?;
        }
        let nout = plan.out_count();
        u32::try_from(nout.max(plan.sum_count())).ok()?;
        if ts.len() == 2
            && !double
            && let Some(k) = lower::as_gemm(
                &plan,
                ts[0].dtype == DType::F16,
                [ts[0].numel(), ts[1].numel(), nout],
            )
        {
            return Some(k);
        }
        // [n_out, n_sum, out sizes, sum sizes, strides of each input over all labels].
        let mut table = vec![plan.out_sizes.len() as u32, plan.sum_sizes.len() as u32];
        table.extend(
            plan.out_sizes
                .iter()
                .chain(&plan.sum_sizes)
                .map(|&s| s as u32),
        );
        for st in &plan.strides {
            table.extend(st.iter().map(|&s| s as u32));
        }
        let (y, t) = (BufRef::Output(0), BufRef::Table(table));
        let (nout, nsum) = (nout as u32, plan.sum_count() as u32);
        let groups = groups_1d(nout as usize, 256);
        let dispatch = if ts.len() == 1 {
            Dispatch::new(
                match (half, double) {
                    (true, _) => einsum1::Variant::F16,
                    (_, true) => einsum1::Variant::F64,
                    _ => einsum1::Variant::F32,
                },
                einsum1::Buffers {
                    a: BufRef::Input(0),
                    y,
                    t,
                },
                einsum1::Params { nout, nsum },
                groups,
            )
        } else {
            Dispatch::new(
                match (half, double) {
                    (true, _) => einsum2::Variant::F16,
                    (_, true) => einsum2::Variant::F64,
                    _ => einsum2::Variant::F32,
                },
                einsum2::Buffers {
                    a: BufRef::Input(0),
                    b: BufRef::Input(1),
                    y,
                    t,
                },
                einsum2::Params { nout, nsum },
                groups,
            )
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![dispatch],
        })
    }
}
