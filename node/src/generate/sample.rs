//! Choosing the next token from a row of logits: greedy (the highest logit, the lowest index
//! on ties, as argmax in PyTorch and onnxruntime), or sampled from the softmax at a
//! temperature, kept to the smallest set of tokens whose probability reaches `top_p`
//! (nucleus sampling), from a seeded generator so a run can be repeated.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 (or less): greedy.
    pub temperature: f32,
    /// In (0, 1]; 1 keeps every token.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

pub struct Sampler {
    sampling: Sampling,
    rng: StdRng,
}

impl Sampler {
    pub fn new(sampling: Sampling) -> Sampler {
        Sampler {
            sampling,
            rng: StdRng::seed_from_u64(sampling.seed),
        }
    }

    pub fn next(&mut self, logits: &[f32]) -> u32 {
        if self.sampling.temperature <= 0.0 {
            return argmax(logits);
        }
        let u: f64 = self.rng.random();
        nucleus(logits, self.sampling.temperature, self.sampling.top_p, u)
    }
}

/// The first index of the largest logit (NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// The token at cumulative probability `u` (in [0, 1)) of the nucleus of
/// softmax(logits / temperature), renormalised.
pub fn nucleus(logits: &[f32], temperature: f32, top_p: f32, u: f64) -> u32 {
    let t = f64::from(temperature);
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let p = if v.is_nan() {
                0.0
            } else {
                ((f64::from(v) - f64::from(max)) / t).exp()
            };
            (i as u32, p)
        })
        .collect();
    let total: f64 = probs.iter().map(|p| p.1).sum();
    // Most likely first, ties by index: the order decides which tokens the nucleus keeps.
    probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let keep_mass = f64::from(top_p.clamp(f32::MIN_POSITIVE, 1.0)) * total;
    let mut kept = 0;
    let mut mass = 0.0;
    for &(_, p) in &probs {
        kept += 1;
        mass += p;
        if mass >= keep_mass {
            break;
        }
    }
    let target = u * mass;
    let mut acc = 0.0;
    for &(i, p) in &probs[..kept] {
        acc += p;
        if target < acc {
            return i;
        }
    }
    probs[kept - 1].0
}
