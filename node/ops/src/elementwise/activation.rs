//! The activation a fused op applies to its own output in place: com.microsoft FusedConv's
//! `activation` and `activation_params` (onnxruntime's names and parameter counts), which the
//! graph pass folding a Conv's activation into the Conv also writes. The formulas are the
//! unary ops' own (unary.rs), f32 through fast_f32's vector loops, so a fused activation rounds
//! exactly as the separate op would.

use super::fast_f32::Fast;
use super::unary::{UnKind, float_fn};
use crate::OpError;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// A one-input op with its attributes as the unary table keeps them.
    Unary(UnKind, [f64; 3]),
    /// Clip to `[lo, hi]`: max with lo, then min with hi, NaN passing through.
    Clip(f32, f32),
}

/// The activations FusedConv accepts: name, kind (None for Clip), parameter count.
const KINDS: [(&str, Option<UnKind>, usize); 7] = [
    ("Relu", Some(UnKind::Relu), 0),
    ("Tanh", Some(UnKind::Tanh), 0),
    ("Sigmoid", Some(UnKind::Sigmoid), 0),
    // x * sigmoid(x): Swish with alpha 1.
    ("Silu", Some(UnKind::Swish), 0),
    ("LeakyRelu", Some(UnKind::LeakyRelu), 1),
    ("HardSigmoid", Some(UnKind::HardSigmoid), 2),
    ("Clip", None, 2),
];

impl Activation {
    /// From the attribute values; `op` names the node's op type in errors.
    pub fn parse(op: &str, name: &str, params: &[f32]) -> Result<Activation, OpError> {
        let Some(&(_, kind, count)) = KINDS.iter().find(|(n, _, _)| *n == name) else {
            let known: Vec<&str> = KINDS.iter().map(|k| k.0).collect();
            return Err(OpError::unsupported(format!(
                "{op}: activation '{name}' (implemented: {})",
                known.join(", ")
            )));
        };
        if params.len() != count {
            return Err(OpError::invalid(format!(
                "{op}: activation {name} takes {count} activation_params, got {}",
                params.len()
            )));
        }
        Ok(match kind {
            None => Activation::Clip(params[0], params[1]),
            Some(UnKind::Swish) => Activation::silu(),
            Some(k) => {
                let mut p = [0.0; 3];
                for (d, &s) in p.iter_mut().zip(params) {
                    *d = s as f64;
                }
                Activation::Unary(k, p)
            }
        })
    }

    /// x * sigmoid(x).
    pub fn silu() -> Activation {
        Activation::Unary(UnKind::Swish, [1.0, 0.0, 0.0])
    }

    /// The standalone op this activation is, with its attributes, when a graph node is one:
    /// `op_type` and the float attributes it carries (`alpha`, `beta`); Clip's bounds come
    /// from its inputs, so the caller passes them.
    pub fn of_node(op_type: &str, alpha: Option<f32>, beta: Option<f32>) -> Option<Activation> {
        let (kind, params) = match op_type {
            "Relu" | "Tanh" | "Sigmoid" => (op_type, vec![]),
            "LeakyRelu" => ("LeakyRelu", vec![alpha.unwrap_or(0.01)]),
            "HardSigmoid" => (
                "HardSigmoid",
                vec![alpha.unwrap_or(0.2), beta.unwrap_or(0.5)],
            ),
            _ => return None,
        };
        Activation::parse(op_type, kind, &params).ok()
    }

    /// FusedConv's `activation` and `activation_params` for this activation.
    pub fn attrs(&self) -> (&'static str, Vec<f32>) {
        match *self {
            Activation::Clip(lo, hi) => ("Clip", vec![lo, hi]),
            Activation::Unary(k, p) => {
                let &(name, _, count) = KINDS
                    .iter()
                    .find(|(_, kind, _)| *kind == Some(k))
                    .expect("built from the table");
                let params = if k == UnKind::Swish {
                    vec![]
                } else {
                    p[..count].iter().map(|&v| v as f32).collect()
                };
                (name, params)
            }
        }
    }

    /// `y[i] = act(y[i])` for f32, in fast_f32's vector loops.
    pub fn apply_f32(&self, y: &mut [f32]) {
        let fast = match *self {
            Activation::Clip(lo, hi) => Fast::clip(lo, hi),
            Activation::Unary(k, p) => Fast::new(k, &p).expect("every kind here has an f32 loop"),
        };
        fast.in_place(y);
    }

    /// `y[i] = act(y[i])` through the f64 formula, rounded once to the element type.
    pub fn apply_f64<T: Copy>(&self, y: &mut [T], to: fn(T) -> f64, from: fn(f64) -> T) {
        match *self {
            Activation::Clip(lo, hi) => {
                let (lo, hi) = (lo as f64, hi as f64);
                for v in y {
                    let x = to(*v);
                    let x = if x < lo { lo } else { x };
                    *v = from(if x > hi { hi } else { x });
                }
            }
            Activation::Unary(k, p) => {
                let f = float_fn(k);
                for v in y {
                    *v = from(f(to(*v), &p));
                }
            }
        }
    }
}
