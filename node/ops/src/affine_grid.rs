//! AffineGrid (opset 20): the sampling grid of GridSample for a batch of affine maps theta,
//! [N, 2, 3] in 2-D or [N, 3, 4] in 3-D. The `size` input ([N, C, H, W] or [N, C, D, H, W])
//! must be known when the model is planned: the output, [N, H, W, 2] or [N, D, H, W, 3],
//! takes its shape from it. Output point (n, [d,] h, w) is theta[n] applied to the homogeneous
//! base position (x_w, y_h[, z_d], 1), each coordinate spanning [-1, 1]: over the corner
//! pixels' centres with align_corners, their outer edges without. An axis of one pixel sits at
//! 0, as in PyTorch (whose affine_grid the spec follows), where align_corners' step 2 / (n - 1)
//! would divide by zero. The CPU computes in f64; the GPU (shaders/affine_grid.comp, f32 and
//! f64) in the element type, one invocation per output point.

use super::numeric::from_f64;
use super::util::{const_input, groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::Tensor;
use vkml_shaders::affine_grid;

pub fn register(r: &mut Registry) {
    r.add("AffineGrid", build);
}

#[derive(Debug)]
struct AffineGrid {
    align_corners: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(AffineGrid {
        align_corners: spec.attrs.int("align_corners", 0)? != 0,
    }))
}

/// The base coordinate of pixel `j` of an axis of `n`.
fn base(j: usize, n: usize, align_corners: bool) -> f64 {
    match (n, align_corners) {
        (0 | 1, _) => 0.0,
        (_, true) => -1.0 + j as f64 * (2.0 / (n - 1) as f64),
        (_, false) => (2 * j + 1) as f64 / n as f64 - 1.0,
    }
}

/// The output's spatial sizes ([H, W] or [D, H, W]) from `size`, checked against theta.
fn spatial(theta: &ValueType, size: &Tensor) -> Result<Vec<usize>, OpError> {
    let s = size
        .to_i64_vec()
        .map_err(|e| OpError::invalid(format!("AffineGrid size: {e}")))?;
    let dims = match s.len() {
        4 => 2,
        5 => 3,
        k => {
            return Err(OpError::invalid(format!(
                "AffineGrid size has {k} values; it must be [N, C, H, W] (2-D) or \
                 [N, C, D, H, W] (3-D)"
            )));
        }
    };
    if let Some(v) = s.iter().find(|&&v| v < 0) {
        return Err(OpError::invalid(format!(
            "AffineGrid size {s:?} holds the negative size {v}"
        )));
    }
    let want = [s[0] as usize, dims, dims + 1];
    if theta.shape != want {
        return Err(OpError::invalid(format!(
            "AffineGrid theta has shape {:?}; size {s:?} needs {want:?} ([N, 2, 3] for a 2-D \
             grid, [N, 3, 4] for a 3-D one)",
            theta.shape
        )));
    }
    Ok(s[2..].iter().map(|&v| v as usize).collect())
}

impl Op for AffineGrid {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let theta = req(inputs, 0)?.ty;
        if !theta.dtype.is_float() {
            return Err(OpError::invalid(format!(
                "AffineGrid theta must be a float tensor, found {}",
                theta.dtype
            )));
        }
        let sp = spatial(theta, const_input(inputs, 1)?)?;
        let dims = sp.len();
        let shape = [&[theta.shape[0]], &sp[..], &[dims]].concat();
        Ok(vec![ValueType::new(theta.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let theta = req(inputs, 0)?;
        let t = theta
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("AffineGrid theta: {e}")))?;
        let shape = &outputs[0].shape;
        let dims = shape[shape.len() - 1];
        // Spatial sizes as [D, H, W], D = 1 in 2-D.
        let sp = &shape[1..shape.len() - 1];
        let (d, h, w) = if dims == 3 {
            (sp[0], sp[1], sp[2])
        } else {
            (1, sp[0], sp[1])
        };
        let cols = dims + 1;
        let mut out = Vec::with_capacity(outputs[0].numel());
        for th in t.chunks(dims * cols).take(shape[0]) {
            for di in 0..d {
                for hi in 0..h {
                    for wi in 0..w {
                        let z = base(di, d, self.align_corners);
                        let pos = [
                            base(wi, w, self.align_corners),
                            base(hi, h, self.align_corners),
                        ];
                        let pos: Vec<f64> = match dims {
                            3 => vec![pos[0], pos[1], z, 1.0],
                            _ => vec![pos[0], pos[1], 1.0],
                        };
                        for row in th.chunks(cols) {
                            out.push(row.iter().zip(&pos).map(|(a, b)| a * b).sum());
                        }
                    }
                }
            }
        }
        Ok(vec![from_f64(theta.dtype(), shape.clone(), out)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let theta = req(inputs, 0).ok()?;
        let variant = by_dtype!(theta.dtype, affine_grid::Variant, [F32, F64])?;
        let shape = &outputs.first()?.shape;
        let dims = *shape.last()?;
        let sp = &shape[1..shape.len() - 1];
        let (d, h, w) = match sp {
            [d, h, w] => (*d, *h, *w),
            [h, w] => (1, *h, *w),
            _ => return None,
        };
        u32::try_from(outputs[0].numel()).ok()?;
        let points = outputs[0].numel() / dims;
        let dispatches = if points == 0 {
            Vec::new()
        } else {
            vec![Dispatch::new(
                variant,
                affine_grid::Buffers {
                    theta: BufRef::Input(0),
                    grid: BufRef::Output(0),
                },
                affine_grid::Params {
                    points: points as u32,
                    d: d as u32,
                    h: h as u32,
                    w: w as u32,
                    dims: dims as u32,
                    align_corners: u32::from(self.align_corners),
                },
                groups_1d(points, 256),
            )]
        };
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // dims + 1 multiply-adds per output value.
        let dims = outputs[0].shape.last().copied().unwrap_or(0);
        (outputs[0].numel() * (dims + 1) * 2) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{Rng, gpu_matches_cpu, i64s, op, run_one};

    fn grid(theta: &Tensor, size: &[i64], align: i64) -> Tensor {
        let g = op(
            "AffineGrid",
            20,
            vec![("align_corners", AttrValue::Int(align))],
            2,
        )
        .unwrap();
        run_one(&*g, &[Some(theta), Some(&i64s(size))]).unwrap()
    }

    #[test]
    fn identity_gives_the_base_grid() {
        let id = Tensor::from_vec(vec![1, 2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]);
        // W = 2, H = 3 without align_corners: x at -1/2, 1/2; y at -2/3, 0, 2/3.
        let g = grid(&id, &[1, 1, 3, 2], 0);
        assert_eq!(g.shape(), [1, 3, 2, 2]);
        let want = [-0.5, -2.0 / 3.0, 0.5, -2.0 / 3.0, -0.5, 0.0, 0.5, 0.0];
        let got = g.to_f64_vec().unwrap();
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{got:?}");
        }
        // With align_corners the corners are at -1 and 1.
        let g = grid(&id, &[1, 1, 3, 2], 1).to_f64_vec().unwrap();
        assert_eq!(&g[..4], [-1.0, -1.0, 1.0, -1.0]);
        assert_eq!(&g[8..], [-1.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn translation_and_3d() {
        // theta = [[2, 0, 0.5], [0, -1, 0], [0, 0, 1, 3]] style: scale x by 2, flip y, shift.
        let th = Tensor::from_vec(
            vec![1, 3, 4],
            vec![
                2.0f64, 0.0, 0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 3.0,
            ],
        );
        let g = grid(&th, &[1, 1, 2, 1, 2], 1);
        assert_eq!(g.shape(), [1, 2, 1, 2, 3]);
        // (x, y, z): x in {-1, 1}, y = 0 (one pixel), z in {-1, 1}.
        let want = [-1.5, 0.0, 2.0, 2.5, 0.0, 2.0, -1.5, 0.0, 4.0, 2.5, 0.0, 4.0];
        assert_eq!(g.to_f64_vec().unwrap(), want);
        let bad = op("AffineGrid", 20, vec![], 2).unwrap();
        let x = Tensor::from_vec(vec![1, 2, 3], vec![0.0f32; 6]);
        assert!(run_one(&*bad, &[Some(&x), Some(&i64s(&[1, 1, 2, 2, 2]))]).is_err());
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        let mut rng = Rng::new(9);
        for align in [0, 1] {
            let g = op(
                "AffineGrid",
                20,
                vec![("align_corners", AttrValue::Int(align))],
                2,
            );
            let g = g.unwrap();
            let th = rng.tensor_f32(&[3, 2, 3]);
            gpu_matches_cpu(&*g, &[Some(&th), Some(&i64s(&[3, 2, 7, 13]))], 1e-5);
            let th = rng.tensor_f32(&[2, 3, 4]);
            gpu_matches_cpu(&*g, &[Some(&th), Some(&i64s(&[2, 1, 5, 1, 9]))], 1e-5);
            let th = Tensor::from_vec(vec![1, 3, 4], rng.f64s(12));
            gpu_matches_cpu(&*g, &[Some(&th), Some(&i64s(&[1, 1, 3, 4, 5]))], 1e-12);
        }
    }
}
