//! CenterCropPad (opset 18): each listed axis (all by default) cropped or zero-padded to the
//! size the `shape` input gives it, centred: a crop starts (in - out) / 2 elements in, a pad
//! puts (out - in) / 2 zeros before (the odd element falls at the end either way). A remap
//! (ops/remap.rs) like Pad's, its starts read off the input and output shapes, so the GPU
//! kernel needs no value at run time; `shape` must be known while planning.

use super::remap::{Border, Remap};
use super::shape_ops::int_list;
use super::slice::run_remap;
use super::util::{axis_of_tensor, const_input, req};
use super::{BufRef, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::size::{self, Size};
use crate::tensor::{Tensor, strides};

pub fn register(r: &mut Registry) {
    r.add("CenterCropPad", build);
}

#[derive(Debug)]
struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(CenterCropPad {
        axes: spec.attrs.ints_opt("axes")?.map(<[i64]>::to_vec),
    }))
}

/// The remap from `x` to `y`: a centred window of each axis.
fn remap(x: &[usize], y: &[usize]) -> Remap {
    let st = strides(x);
    let mut m = Remap::new(y);
    for (k, a) in m.axes.iter_mut().enumerate() {
        a.in_dim = x[k];
        a.in_stride = st[k];
        a.step = 1;
        a.border = Border::Constant;
        a.start = (x[k] as i64 - y[k] as i64).div_euclid(2);
        if y[k] > x[k] {
            // Padding: the zeros before are floor((out - in) / 2).
            a.start = -((y[k] - x[k]) as i64 / 2);
        }
    }
    m
}

impl CenterCropPad {
    fn out_shape(&self, x: &[usize], shape: &Tensor) -> Result<Vec<usize>, OpError> {
        let sizes = int_list(shape, "CenterCropPad's shape")?;
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&a| axis_of_tensor(a, x.len()))
                .collect::<Result<_, _>>()?,
            None => (0..x.len()).collect(),
        };
        if sizes.len() != axes.len() {
            return Err(OpError::invalid(format!(
                "CenterCropPad: shape has {} sizes for {} axes (input of rank {}); give one per \
                 axis",
                sizes.len(),
                axes.len(),
                x.len()
            )));
        }
        let mut out = x.to_vec();
        for (&a, &s) in axes.iter().zip(&sizes) {
            if s < 0 {
                return Err(OpError::invalid(format!(
                    "CenterCropPad: size {s} for axis {a} is negative"
                )));
            }
            out[a] = Size::new(s as usize, format_args!("CenterCropPad's size {s}"))?.get();
        }
        size::check_shape(&out, "CenterCropPad's output")?;
        Ok(out)
    }
}

impl Op for CenterCropPad {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let out = self.out_shape(&x.shape, const_input(inputs, 1)?)?;
        Ok(vec![ValueType::new(x.dtype, out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let y = &outputs[0];
        Ok(vec![run_remap(x, &remap(x.shape(), &y.shape), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let y = outputs.first()?;
        if y.numel() == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        if x.numel() == 0 {
            return None;
        }
        let d = remap(&x.shape, &y.shape).dispatch(
            x.dtype.size(),
            BufRef::Input(0),
            BufRef::Output(0),
            x.numel(),
            y.numel(),
        )?;
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![d],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::gpu::gpu_same_bytes;
    use crate::testkit::{Rng, ints, node, run};

    fn op(axes: Option<&[i64]>) -> Box<dyn Op> {
        let attrs = axes.map(|a| vec![("axes", ints(a))]).unwrap_or_default();
        node("CenterCropPad", 18, attrs, 2, 1).unwrap()
    }

    #[test]
    fn crops_and_pads_about_the_centre() {
        // Rows 0..5 cropped to 2: start (5 - 2) / 2 = 1, rows 1 and 2. Columns 0..2 padded
        // to 5: (5 - 2) / 2 = 1 zero before, 2 after.
        let x = Tensor::from_vec(vec![5, 2], (1..=10).map(|v| v as f32).collect::<Vec<_>>());
        let shape = Tensor::from_vec(vec![2], vec![2i64, 5]);
        let y = run(&*op(None), &[Some(&x), Some(&shape)]).unwrap();
        assert_eq!(y[0].shape(), [2, 5]);
        assert_eq!(
            *y[0].view::<f32>().unwrap(),
            [0.0, 3.0, 4.0, 0.0, 0.0, 0.0, 5.0, 6.0, 0.0, 0.0]
        );
        // One axis, given negatively (rows: start (5 - 1) / 2 = 2); the other kept.
        let shape = Tensor::from_vec(vec![1], vec![1i64]);
        let y = run(&*op(Some(&[-2])), &[Some(&x), Some(&shape)]).unwrap();
        assert_eq!(*y[0].view::<f32>().unwrap(), [5.0, 6.0]);
    }

    #[test]
    fn gpu_matches_the_cpu() {
        let mut rng = Rng::new(9);
        for (shape, to) in [
            (vec![3, 8, 7], vec![3i64, 5, 10]),
            (vec![1, 20, 21, 2], vec![1, 33, 4, 2]),
            (vec![9], vec![4]),
        ] {
            let n: usize = shape.iter().product();
            let x = Tensor::from_vec(
                shape.clone(),
                rng.values(n).iter().map(|&v| v as f32).collect::<Vec<_>>(),
            );
            let s = Tensor::from_vec(vec![to.len()], to.clone());
            gpu_same_bytes(
                &*op(None),
                &[Some(&x), Some(&s)],
                &format!("{shape:?} -> {to:?}"),
            );
        }
    }

    #[test]
    fn a_size_per_axis_is_asked_for() {
        let x = Tensor::from_vec(vec![2, 2], vec![0u8; 4]);
        let shape = Tensor::from_vec(vec![1], vec![1i64]);
        let e = run(&*op(None), &[Some(&x), Some(&shape)]).unwrap_err();
        assert!(e.to_string().contains("1 sizes for 2 axes"), "{e}");
    }
}
