//! The activation functions ONNX lets RNN, GRU and LSTM name, with their alpha and beta.

use crate::OpError;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus,
}

/// Which of alpha and beta a function takes, and their defaults when the lists run out. ONNX
/// says "those of the op of the same name"; ONNX Runtime (the reference users compare with)
/// gives LeakyRelu, HardSigmoid and Elu their ops' defaults and 0 to the rest (Affine,
/// ThresholdedRelu, ScaledTanh, which have no such op any more), and so does vkml.
fn defaults(kind: Kind) -> (Option<f32>, Option<f32>) {
    match kind {
        Kind::Affine | Kind::ScaledTanh => (Some(0.0), Some(0.0)),
        Kind::LeakyRelu => (Some(0.01), None),
        Kind::ThresholdedRelu => (Some(0.0), None),
        Kind::Elu => (Some(1.0), None),
        Kind::HardSigmoid => (Some(0.2), Some(0.5)),
        _ => (None, None),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Activation {
    pub kind: Kind,
    pub alpha: f32,
    pub beta: f32,
}

impl Activation {
    pub fn plain(kind: Kind) -> Activation {
        Activation {
            kind,
            alpha: 0.0,
            beta: 0.0,
        }
    }

    pub fn apply(&self, x: f64) -> f64 {
        let (a, b) = (f64::from(self.alpha), f64::from(self.beta));
        match self.kind {
            Kind::Relu => x.max(0.0),
            Kind::Tanh => x.tanh(),
            Kind::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Kind::Affine => a * x + b,
            Kind::LeakyRelu => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Kind::ThresholdedRelu => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Kind::ScaledTanh => a * (b * x).tanh(),
            Kind::HardSigmoid => (a * x + b).clamp(0.0, 1.0),
            Kind::Elu => {
                if x >= 0.0 {
                    x
                } else {
                    a * x.exp_m1()
                }
            }
            Kind::Softsign => x / (1.0 + x.abs()),
            Kind::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
        }
    }

    /// The shader's code for the function (rnn_step.comp's `act`).
    pub fn code(&self) -> u32 {
        self.kind as u32
    }
}

fn kind(name: &str) -> Option<Kind> {
    // ONNX spells them in CamelCase; ONNX Runtime also takes any case.
    let k = match name.to_ascii_lowercase().as_str() {
        "relu" => Kind::Relu,
        "tanh" => Kind::Tanh,
        "sigmoid" => Kind::Sigmoid,
        "affine" => Kind::Affine,
        "leakyrelu" => Kind::LeakyRelu,
        "thresholdedrelu" => Kind::ThresholdedRelu,
        "scaledtanh" => Kind::ScaledTanh,
        "hardsigmoid" => Kind::HardSigmoid,
        "elu" => Kind::Elu,
        "softsign" => Kind::Softsign,
        "softplus" => Kind::Softplus,
        _ => return None,
    };
    Some(k)
}

/// The functions of each direction: `names` lists `per_dir` functions per direction (or
/// `per_dir` for both), `defaults` when absent. alpha and beta are consumed in order by the
/// functions that take them, as ONNX Runtime reads the lists; a function past the end of a
/// list takes its default.
pub fn parse(
    op: &str,
    names: Option<&[String]>,
    alphas: &[f32],
    betas: &[f32],
    dirs: usize,
    defaults_: &[Kind],
) -> Result<Vec<Vec<Activation>>, OpError> {
    let per_dir = defaults_.len();
    let Some(names) = names else {
        return Ok(vec![
            defaults_
                .iter()
                .map(|&k| Activation::plain(k))
                .collect();
            dirs
        ]);
    };
    if names.len() != per_dir && names.len() != per_dir * dirs {
        return Err(OpError::invalid(format!(
            "{op}: activations lists {} functions; it takes {per_dir} per direction ({} for \
             {dirs} direction(s))",
            names.len(),
            per_dir * dirs
        )));
    }
    let (mut a, mut b) = (alphas.iter(), betas.iter());
    let mut all = Vec::with_capacity(names.len());
    for name in names {
        let k = kind(name).ok_or_else(|| {
            OpError::unsupported(format!(
                "{op}: activation '{name}' (ONNX allows Relu, Tanh, Sigmoid, Affine, LeakyRelu, \
                 ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)"
            ))
        })?;
        let (da, db) = defaults(k);
        let alpha = da.map_or(0.0, |d| a.next().copied().unwrap_or(d));
        let beta = db.map_or(0.0, |d| b.next().copied().unwrap_or(d));
        all.push(Activation {
            kind: k,
            alpha,
            beta,
        });
    }
    Ok((0..dirs)
        .map(|d| {
            let start = if all.len() == per_dir { 0 } else { d * per_dir };
            all[start..start + per_dir].to_vec()
        })
        .collect())
}
