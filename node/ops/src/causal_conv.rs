//! CausalConvWithState (opset 26): a depthwise 1-D convolution over [B, C, L] that sees only
//! the current and past positions. The sequence is the carried state (or k - 1 zeros) followed
//! by the input; output position t is bias + the kernel's dot product with padded positions
//! t..t + k, optionally through SiLU, and the new state is the last k - 1 padded positions
//! (which reach back into the old state when L < k - 1).

use super::numeric::from_f64;
use super::util::{groups_1d, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::causal_conv;

pub fn register(r: &mut Registry) {
    r.add("CausalConvWithState", build);
}

#[derive(Debug)]
struct CausalConv {
    silu: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let silu = match spec.attrs.string("activation", "none")? {
        "none" => false,
        // Swish with beta 1 is SiLU; ONNX accepts both names.
        "silu" | "swish" => true,
        other => {
            return Err(OpError::unsupported(format!(
                "CausalConvWithState: activation '{other}' is not one of 'none', 'silu', 'swish'"
            )));
        }
    };
    Ok(Box::new(CausalConv { silu }))
}

/// The sizes of one node: batch, channels, length and kernel size.
#[derive(Debug, Clone, Copy)]
struct Dims {
    b: usize,
    c: usize,
    l: usize,
    k: usize,
}

fn dims(x: &ValueType, w: &ValueType) -> Result<Dims, OpError> {
    let [b, c, l] = x.shape[..] else {
        return Err(OpError::invalid(format!(
            "CausalConvWithState: the input has shape {:?}; it must be rank 3 [batch, channels, \
             length] (Reshape higher-rank data first)",
            x.shape
        )));
    };
    match w.shape[..] {
        [wc, 1, k] if wc == c && k >= 1 => Ok(Dims { b, c, l, k }),
        _ => Err(OpError::invalid(format!(
            "CausalConvWithState: the weight has shape {:?}; for {c} channels it must be \
             [{c}, 1, k] with k >= 1",
            w.shape
        ))),
    }
}

impl Op for CausalConv {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let w = req(inputs, 1)?.ty;
        if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(OpError::unsupported(format!(
                "CausalConvWithState of {} (it takes float, float16 or bfloat16)",
                x.dtype
            )));
        }
        let d = dims(x, w)?;
        let state = vec![d.b, d.c, d.k - 1];
        let checks = [
            (1, "weight", w.shape.clone()),
            (2, "bias", vec![d.c]),
            (3, "past_state", state.clone()),
        ];
        for (i, name, want) in checks {
            let Some(t) = opt(inputs, i).map(|t| t.ty) else {
                continue;
            };
            if t.dtype != x.dtype {
                return Err(OpError::invalid(format!(
                    "CausalConvWithState: {name} is {} but the input is {}; cast them to one type",
                    t.dtype, x.dtype
                )));
            }
            if t.shape != want {
                return Err(OpError::invalid(format!(
                    "CausalConvWithState: {name} has shape {:?}; it must be {want:?}",
                    t.shape
                )));
            }
        }
        Ok(vec![x.clone(), ValueType::new(x.dtype, state)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let vals = |i: usize| -> Result<Option<Vec<f64>>, OpError> {
            opt(inputs, i)
                .map(|t| t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string())))
                .transpose()
        };
        let x = req(inputs, 0)?;
        let d = dims(&ValueType::of(x), &ValueType::of(req(inputs, 1)?))?;
        let (xv, w) = (vals(0)?.unwrap_or_default(), vals(1)?.unwrap_or_default());
        let (bias, past) = (vals(2)?, vals(3)?);
        let (l, k) = (d.l, d.k);
        let mut y = Vec::with_capacity(d.b * d.c * l);
        let mut state = Vec::with_capacity(d.b * d.c * (k - 1));
        let mut padded = vec![0.0; l + k - 1];
        for bc in 0..d.b * d.c {
            let ch = bc % d.c;
            if let Some(p) = &past {
                padded[..k - 1].copy_from_slice(&p[bc * (k - 1)..(bc + 1) * (k - 1)]);
            }
            padded[k - 1..].copy_from_slice(&xv[bc * l..(bc + 1) * l]);
            let wk = &w[ch * k..(ch + 1) * k];
            for t in 0..l {
                let acc = bias.as_ref().map_or(0.0, |b| b[ch])
                    + wk.iter()
                        .zip(&padded[t..t + k])
                        .map(|(a, b)| a * b)
                        .sum::<f64>();
                y.push(if self.silu {
                    acc / (1.0 + (-acc).exp())
                } else {
                    acc
                });
            }
            state.extend_from_slice(&padded[l..]);
        }
        Ok(vec![
            from_f64(x.dtype(), x.shape().to_vec(), y)?,
            from_f64(x.dtype(), vec![d.b, d.c, k - 1], state)?,
        ])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let (x, w) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?);
        let variant = by_dtype!(x.dtype, causal_conv::Variant, [F32, F16])?;
        let d = dims(x, w).ok()?;
        let (n_out, n_state) = (d.b * d.c * d.l, d.b * d.c * (d.k - 1));
        let total = n_out + n_state;
        if total == 0 {
            return None;
        }
        let (bias, past) = (opt(inputs, 2).is_some(), opt(inputs, 3).is_some());
        // An absent optional input is never read (the flags say so); any bound buffer will do.
        let or_x = |present: bool, i: usize| BufRef::Input(if present { i } else { 0 });
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                causal_conv::Buffers {
                    x: BufRef::Input(0),
                    w: BufRef::Input(1),
                    bias: or_x(bias, 2),
                    past: or_x(past, 3),
                    y: BufRef::Output(0),
                    state: if n_state > 0 {
                        BufRef::Output(1)
                    } else {
                        BufRef::Output(0)
                    },
                },
                causal_conv::Params {
                    n_out: u32::try_from(n_out).ok()?,
                    total: u32::try_from(total).ok()?,
                    channels: u32::try_from(d.c).ok()?,
                    len: u32::try_from(d.l).ok()?,
                    k: u32::try_from(d.k).ok()?,
                    has_bias: bias.into(),
                    has_past: past.into(),
                    silu: self.silu.into(),
                },
                groups_1d(total, 256),
            )],
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        let k = opt(inputs, 1).and_then(|w| w.shape.get(2).copied());
        (outputs[0].numel() * (2 * k.unwrap_or(1) + 4)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{Rng, assert_close, f64s, gpu_matches_cpu, node, run};

    fn causal(activation: &str, num_inputs: usize) -> Box<dyn Op> {
        let attrs = vec![("activation", AttrValue::String(activation.into()))];
        node("CausalConvWithState", 26, attrs, num_inputs, 2).unwrap()
    }

    #[test]
    fn by_hand() {
        // One channel, kernel [1, 2, 3], state [10, 20], input [1, 2, 3]: the padded sequence
        // is 10 20 1 2 3, so the outputs are 10 + 40 + 3, 20 + 2 + 6 and 1 + 4 + 9, plus the
        // bias 0.5, and the new state is the last two positions, 2 and 3.
        let x = Tensor::from_vec(vec![1, 1, 3], vec![1.0f32, 2.0, 3.0]);
        let w = Tensor::from_vec(vec![1, 1, 3], vec![1.0f32, 2.0, 3.0]);
        let b = Tensor::from_vec(vec![1], vec![0.5f32]);
        let past = Tensor::from_vec(vec![1, 1, 2], vec![10.0f32, 20.0]);
        let op = causal("none", 4);
        let out = run(&*op, &[Some(&x), Some(&w), Some(&b), Some(&past)]).unwrap();
        assert_close(&f64s(&out[0]), &[53.5, 28.5, 14.5], 1e-6);
        assert_close(&f64s(&out[1]), &[2.0, 3.0], 1e-6);
        // A length-1 input shorter than the state: the state shifts by one, keeping 20.
        let x1 = Tensor::from_vec(vec![1, 1, 1], vec![4.0f32]);
        let out = run(&*op, &[Some(&x1), Some(&w), None, Some(&past)]).unwrap();
        assert_close(&f64s(&out[0]), &[10.0 + 40.0 + 12.0], 1e-6);
        assert_close(&f64s(&out[1]), &[20.0, 4.0], 1e-6);
        // No state: zeros in front; SiLU(v) = v * sigmoid(v).
        let out = run(&*causal("silu", 2), &[Some(&x), Some(&w)]).unwrap();
        let silu = |v: f64| v / (1.0 + (-v).exp());
        assert_close(
            &f64s(&out[0]),
            &[silu(3.0), silu(2.0 + 6.0), silu(14.0)],
            1e-6,
        );
        assert_close(&f64s(&out[1]), &[2.0, 3.0], 1e-6);
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let x = Tensor::from_vec(vec![1, 2, 3], vec![0.0f32; 6]);
        let w = Tensor::from_vec(vec![3, 1, 2], vec![0.0f32; 6]);
        assert!(run(&*causal("none", 2), &[Some(&x), Some(&w)]).is_err());
        let attrs = vec![("activation", AttrValue::String("relu".into()))];
        assert!(node("CausalConvWithState", 26, attrs, 2, 2).is_err());
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        let mut r = Rng::new(7);
        for (b, c, l, k) in [(2, 3, 7, 4), (1, 5, 2, 5), (3, 2, 1, 3), (1, 1, 9, 1)] {
            let x = r.tensor_f32(&[b, c, l]);
            let w = r.tensor_f32(&[c, 1, k]);
            let bias = r.tensor_f32(&[c]);
            let past = r.tensor_f32(&[b, c, k - 1]);
            for act in ["none", "silu"] {
                gpu_matches_cpu(&*causal(act, 2), &[Some(&x), Some(&w)], 1e-5);
                let all = [Some(&x), Some(&w), Some(&bias), Some(&past)];
                gpu_matches_cpu(&*causal(act, 4), &all, 1e-5);
                gpu_matches_cpu(
                    &*causal(act, 4),
                    &[Some(&x), Some(&w), None, Some(&past)],
                    1e-5,
                );
            }
        }
    }
}
