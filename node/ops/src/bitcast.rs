//! BitCast (opset 26): the same bytes read as another type of the same width. On a GPU the
//! output is the input's buffer (a view); only a cast to bool, whose bytes must be 0 or 1,
//! is computed: any non-zero byte is true.

use bytes::Bytes;

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::cast;

pub fn register(r: &mut Registry) {
    r.add("BitCast", build);
}

#[derive(Debug)]
struct BitCast {
    to: DType,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let code = spec.attrs.int("to", -1)?;
    if code == -1 {
        return Err(OpError::invalid("BitCast: attribute 'to' is required"));
    }
    let to = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx_code)
        .ok_or_else(|| OpError::unsupported(format!("BitCast: target type code {code}")))?;
    Ok(Box::new(BitCast { to }))
}

impl BitCast {
    /// Whether the output's bytes are the input's as they are.
    fn same_bytes(&self, from: DType) -> bool {
        self.to != DType::Bool || from == DType::Bool
    }
}

impl Op for BitCast {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.dtype.size() != self.to.size() {
            return Err(OpError::invalid(format!(
                "BitCast: {} is {} bits wide and {} {}; the widths must be equal",
                x.dtype,
                8 * x.dtype.size(),
                self.to,
                8 * self.to.size()
            )));
        }
        Ok(vec![ValueType::new(self.to, x.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let bytes = if self.same_bytes(x.dtype()) {
            x.bytes().clone()
        } else {
            x.bytes()
                .iter()
                .map(|&b| u8::from(b != 0))
                .collect::<Bytes>()
        };
        let y = Tensor::from_bytes(self.to, x.shape().to_vec(), bytes)
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn is_view(&self) -> bool {
        // A bool's bytes from another type need normalising; that one is a kernel.
        self.to != DType::Bool
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let n = x.numel();
        let dispatch = if self.same_bytes(x.dtype) {
            crate::remap::copy_dispatch(n, 1)?
        } else {
            Dispatch::new(
                cast::Variant::U8Bool,
                cast::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                cast::Params {
                    n: u32::try_from(n).ok()?,
                },
                groups_1d(n, 256),
            )
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 { vec![] } else { vec![dispatch] },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{build, gpu_matches_cpu, run1};

    fn bitcast(to: DType) -> Box<dyn Op> {
        build(
            "BitCast",
            26,
            &[("to", AttrValue::Int(to.onnx_code().into()))],
        )
        .unwrap()
    }

    #[test]
    fn the_bytes_stay_and_the_type_changes() {
        let x = Tensor::from_vec(vec![3], vec![1.0f32, -2.0, 0.5]);
        let y = run1(&*bitcast(DType::I32), &[&x]).unwrap();
        // IEEE 754 single precision: 1.0 = 0x3f800000, -2.0 = 0xc0000000, 0.5 = 0x3f000000.
        assert_eq!(
            &*y.view::<i32>().unwrap(),
            &[0x3f80_0000, 0xc000_0000u32 as i32, 0x3f00_0000]
        );
        let u = Tensor::from_vec(vec![3], vec![0u8, 1, 7]);
        let b = run1(&*bitcast(DType::Bool), &[&u]).unwrap();
        assert_eq!(b.view_bool().unwrap(), [false, true, true]);
        assert_eq!(b.bytes().as_ref(), &[0, 1, 1]);
    }

    #[test]
    fn widths_must_match() {
        let x = Tensor::from_vec(vec![2], vec![1i64, 2]);
        let e = crate::testkit::infer_known(&*bitcast(DType::F32), &[Some(&x)]).unwrap_err();
        assert!(e.to_string().contains("widths must be equal"), "{e}");
        assert!(build("BitCast", 26, &[]).is_err());
    }

    #[test]
    fn gpu_bool_from_bytes_matches_the_cpu() {
        let u = Tensor::from_vec(vec![5], vec![0u8, 1, 2, 255, 0]);
        gpu_matches_cpu(&*bitcast(DType::Bool), &[Some(&u)], 0.0);
        let op = bitcast(DType::I8);
        assert!(op.is_view());
    }
}
