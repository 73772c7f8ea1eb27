//! The optimizers of the ai.onnx.preview.training domain (version 1): Adagrad, Adam and
//! Momentum (standard or Nesterov's). Inputs are the learning rate R and the step count T (both
//! scalars), then the groups X..., G..., and the optimizer's state (Adagrad's H..., Momentum's
//! V..., Adam's V... then H...); outputs are the new X... then the new state, group by group.
//! Every update is elementwise within one group, so the GPU runs one dispatch per group.

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::attrs::Attrs;
use crate::tensor::{DType, Tensor};
use vkml_shaders::{adagrad, adam, momentum};

/// The domain of ONNX's training operators, which imports them as version 1.
pub const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";

pub fn register(r: &mut Registry) {
    r.add_in(TRAINING_DOMAIN, "Adagrad", build_adagrad);
    r.add_in(TRAINING_DOMAIN, "Adam", build_adam);
    r.add_in(TRAINING_DOMAIN, "Momentum", build_momentum);
}

/// An optimizer's rule with its attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    Adagrad {
        norm: f32,
        epsilon: f32,
        decay: f32,
    },
    Adam {
        norm: f32,
        norm_post: f32,
        alpha: f32,
        beta: f32,
        epsilon: f32,
    },
    Momentum {
        norm: f32,
        alpha: f32,
        beta: f32,
        nesterov: bool,
    },
}

impl Rule {
    fn name(&self) -> &'static str {
        match self {
            Rule::Adagrad { .. } => "Adagrad",
            Rule::Adam { .. } => "Adam",
            Rule::Momentum { .. } => "Momentum",
        }
    }

    /// State tensors per group: Adam keeps V and H, the others one.
    fn states(&self) -> usize {
        match self {
            Rule::Adam { .. } => 2,
            _ => 1,
        }
    }

    /// The per-step scalar from R and T: the learning rate as the rule adjusts it (Adagrad's
    /// decay, Adam's bias correction), and the weight of the gradient in Momentum's update.
    fn scalars(&self, r: f64, t: i64) -> (f64, f64) {
        match *self {
            Rule::Adagrad { decay, .. } => (r / (1.0 + t as f64 * f64::from(decay)), 1.0),
            Rule::Adam { alpha, beta, .. } if t > 0 => {
                let (a, b) = (f64::from(alpha), f64::from(beta));
                let corr = (1.0 - b.powf(t as f64)).sqrt() / (1.0 - a.powf(t as f64));
                (r * corr, 1.0)
            }
            Rule::Adam { .. } => (r, 1.0),
            Rule::Momentum { beta, .. } => (r, if t > 0 { f64::from(beta) } else { 1.0 }),
        }
    }

    /// One element's update: (x, state) to (new x, new state), given [`Rule::scalars`].
    fn update(&self, (rate, gw): (f64, f64), x: f64, g: f64, s: [f64; 2]) -> (f64, [f64; 2]) {
        match *self {
            Rule::Adagrad { norm, epsilon, .. } => {
                let g = f64::from(norm) * x + g;
                let h = s[0] + g * g;
                (x - rate * g / (h.sqrt() + f64::from(epsilon)), [h, 0.0])
            }
            Rule::Adam {
                norm,
                norm_post,
                alpha,
                beta,
                epsilon,
            } => {
                let (a, b) = (f64::from(alpha), f64::from(beta));
                let g = f64::from(norm) * x + g;
                let v = a * s[0] + (1.0 - a) * g;
                let h = b * s[1] + (1.0 - b) * (g * g);
                let moved = x - rate * (v / (h.sqrt() + f64::from(epsilon)));
                ((1.0 - f64::from(norm_post)) * moved, [v, h])
            }
            Rule::Momentum {
                norm,
                alpha,
                nesterov,
                ..
            } => {
                let a = f64::from(alpha);
                let g = f64::from(norm) * x + g;
                let v = a * s[0] + gw * g;
                let dir = if nesterov { g + a * v } else { v };
                (x - rate * dir, [v, 0.0])
            }
        }
    }
}

#[derive(Debug)]
struct Optimizer {
    rule: Rule,
    /// Tensors optimized by the node (the X inputs).
    groups: usize,
}

fn required(attrs: &Attrs, name: &str, op: &str) -> Result<f32, OpError> {
    attrs.float_opt(name)?.ok_or_else(|| {
        OpError::invalid(format!(
            "{op} needs the float attribute '{name}'; add it to the node"
        ))
    })
}

fn build_adagrad(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let rule = Rule::Adagrad {
        norm: a.float("norm_coefficient", 0.0)?,
        epsilon: a.float("epsilon", 1e-6)?,
        decay: a.float("decay_factor", 0.0)?,
    };
    Optimizer::build(rule, spec)
}

fn build_adam(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let rule = Rule::Adam {
        norm: a.float("norm_coefficient", 0.0)?,
        norm_post: a.float("norm_coefficient_post", 0.0)?,
        alpha: a.float("alpha", 0.9)?,
        beta: a.float("beta", 0.999)?,
        epsilon: a.float("epsilon", 1e-6)?,
    };
    Optimizer::build(rule, spec)
}

fn build_momentum(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let nesterov = match a.string_opt("mode")? {
        Some("standard") => false,
        Some("nesterov") => true,
        Some(other) => {
            return Err(OpError::invalid(format!(
                "Momentum mode '{other}' is unknown; it must be 'standard' or 'nesterov'"
            )));
        }
        None => {
            return Err(OpError::invalid(
                "Momentum needs the string attribute 'mode' ('standard' or 'nesterov')",
            ));
        }
    };
    let rule = Rule::Momentum {
        norm: required(a, "norm_coefficient", "Momentum")?,
        alpha: required(a, "alpha", "Momentum")?,
        beta: required(a, "beta", "Momentum")?,
        nesterov,
    };
    Optimizer::build(rule, spec)
}

impl Optimizer {
    fn build(rule: Rule, spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let per = 2 + rule.states();
        let tensors = spec.num_inputs.saturating_sub(2);
        let groups = tensors / per;
        if spec.num_inputs < 2 + per || !tensors.is_multiple_of(per) {
            return Err(OpError::invalid(format!(
                "{} takes R, T, then {per} inputs per optimized tensor (X..., G..., {}); \
                 the node has {} inputs",
                rule.name(),
                if rule.states() == 2 {
                    "V..., H..."
                } else {
                    "state..."
                },
                spec.num_inputs
            )));
        }
        let outputs = groups * (1 + rule.states());
        if spec.num_outputs != outputs {
            return Err(OpError::invalid(format!(
                "{} with {groups} optimized tensor(s) has {outputs} outputs (the new X..., then \
                 the new state); the node declares {}",
                rule.name(),
                spec.num_outputs
            )));
        }
        Ok(Box::new(Optimizer { rule, groups }))
    }

    /// Input index of tensor `kind` (0 X, 1 G, 2 and 3 the states) of group `j`.
    fn input(&self, kind: usize, j: usize) -> usize {
        2 + kind * self.groups + j
    }

    /// Output index of tensor `kind` (0 X, 1 and 2 the states) of group `j`.
    fn output(&self, kind: usize, j: usize) -> usize {
        kind * self.groups + j
    }

    /// Checks the input types; the element type of the optimized tensors.
    fn check(&self, types: &[Option<&ValueType>]) -> Result<(), OpError> {
        let name = self.rule.name();
        let r = req(types, 0)?;
        let t = req(types, 1)?;
        if !matches!(r.dtype, DType::F32 | DType::F64) || r.numel() != 1 {
            return Err(OpError::invalid(format!(
                "{name}: the learning rate R must be one float or double, found {r}"
            )));
        }
        if t.dtype != DType::I64 || t.numel() != 1 {
            return Err(OpError::invalid(format!(
                "{name}: the step count T must be one int64, found {t}"
            )));
        }
        for j in 0..self.groups {
            let x = req(types, self.input(0, j))?;
            if !matches!(x.dtype, DType::F32 | DType::F64) {
                return Err(OpError::invalid(format!(
                    "{name}: X{j} must be float or double, found {x}"
                )));
            }
            for kind in 1..2 + self.rule.states() {
                let other = req(types, self.input(kind, j))?;
                if other != x {
                    return Err(OpError::unsupported(format!(
                        "{name}: input {} is {other} and its X ({j}) is {x}; the gradient and \
                         state must have X's type and shape (broadcasting is not supported)",
                        self.input(kind, j)
                    )));
                }
            }
        }
        Ok(())
    }
}

impl Op for Optimizer {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types = super::util::types_of(inputs);
        self.check(&types)?;
        let mut out = Vec::new();
        for kind in 0..1 + self.rule.states() {
            for j in 0..self.groups {
                let x = req(&types, self.input(0, j))?;
                debug_assert_eq!(out.len(), self.output(kind, j));
                out.push(x.clone());
            }
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let bad = |e: crate::TensorError| OpError::invalid(format!("{}: {e}", self.rule.name()));
        let r = req(inputs, 0)?.to_f64_vec().map_err(bad)?;
        let t = req(inputs, 1)?.to_i64_vec().map_err(bad)?;
        let (Some(&r), Some(&t)) = (r.first(), t.first()) else {
            return Err(OpError::invalid(format!(
                "{}: R and T must each hold one value",
                self.rule.name()
            )));
        };
        let scalars = self.rule.scalars(r, t);
        let states = self.rule.states();
        let mut out: Vec<Option<Tensor>> = vec![None; outputs.len()];
        for j in 0..self.groups {
            let read = |kind: usize| -> Result<Vec<f64>, OpError> {
                req(inputs, self.input(kind, j))?.to_f64_vec().map_err(bad)
            };
            let x = read(0)?;
            let g = read(1)?;
            let s0 = read(2)?;
            let s1 = if states == 2 { read(3)? } else { Vec::new() };
            if g.len() != x.len() || s0.len() != x.len() || (states == 2 && s1.len() != x.len()) {
                return Err(OpError::invalid(format!(
                    "{}: group {j}'s tensors differ in size",
                    self.rule.name()
                )));
            }
            let mut new = [vec![0.0; x.len()], vec![0.0; x.len()], Vec::new()];
            if states == 2 {
                new[2] = vec![0.0; x.len()];
            }
            for i in 0..x.len() {
                let s = [s0[i], s1.get(i).copied().unwrap_or(0.0)];
                let (nx, ns) = self.rule.update(scalars, x[i], g[i], s);
                new[0][i] = nx;
                new[1][i] = ns[0];
                if states == 2 {
                    new[2][i] = ns[1];
                }
            }
            for (kind, values) in new.into_iter().take(1 + states).enumerate() {
                let ty = &outputs[self.output(kind, j)];
                let t = super::numeric::from_f64(ty.dtype, ty.shape.clone(), values)?;
                out[self.output(kind, j)] = Some(t);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        self.check(inputs).ok()?;
        let r = req(inputs, 0).ok()?;
        let mut dispatches = Vec::new();
        for j in 0..self.groups {
            let x = req(inputs, self.input(0, j)).ok()?;
            if x.dtype != r.dtype {
                return None;
            }
            if x.numel() == 0 {
                continue;
            }
            dispatches.push(self.dispatch(j, x)?);
        }
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }
}

impl Optimizer {
    /// Group `j`'s dispatch, over X's elements.
    fn dispatch(&self, j: usize, x: &ValueType) -> Option<Dispatch> {
        let n = u32::try_from(x.numel()).ok()?;
        let groups = groups_1d(x.numel(), 256);
        let i = |kind| BufRef::Input(self.input(kind, j));
        let o = |kind| BufRef::Output(self.output(kind, j));
        Some(match self.rule {
            Rule::Adagrad {
                norm,
                epsilon,
                decay,
            } => Dispatch::new(
                by_dtype!(x.dtype, adagrad::Variant, [F32, F64])?,
                adagrad::Buffers {
                    r: BufRef::Input(0),
                    t: BufRef::Input(1),
                    x: i(0),
                    g: i(1),
                    h: i(2),
                    x_new: o(0),
                    h_new: o(1),
                },
                adagrad::Params {
                    n,
                    norm_coefficient: norm,
                    epsilon,
                    decay_factor: decay,
                },
                groups,
            ),
            Rule::Adam {
                norm,
                norm_post,
                alpha,
                beta,
                epsilon,
            } => Dispatch::new(
                by_dtype!(x.dtype, adam::Variant, [F32, F64])?,
                adam::Buffers {
                    r: BufRef::Input(0),
                    t: BufRef::Input(1),
                    x: i(0),
                    g: i(1),
                    v: i(2),
                    h: i(3),
                    x_new: o(0),
                    v_new: o(1),
                    h_new: o(2),
                },
                adam::Params {
                    n,
                    norm_coefficient: norm,
                    norm_coefficient_post: norm_post,
                    alpha,
                    beta,
                    epsilon,
                },
                groups,
            ),
            Rule::Momentum {
                norm,
                alpha,
                beta,
                nesterov,
            } => Dispatch::new(
                by_dtype!(x.dtype, momentum::Variant, [F32, F64])?,
                momentum::Buffers {
                    r: BufRef::Input(0),
                    t: BufRef::Input(1),
                    x: i(0),
                    g: i(1),
                    v: i(2),
                    x_new: o(0),
                    v_new: o(1),
                },
                momentum::Params {
                    n,
                    norm_coefficient: norm,
                    alpha,
                    beta,
                    nesterov: u32::from(nesterov),
                },
                groups,
            ),
        })
    }
}

#[cfg(test)]
#[path = "training_tests.rs"]
mod tests;
