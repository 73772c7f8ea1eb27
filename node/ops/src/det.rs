//! Det (opset 11, 22): the determinant of each m x m matrix of an [..., m, m] input, as an
//! output of shape [...]. Both kernels factor the matrix (LU with partial pivoting) and take the
//! product of the pivots, negated once per row swap: O(m^3) and stable, where cofactor
//! expansion would be O(m!). The CPU computes in f64 for every dtype; the GPU kernel
//! (shaders/det.comp) computes in the element type, one invocation per matrix, for m up to
//! [`GPU_MAX_M`] (its matrix lives in private memory).

use super::numeric::from_f64;
use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::Tensor;
use vkml_shaders::det;

/// The largest matrix the shader factors (its `MAX_M`); larger ones run on the CPU.
const GPU_MAX_M: usize = 16;

pub fn register(r: &mut Registry) {
    r.add("Det", build);
}

#[derive(Debug)]
struct Det;

fn build(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Det))
}

/// (matrices, m) of an [..., m, m] shape.
fn dims(shape: &[usize]) -> (usize, usize) {
    let m = shape[shape.len() - 1];
    (shape[..shape.len() - 2].iter().product(), m)
}

/// The determinant of the row-major m x m matrix `a` (overwritten by its LU factors).
fn determinant(a: &mut [f64], m: usize) -> f64 {
    let mut det = 1.0;
    for k in 0..m {
        let piv = (k..m)
            .max_by(|&r, &s| a[r * m + k].abs().total_cmp(&a[s * m + k].abs()))
            .unwrap_or(k);
        let d = a[piv * m + k];
        if d == 0.0 {
            return 0.0;
        }
        if piv != k {
            for c in k..m {
                a.swap(k * m + c, piv * m + c);
            }
            det = -det;
        }
        det *= d;
        for r in k + 1..m {
            let f = a[r * m + k] / d;
            for c in k + 1..m {
                a[r * m + c] -= f * a[k * m + c];
            }
        }
    }
    det
}

impl Op for Det {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !x.dtype.is_float() {
            return Err(OpError::invalid(format!(
                "Det takes a float tensor, found {}; cast the input to float first",
                x.dtype
            )));
        }
        let r = x.shape.len();
        if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
            return Err(OpError::invalid(format!(
                "Det needs square matrices in the last two axes, [..., M, M], found {:?}",
                x.shape
            )));
        }
        Ok(vec![ValueType::new(x.dtype, x.shape[..r - 2].to_vec())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let mut v = x
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("Det: {e}")))?;
        let (_, m) = dims(x.shape());
        let dets = if m == 0 {
            // The determinant of a 0 x 0 matrix is the empty product.
            vec![1.0; outputs[0].numel()]
        } else {
            v.chunks_mut(m * m).map(|a| determinant(a, m)).collect()
        };
        Ok(vec![from_f64(x.dtype(), outputs[0].shape.clone(), dets)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let variant = by_dtype!(x.dtype, det::Variant, [F32, F64])?;
        let (n, m) = dims(&x.shape);
        if m == 0 || m > GPU_MAX_M {
            return None;
        }
        u32::try_from(x.numel()).ok()?;
        let dispatches = if n == 0 {
            Vec::new()
        } else {
            vec![Dispatch::new(
                variant,
                det::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                det::Params {
                    n: n as u32,
                    m: m as u32,
                },
                groups_1d(n, 64),
            )]
        };
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        let Some(Some(x)) = inputs.first() else {
            return 0;
        };
        let (n, m) = dims(&x.shape);
        (n * m * m * m) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;
    use crate::testkit::{Rng, gpu_matches_cpu, op, run_one};

    fn det_of(shape: Vec<usize>, v: Vec<f64>) -> Vec<f64> {
        let d = op("Det", 22, vec![], 1).unwrap();
        let y = run_one(&*d, &[Some(&Tensor::from_vec(shape, v))]).unwrap();
        y.to_f64_vec().unwrap()
    }

    #[test]
    fn by_hand() {
        // ad - bc.
        assert_eq!(det_of(vec![2, 2], vec![3.0, 8.0, 4.0, 6.0]), [-14.0]);
        // A permutation matrix's determinant is its sign: (0 1 2) -> (1 2 0) is a 3-cycle,
        // even; one transposition is odd.
        let cycle = vec![0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0];
        let swap = vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        assert_eq!(det_of(vec![3, 3], cycle), [1.0]);
        assert_eq!(det_of(vec![3, 3], swap), [-1.0]);
        // Triangular: the product of the diagonal; singular (two equal rows): 0.
        let tri = vec![2.0, 5.0, 7.0, 0.0, 3.0, 1.0, 0.0, 0.0, -4.0];
        let sing = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0];
        assert_eq!(det_of(vec![3, 3], tri), [-24.0]);
        assert_eq!(det_of(vec![3, 3], sing), [0.0]);
        // Batches keep their leading axes; 0 x 0 matrices have determinant 1.
        let d = det_of(vec![2, 1, 1], vec![4.0, -2.5]);
        assert_eq!(d, [4.0, -2.5]);
        assert_eq!(det_of(vec![2, 0, 0], vec![]), [1.0, 1.0]);
        let bad = op("Det", 22, vec![], 1).unwrap();
        let x = Tensor::from_vec(vec![2, 3], vec![0.0f32; 6]);
        assert!(run_one(&*bad, &[Some(&x)]).is_err());
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        let d = op("Det", 22, vec![], 1).unwrap();
        let mut rng = Rng::new(11);
        for shape in [vec![3, 3], vec![5, 1, 1], vec![2, 3, 4, 4], vec![70, 7, 7]] {
            gpu_matches_cpu(&*d, &[Some(&rng.tensor_f32(&shape))], 1e-4);
        }
        let x = Tensor::from_vec(vec![3, 16, 16], rng.f64s(3 * 256));
        gpu_matches_cpu(&*d, &[Some(&x)], 1e-10);
        // Too large for the shader: the CPU keeps it.
        let big = crate::ValueType::new(DType::F32, vec![17, 17]);
        assert!(d.gpu(&[Some(&big)], &[]).is_none());
    }
}
