//! LinearAttention (opset 26): attention through a recurrent [d_k, d_v] state per KV head,
//! run token by token. Query, key and value come packed as [B, T, heads * dim]; the state is
//! [B, H_kv, d_k, d_v]. Per token, by `update_rule`:
//! - gated rules first decay the state, S *= exp(g) (g per head or per key row);
//! - delta rules write beta * (v - S^T k) instead of v, so the state learns the correction;
//! - then S += k (outer) v', and each query head of the KV head's group reads scale * q^T S.
//!
//! Every column of the state (one value dimension of one KV head) evolves on its own: the
//! update of column m needs only column m. The GPU kernel gives each column an invocation.

use super::numeric::from_f64;
use super::util::{groups_1d, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::linear_attention;

pub fn register(r: &mut Registry) {
    r.add("LinearAttention", build);
}

/// The largest d_k whose state column the GPU kernel holds in registers.
const GPU_MAX_DK: usize = 256;

#[derive(Debug)]
struct LinearAttention {
    q_heads: usize,
    kv_heads: usize,
    /// 0 derives 1 / sqrt(d_k).
    scale: f32,
    gated: bool,
    delta: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let heads = |name: &str| -> Result<usize, OpError> {
        match a.int_opt(name)? {
            Some(h) if h >= 1 => Ok(h as usize),
            Some(h) => Err(OpError::invalid(format!(
                "LinearAttention: {name} is {h}; it must be positive"
            ))),
            None => Err(OpError::invalid(format!(
                "LinearAttention has no {name} attribute (it is required)"
            ))),
        }
    };
    let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if q_heads % kv_heads != 0 {
        return Err(OpError::invalid(format!(
            "LinearAttention: q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}"
        )));
    }
    let (gated, delta) = match a.string("update_rule", "gated_delta")? {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(OpError::unsupported(format!(
                "LinearAttention: update_rule '{other}' is not one of 'linear', 'gated', \
                 'delta', 'gated_delta'"
            )));
        }
    };
    Ok(Box::new(LinearAttention {
        q_heads,
        kv_heads,
        scale: a.float("scale", 0.0)?,
        gated,
        delta,
    }))
}

/// The sizes of one node. `decay_per_key`: the decay has a value per key dimension rather
/// than one per head; `beta_per_head`: one beta per KV head rather than one per token.
#[derive(Debug, Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    dk: usize,
    dv: usize,
    decay_per_key: bool,
    beta_per_head: bool,
}

fn packed(name: &str, v: &ValueType, b: usize, t: usize, heads: usize) -> Result<usize, OpError> {
    match v.shape[..] {
        [vb, vt, hd] if vb == b && vt == t && hd % heads == 0 && hd > 0 => Ok(hd / heads),
        _ => Err(OpError::invalid(format!(
            "LinearAttention: {name} has shape {:?}; it must be [{b}, {t}, {heads} heads x dim]",
            v.shape
        ))),
    }
}

impl LinearAttention {
    fn dims(&self, inputs: &[Option<&ValueType>]) -> Result<Dims, OpError> {
        let q = req(inputs, 0)?;
        let [b, t, _] = q.shape[..] else {
            return Err(OpError::invalid(format!(
                "LinearAttention: the query has shape {:?}; it must be [B, T, q_num_heads x d_k]",
                q.shape
            )));
        };
        let dk = packed("query", q, b, t, self.q_heads)?;
        let kdk = packed("key", req(inputs, 1)?, b, t, self.kv_heads)?;
        if kdk != dk {
            return Err(OpError::invalid(format!(
                "LinearAttention: the key's head size {kdk} differs from the query's {dk}"
            )));
        }
        let dv = packed("value", req(inputs, 2)?, b, t, self.kv_heads)?;
        let (h, mut d) = (
            self.kv_heads,
            Dims {
                b,
                t,
                dk,
                dv,
                decay_per_key: false,
                beta_per_head: false,
            },
        );
        let gate = |present: bool, needed: bool, name: &str| match (present, needed) {
            (false, true) => Err(OpError::invalid(format!(
                "LinearAttention: this update_rule needs the {name} input"
            ))),
            (true, false) => Err(OpError::invalid(format!(
                "LinearAttention: this update_rule takes no {name}; drop it or pick a rule \
                 that uses it"
            ))),
            _ => Ok(()),
        };
        gate(opt(inputs, 4).is_some(), self.gated, "decay")?;
        gate(opt(inputs, 5).is_some(), self.delta, "beta")?;
        if let Some(g) = opt(inputs, 4) {
            d.decay_per_key = match g.shape[..] {
                [gb, gt, n] if gb == b && gt == t && (n == h || n == h * dk) => {
                    n == h * dk && dk > 1
                }
                _ => {
                    return Err(OpError::invalid(format!(
                        "LinearAttention: decay has shape {:?}; it must be [{b}, {t}, {h}] or [{b}, {t}, {}]",
                        g.shape,
                        h * dk
                    )));
                }
            };
        }
        if let Some(beta) = opt(inputs, 5) {
            d.beta_per_head = match beta.shape[..] {
                [bb, bt, n] if bb == b && bt == t && (n == h || n == 1) => n == h,
                _ => {
                    return Err(OpError::invalid(format!(
                        "LinearAttention: beta has shape {:?}; it must be [{b}, {t}, {h}] or [{b}, {t}, 1]",
                        beta.shape
                    )));
                }
            };
        }
        Ok(d)
    }

    fn scale(&self, dk: usize) -> f64 {
        if self.scale == 0.0 {
            1.0 / (dk as f64).sqrt()
        } else {
            f64::from(self.scale)
        }
    }
}

/// The input values the CPU kernel reads, widened to f64.
struct Values {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    decay: Option<Vec<f64>>,
    beta: Option<Vec<f64>>,
}

impl LinearAttention {
    /// Runs the recurrence of KV head h of batch b over all tokens, updating its state
    /// (row-major [d_k, d_v]) in place and writing the outputs of its query heads into y.
    fn run_head(&self, d: &Dims, x: &Values, b: usize, h: usize, s: &mut [f64], y: &mut [f64]) {
        let (dk, dv, kvh, qh) = (d.dk, d.dv, self.kv_heads, self.q_heads);
        let group = qh / kvh;
        let scale = self.scale(dk);
        for t in 0..d.t {
            let bt = b * d.t + t;
            let key = &x.k[(bt * kvh + h) * dk..][..dk];
            let val = &x.v[(bt * kvh + h) * dv..][..dv];
            if let Some(g) = &x.decay {
                for (row, srow) in s.chunks_mut(dv).enumerate() {
                    let e = if d.decay_per_key {
                        g[(bt * kvh + h) * dk + row]
                    } else {
                        g[bt * kvh + h]
                    };
                    srow.iter_mut().for_each(|v| *v *= e.exp());
                }
            }
            for m in 0..dv {
                let write = match &x.beta {
                    Some(beta) => {
                        let be = if d.beta_per_head {
                            beta[bt * kvh + h]
                        } else {
                            beta[bt]
                        };
                        let got: f64 = (0..dk).map(|r| s[r * dv + m] * key[r]).sum();
                        be * (val[m] - got)
                    }
                    None => val[m],
                };
                for r in 0..dk {
                    s[r * dv + m] += key[r] * write;
                }
            }
            for qi in h * group..(h + 1) * group {
                let query = &x.q[(bt * qh + qi) * dk..][..dk];
                for m in 0..dv {
                    let o: f64 = (0..dk).map(|r| query[r] * s[r * dv + m]).sum();
                    y[(bt * qh + qi) * dv + m] = scale * o;
                }
            }
        }
    }
}

fn f64s_of(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

impl Op for LinearAttention {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types: Vec<Option<&ValueType>> = inputs.iter().map(|i| i.map(|i| i.ty)).collect();
        let q = req(&types, 0)?;
        let d = self.dims(&types)?;
        let float = |t: DType| matches!(t, DType::F32 | DType::F16 | DType::BF16);
        for (i, name) in [(1, "key"), (2, "value"), (4, "decay"), (5, "beta")] {
            if let Some(t) = opt(&types, i).filter(|t| t.dtype != q.dtype) {
                return Err(OpError::invalid(format!(
                    "LinearAttention: {name} is {} but the query is {}; cast them to one type",
                    t.dtype, q.dtype
                )));
            }
        }
        if !float(q.dtype) {
            return Err(OpError::unsupported(format!(
                "LinearAttention of {} (it takes float, float16 or bfloat16)",
                q.dtype
            )));
        }
        let state = vec![d.b, self.kv_heads, d.dk, d.dv];
        let state_dtype = match opt(&types, 3) {
            Some(p) if p.shape != state || !float(p.dtype) => {
                return Err(OpError::invalid(format!(
                    "LinearAttention: past_state is {p}; it must be a float tensor of shape \
                     {state:?}"
                )));
            }
            Some(p) => p.dtype,
            None => q.dtype,
        };
        Ok(vec![
            ValueType::new(q.dtype, vec![d.b, d.t, self.q_heads * d.dv]),
            ValueType::new(state_dtype, state),
        ])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let d = self.dims(&types.iter().map(Option::as_ref).collect::<Vec<_>>())?;
        let values = |i: usize| opt(inputs, i).map(f64s_of).transpose();
        let x = Values {
            q: f64s_of(req(inputs, 0)?)?,
            k: f64s_of(req(inputs, 1)?)?,
            v: f64s_of(req(inputs, 2)?)?,
            decay: values(4)?,
            beta: values(5)?,
        };
        let per_head = d.dk * d.dv;
        let n_state = d.b * self.kv_heads * per_head;
        let mut state = values(3)?.unwrap_or_else(|| vec![0.0; n_state]);
        let mut y = vec![0.0; d.b * d.t * self.q_heads * d.dv];
        for (bh, s) in state
            .chunks_mut(per_head.max(1))
            .enumerate()
            .take(d.b * self.kv_heads)
        {
            self.run_head(&d, &x, bh / self.kv_heads, bh % self.kv_heads, s, &mut y);
        }
        Ok(vec![
            from_f64(outputs[0].dtype, outputs[0].shape.clone(), y)?,
            from_f64(outputs[1].dtype, outputs[1].shape.clone(), state)?,
        ])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let q = req(inputs, 0).ok()?;
        // One shader type for everything: a state of another type than the activations
        // stays on the CPU.
        if outputs[1].dtype != q.dtype {
            return None;
        }
        let variant = by_dtype!(q.dtype, linear_attention::Variant, [F32, F16])?;
        let d = self.dims(inputs).ok()?;
        let columns = d.b * self.kv_heads * d.dv;
        if d.dk > GPU_MAX_DK || columns == 0 {
            return None;
        }
        let present = |i: usize| opt(inputs, i).is_some();
        let or_q = |i: usize| BufRef::Input(if present(i) { i } else { 0 });
        let mode = |on: bool, wide: bool| u32::from(on) + u32::from(on && wide);
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                linear_attention::Buffers {
                    q: BufRef::Input(0),
                    k: BufRef::Input(1),
                    v: BufRef::Input(2),
                    past: or_q(3),
                    decay: or_q(4),
                    beta: or_q(5),
                    y: BufRef::Output(0),
                    state: BufRef::Output(1),
                },
                linear_attention::Params {
                    columns: u32::try_from(columns).ok()?,
                    tokens: u32::try_from(d.t).ok()?,
                    q_heads: u32::try_from(self.q_heads).ok()?,
                    kv_heads: u32::try_from(self.kv_heads).ok()?,
                    dk: d.dk as u32,
                    dv: u32::try_from(d.dv).ok()?,
                    has_past: present(3).into(),
                    decay_mode: mode(present(4), d.decay_per_key),
                    beta_mode: mode(present(5), d.beta_per_head),
                    scale: self.scale(d.dk) as f32,
                },
                groups_1d(columns, 64),
            )],
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        let Ok(d) = self.dims(inputs) else { return 0 };
        let per_token = self.kv_heads * d.dk * d.dv * 6 + self.q_heads * d.dk * d.dv * 2;
        (d.b * d.t * per_token) as u64
    }
}

#[cfg(test)]
mod tests;
