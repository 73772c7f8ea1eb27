//! DynamicQuantizeLinear (opset 11): x (f32) to uint8 with a scale and zero point computed
//! from its own range, as ONNX defines them (see shaders/dynamic_qparams.comp). On a GPU, one
//! dispatch finds the two, and QuantizeLinear's kernel quantizes with them.

use super::super::util::req;
use super::super::{
    BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType,
};
use crate::tensor::{DType, Tensor};
use vkml_shaders::{dynamic_qparams, quantize as quantize_kernel};

pub fn register(r: &mut Registry) {
    r.add("DynamicQuantizeLinear", |_: &NodeSpec<'_>| {
        Ok(Box::new(DynamicQuantize) as Box<dyn Op>)
    });
}

#[derive(Debug)]
struct DynamicQuantize;

/// ONNX's scale and zero point for values in [min, max] (both already widened to hold 0).
fn params(min: f32, max: f32) -> (f32, u8) {
    let scale = if max == min { 1.0 } else { max - min } / 255.0;
    let zp = (0.0 - min / scale).clamp(0.0, 255.0);
    (scale, zp.round_ties_even() as u8)
}

impl Op for DynamicQuantize {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.dtype != DType::F32 {
            return Err(OpError::unsupported(format!(
                "DynamicQuantizeLinear of {} (ONNX defines it for float)",
                x.dtype
            )));
        }
        Ok(vec![
            ValueType::new(DType::U8, x.shape.clone()),
            ValueType::new(DType::F32, vec![]),
            ValueType::new(DType::U8, vec![]),
        ])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let v = x
            .view::<f32>()
            .map_err(|e| OpError::invalid(e.to_string()))?;
        let min = v.iter().fold(0.0f32, |a, &b| a.min(b));
        let max = v.iter().fold(0.0f32, |a, &b| a.max(b));
        let (scale, zp) = params(min, max);
        let y: Vec<u8> = v
            .iter()
            .map(|&e| ((e / scale).round_ties_even() + f32::from(zp)).clamp(0.0, 255.0) as u8)
            .collect();
        Ok(vec![
            Tensor::from_vec(x.shape().to_vec(), y),
            Tensor::scalar(scale),
            Tensor::scalar(zp),
        ])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let n = u32::try_from(req(inputs, 0).ok()?.numel()).ok()?;
        let qparams = Dispatch::new(
            dynamic_qparams::Variant::Main,
            dynamic_qparams::Buffers {
                x: BufRef::Input(0),
                scale: BufRef::Output(1),
                zp: BufRef::Output(2),
            },
            dynamic_qparams::Params { n },
            [1, 1, 1],
        );
        let quantize = Dispatch::new(
            quantize_kernel::Variant::F32B8,
            quantize_kernel::Buffers {
                x: BufRef::Input(0),
                scale: BufRef::Output(1),
                zp: BufRef::Output(2),
                y: BufRef::Output(0),
            },
            quantize_kernel::Params {
                n,
                kind: 0,
                inner: 1,
                dim: 1,
                block: 1,
                blocks: 1,
                fmt: 10,
                flags: 1,
            },
            super::super::util::groups_1d(n as usize, 256),
        );
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 {
                vec![qparams]
            } else {
                vec![qparams, quantize]
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{build, gpu_matches_cpu, run};

    #[test]
    fn onnx_documented_example() {
        // ONNX's operator documentation: x = [0, 2, -3, -2.5, 1.34, 0.5] gives scale
        // (2 - -3) / 255, zero point 153, y = [153, 255, 0, 26, 221, 179].
        let x = Tensor::from_vec(vec![6], vec![0.0f32, 2.0, -3.0, -2.5, 1.34, 0.5]);
        let y = run(
            &*build("DynamicQuantizeLinear", 11, &[]).unwrap(),
            &[Some(&x)],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), [153, 255, 0, 26, 221, 179]);
        assert_eq!(&*y[1].view::<f32>().unwrap(), &[5.0f32 / 255.0]);
        assert_eq!(y[2].to_i64_vec().unwrap(), [153]);
    }

    #[test]
    fn gpu_matches_the_cpu() {
        let op = build("DynamicQuantizeLinear", 11, &[]).unwrap();
        let mut s = 7u32;
        let x: Vec<f32> = (0..1000)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1 << 24) as f32 * 7.0 - 2.0
            })
            .collect();
        gpu_matches_cpu(&*op, &[Some(&Tensor::from_vec(vec![10, 100], x))], 0.0);
        let flat = Tensor::from_vec(vec![4], vec![1.5f32; 4]);
        gpu_matches_cpu(&*op, &[Some(&flat)], 0.0);
    }
}
