//! The random ops: RandomUniform, RandomNormal, their -Like forms, and Bernoulli. CPU only:
//! their values are drawn anew on every run, so they are never folded while planning
//! ([`Op::random`]).
//!
//! With a `seed` attribute every run draws the same values (a PCG stream from the seed's
//! bits); without one, each run draws from a stream of its own. ONNX fixes no generator, so
//! the values are vkml's own: tests check the shape, type and range.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::util::req;
use super::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel};

pub fn register(r: &mut Registry) {
    r.add("RandomUniform", |s| build(s, Kind::Uniform, false));
    r.add("RandomUniformLike", |s| build(s, Kind::Uniform, true));
    r.add("RandomNormal", |s| build(s, Kind::Normal, false));
    r.add("RandomNormalLike", |s| build(s, Kind::Normal, true));
    r.add("Bernoulli", |s| build(s, Kind::Bernoulli, true));
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// In [low, high).
    Uniform,
    /// mean + scale * N(0, 1).
    Normal,
    /// 1 with the input's probability, else 0.
    Bernoulli,
}

#[derive(Debug)]
struct Random {
    kind: Kind,
    /// Whether the shape (and, without `dtype`, the type) comes from input 0.
    like: bool,
    dtype: Option<DType>,
    shape: Vec<usize>,
    /// low and high, or mean and scale.
    a: f64,
    b: f64,
    seed: Option<u64>,
    /// Where an unseeded op's streams start, and how many runs have drawn.
    start: u64,
    runs: AtomicU64,
}

fn build(spec: &NodeSpec<'_>, kind: Kind, like: bool) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let dtype = match a.int_opt("dtype")? {
        Some(code) => Some(
            i32::try_from(code)
                .ok()
                .and_then(DType::from_onnx_code)
                .ok_or_else(|| OpError::invalid(format!("dtype {code} is no element type")))?,
        ),
        None => None,
    };
    let shape = match (like, a.ints_opt("shape")?) {
        (true, _) => Vec::new(),
        (false, Some(s)) => s
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| OpError::invalid(format!("shape {s:?} has a negative size")))?,
        (false, None) => return Err(OpError::invalid("has no 'shape' attribute")),
    };
    let (x, y) = match kind {
        Kind::Uniform => (a.float("low", 0.0)?, a.float("high", 1.0)?),
        Kind::Normal => (a.float("mean", 0.0)?, a.float("scale", 1.0)?),
        Kind::Bernoulli => (0.0, 1.0),
    };
    Ok(Box::new(Random {
        kind,
        like,
        dtype,
        shape,
        a: f64::from(x),
        b: f64::from(y),
        seed: a.float_opt("seed")?.map(|s| u64::from(s.to_bits())),
        start: rand::rng().random(),
        runs: AtomicU64::new(0),
    }))
}

impl Random {
    fn generator(&self) -> Pcg64Mcg {
        match self.seed {
            Some(s) => Pcg64Mcg::seed_from_u64(s),
            None => {
                let run = self.runs.fetch_add(1, Ordering::Relaxed);
                Pcg64Mcg::seed_from_u64(self.start ^ run.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            }
        }
    }
}

impl Op for Random {
    fn random(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (dtype, shape) = if self.like {
            let x = req(inputs, 0)?.ty;
            (self.dtype.unwrap_or(x.dtype), x.shape.clone())
        } else {
            (self.dtype.unwrap_or(DType::F32), self.shape.clone())
        };
        let floats = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
        let ints = matches!(
            dtype,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U16 | DType::Bool
        );
        if !(floats || self.kind == Kind::Bernoulli && ints) {
            return Err(OpError::unsupported(format!(
                "a random op drawing {dtype}: it draws float, double, float16 or bfloat16 \
                 (Bernoulli also integers and bool)"
            )));
        }
        if self.kind == Kind::Bernoulli && !req(inputs, 0)?.ty.dtype.is_float() {
            return Err(OpError::invalid("Bernoulli's probabilities must be floats"));
        }
        Ok(vec![ValueType::new(dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let n = numel(&out.shape);
        let mut rng = self.generator();
        let v: Vec<f64> = match self.kind {
            Kind::Uniform => (0..n)
                .map(|_| self.a + (self.b - self.a) * rng.random::<f64>())
                .collect(),
            Kind::Normal => (0..n).map(|_| self.a + self.b * normal(&mut rng)).collect(),
            Kind::Bernoulli => {
                let p = req(inputs, 0)?
                    .to_f64_vec()
                    .map_err(|e| OpError::invalid(format!("Bernoulli: {e}")))?;
                p.iter()
                    .map(|&p| f64::from(u8::from(rng.random::<f64>() < p)))
                    .collect()
            }
        };
        let t = match out.dtype {
            DType::Bool => {
                Tensor::from_bools(out.shape.clone(), v.iter().map(|&x| x != 0.0).collect())
            }
            d => super::numeric::from_f64(d, out.shape.clone(), v)?,
        };
        Ok(vec![t])
    }
}

/// One standard normal draw (Box-Muller; 1 - u keeps the logarithm finite).
fn normal(rng: &mut Pcg64Mcg) -> f64 {
    let u: f64 = rng.random();
    let v: f64 = rng.random();
    (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attrs;
    use crate::attrs::AttrValue;

    fn op(op_type: &str, attrs: Vec<(&str, AttrValue)>) -> Box<dyn Op> {
        let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect());
        let spec = NodeSpec {
            name: "r",
            op_type,
            attrs: &attrs,
            opset: 22,
            num_inputs: 1,
            num_outputs: 1,
        };
        crate::build(&spec).unwrap()
    }

    fn draw(o: &dyn Op, x: Option<&Tensor>) -> Vec<f64> {
        let ins: Vec<Option<InferInput<'_>>> = vec![];
        let ty_x = x.map(ValueType::of);
        let infer_in: Vec<Option<InferInput<'_>>> = match &ty_x {
            Some(t) => vec![Some(InferInput { ty: t, value: None })],
            None => ins,
        };
        let out = o.infer(&infer_in).unwrap();
        let t = o.run_cpu(&[x], &out).unwrap();
        t[0].to_f64_vec().unwrap()
    }

    #[test]
    fn uniform_draws_stay_in_range_and_a_seed_repeats_them() {
        let attrs = || {
            vec![
                ("shape", AttrValue::Ints(vec![1000])),
                ("low", AttrValue::Float(-2.0)),
                ("high", AttrValue::Float(3.0)),
            ]
        };
        let o = op("RandomUniform", attrs());
        let a = draw(o.as_ref(), None);
        assert!(a.iter().all(|&x| (-2.0..3.0).contains(&x)));
        let mean = a.iter().sum::<f64>() / 1000.0;
        assert!((mean - 0.5).abs() < 0.25, "{mean}");
        // Unseeded: another run, other values.
        assert_ne!(a, draw(o.as_ref(), None));
        let mut seeded = attrs();
        seeded.push(("seed", AttrValue::Float(7.0)));
        let s = op("RandomUniform", seeded);
        assert_eq!(draw(s.as_ref(), None), draw(s.as_ref(), None));
    }

    #[test]
    fn normal_draws_have_the_mean_and_scale_asked_for() {
        let attrs = vec![
            ("shape", AttrValue::Ints(vec![20000])),
            ("mean", AttrValue::Float(1.5)),
            ("scale", AttrValue::Float(2.0)),
            ("seed", AttrValue::Float(1.0)),
        ];
        let v = draw(op("RandomNormal", attrs).as_ref(), None);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        // Standard errors: 2/sqrt(20000) = 0.014 for the mean; a few percent for the variance.
        assert!((mean - 1.5).abs() < 0.06, "{mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.08, "{}", var.sqrt());
    }

    #[test]
    fn bernoulli_follows_its_probabilities() {
        let p: Vec<f32> = (0..3000).map(|i| [0.0, 1.0, 0.25][i % 3]).collect();
        let x = Tensor::from_vec(vec![3000], p);
        let v = draw(op("Bernoulli", vec![]).as_ref(), Some(&x));
        assert!(v.iter().all(|&b| b == 0.0 || b == 1.0));
        assert!(v.iter().step_by(3).all(|&b| b == 0.0));
        assert!(v.iter().skip(1).step_by(3).all(|&b| b == 1.0));
        let quarter = v.iter().skip(2).step_by(3).sum::<f64>() / 1000.0;
        assert!((quarter - 0.25).abs() < 0.06, "{quarter}");
    }
}
