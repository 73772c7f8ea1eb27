//! LRN, local response normalization across channels (opset 13): each element divided by
//! (bias + alpha / size x the sum of squares over the `size` channels around it)^beta, the
//! window running from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), cut at the edges.

use super::numeric::from_f64;
use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::lrn;

pub fn register(r: &mut Registry) {
    r.add("LRN", build);
}

#[derive(Debug)]
struct Lrn {
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let size = match a.int_opt("size")? {
        Some(s) if s >= 1 => s as usize,
        Some(s) => return Err(OpError::invalid(format!("LRN: size {s} is not positive"))),
        None => {
            return Err(OpError::invalid(
                "LRN has no size attribute (it is required)",
            ));
        }
    };
    Ok(Box::new(Lrn {
        size,
        alpha: a.float("alpha", 1e-4)?,
        beta: a.float("beta", 0.75)?,
        bias: a.float("bias", 1.0)?,
    }))
}

/// (channels, elements per channel) of an [N, C, ...] shape.
fn dims(shape: &[usize]) -> (usize, usize) {
    (shape[1], shape[2..].iter().product())
}

impl Op for Lrn {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::unsupported(format!("LRN of {}", x.dtype)));
        }
        if x.shape.len() < 3 {
            return Err(OpError::invalid(format!(
                "LRN: the input has shape {:?}; it must be [N, C, D1, ...]",
                x.shape
            )));
        }
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let v = x
            .to_f64_vec()
            .map_err(|e| OpError::invalid(e.to_string()))?;
        let (c, inner) = dims(x.shape());
        let (before, after) = ((self.size - 1) / 2, self.size / 2);
        let scale = f64::from(self.alpha) / self.size as f64;
        let y: Vec<f64> = (0..v.len())
            .map(|i| {
                let ch = (i / inner) % c;
                let base = i - ch * inner;
                let sum: f64 = (ch.saturating_sub(before)..=(ch + after).min(c - 1))
                    .map(|k| v[base + k * inner].powi(2))
                    .sum();
                v[i] / (f64::from(self.bias) + scale * sum).powf(f64::from(self.beta))
            })
            .collect();
        Ok(vec![from_f64(x.dtype(), x.shape().to_vec(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        if x.dtype != DType::F32 || x.numel() == 0 {
            return None;
        }
        let (c, inner) = dims(&x.shape);
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                lrn::Variant::Main,
                lrn::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                lrn::Params {
                    n: u32::try_from(x.numel()).ok()?,
                    channels: u32::try_from(c).ok()?,
                    inner: u32::try_from(inner).ok()?,
                    size: u32::try_from(self.size).ok()?,
                    alpha: self.alpha,
                    beta: self.beta,
                    bias: self.bias,
                },
                groups_1d(x.numel(), 256),
            )],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        (outputs[0].numel() * (2 * self.size + 4)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{Rng, gpu_matches_cpu, op, run};

    #[test]
    fn by_hand_and_on_the_gpu() {
        // Channels 1, 2, 3 at one position, size 2: the window of c runs from c to c + 1
        // (floor(1/2) = 0 before, ceil(1/2) = 1 after), so the sums are 1 + 4, 4 + 9 and 9.
        let x = Tensor::from_vec(vec![1, 3, 1], vec![1.0f32, 2.0, 3.0]);
        let attrs = vec![
            ("size", AttrValue::Int(2)),
            ("alpha", AttrValue::Float(2.0)),
            ("beta", AttrValue::Float(0.5)),
            ("bias", AttrValue::Float(1.0)),
        ];
        let lrn = op("LRN", 13, attrs, 1).unwrap();
        let y = run(&*lrn, &[Some(&x)]).unwrap()[0].to_f64_vec().unwrap();
        let want = [1.0 / 6f64.sqrt(), 2.0 / 14f64.sqrt(), 3.0 / 10f64.sqrt()];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{y:?}");
        }
        let x = Rng::new(3).tensor_f32(&[2, 7, 5, 3]);
        for size in [1, 3, 4, 9] {
            let lrn = op("LRN", 13, vec![("size", AttrValue::Int(size))], 1).unwrap();
            gpu_matches_cpu(&*lrn, &[Some(&x)], 1e-5);
        }
    }
}
