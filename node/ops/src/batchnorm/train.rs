//! BatchNormalization with training_mode = 1 (opsets 14, 15), on the CPU: normalise with the
//! batch's own statistics (mean and population variance per channel over N and the spatial
//! axes) and output the running statistics updated with `momentum`:
//! `running = input * momentum + batch * (1 - momentum)`.

use crate::numeric::from_f64;
use crate::tensor::Tensor;
use crate::util::req;
use crate::{InferInput, NodeSpec, Op, OpError, ValueType};

pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let epsilon = spec.attrs.float("epsilon", 1e-5)?;
    let momentum = spec.attrs.float("momentum", 0.9)?;
    Ok(Box::new(Train {
        epsilon,
        momentum,
        outputs: spec.num_outputs.clamp(1, 3),
    }))
}

#[derive(Debug)]
struct Train {
    epsilon: f32,
    momentum: f32,
    outputs: usize,
}

fn f64s(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

impl Op for Train {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !x.dtype.is_float() || x.shape.len() < 2 {
            return Err(OpError::invalid(format!(
                "BatchNormalization: X must be a float tensor N x C x ..., got {x}"
            )));
        }
        let c = x.shape[1];
        let mut out = vec![x.clone()];
        for i in 1..5 {
            let p = req(inputs, i)?.ty;
            if p.shape != [c] {
                return Err(OpError::invalid(format!(
                    "BatchNormalization: input {i} must have shape [{c}], got {:?}",
                    p.shape
                )));
            }
            if i >= 3 && out.len() < self.outputs {
                out.push(p.clone());
            }
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let p: Vec<Vec<f64>> = (1..5)
            .map(|i| f64s(req(inputs, i)?))
            .collect::<Result<_, _>>()?;
        let xs = f64s(x)?;
        if x.rank() < 2 || p.iter().any(|v| v.len() != x.shape()[1]) {
            return Err(OpError::invalid(format!(
                "BatchNormalization: X {:?} needs scale, B, mean and var of its channel count",
                x.shape()
            )));
        }
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let s: usize = x.shape()[2..].iter().product();
        let count = (n * s).max(1) as f64;
        let mut y = vec![0.0; xs.len()];
        let (mut means, mut vars) = (vec![0.0; c], vec![0.0; c]);
        for ch in 0..c {
            let at = |b: usize, j: usize| (b * c + ch) * s + j;
            let mut sum = 0.0;
            for b in 0..n {
                for j in 0..s {
                    sum += xs[at(b, j)];
                }
            }
            let mean = sum / count;
            let mut sq = 0.0;
            for b in 0..n {
                for j in 0..s {
                    sq += (xs[at(b, j)] - mean).powi(2);
                }
            }
            let var = sq / count;
            let k = p[0][ch] / (var + self.epsilon as f64).sqrt();
            for b in 0..n {
                for j in 0..s {
                    y[at(b, j)] = (xs[at(b, j)] - mean) * k + p[1][ch];
                }
            }
            means[ch] = mean;
            vars[ch] = var;
        }
        let m = self.momentum as f64;
        let mut out = vec![from_f64(x.dtype(), x.shape().to_vec(), y)?];
        for (o, (run, batch)) in outputs.iter().skip(1).zip([(&p[2], means), (&p[3], vars)]) {
            let v = run
                .iter()
                .zip(batch)
                .map(|(r, b)| r * m + b * (1.0 - m))
                .collect();
            out.push(from_f64(o.dtype, o.shape.clone(), v)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_close, f64s as vals, run};
    use crate::{AttrValue, Attrs};

    #[test]
    fn batch_statistics_by_hand() {
        let attrs = Attrs(
            [
                ("training_mode", AttrValue::Int(1)),
                ("epsilon", AttrValue::Float(0.0)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        let op = crate::build(&NodeSpec {
            name: "t",
            op_type: "BatchNormalization",
            attrs: &attrs,
            opset: 15,
            num_inputs: 5,
            num_outputs: 3,
        })
        .unwrap();
        // N=2, C=1, spatial 1: values 1 and 3, mean 2, variance 1.
        let x = Tensor::from_vec(vec![2, 1, 1], vec![1f32, 3.]);
        let one = |v: f32| Tensor::from_vec(vec![1], vec![v]);
        let (s, b, m, v) = (one(2.), one(1.), one(10.), one(5.));
        let y = run(&*op, &[Some(&x), Some(&s), Some(&b), Some(&m), Some(&v)]).unwrap();
        assert_close(&vals(&y[0]), &[-1., 3.], 1e-6);
        assert_close(&vals(&y[1]), &[10. * 0.9 + 2. * 0.1], 1e-6);
        assert_close(&vals(&y[2]), &[5. * 0.9 + 0.1], 1e-6);
    }
}
