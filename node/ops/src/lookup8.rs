//! Lookup8, an op of VKML's own: y = table[x] for 8-bit x, the `table` attribute a tensor of
//! 256 8-bit values (its type is y's), indexed by x's byte (an int8 -1 reads entry 255).
//!
//! graph/fuse_qdq.rs makes it of QuantizeLinear(f(DequantizeLinear(x))) for an elementwise f,
//! its table the three ops' CPU kernels applied to all 256 bytes: the same results as the float
//! graph in one pass over bytes, as ONNX Runtime's QLinearSigmoid and QLinearLeakyRelu do.

use super::util::{groups_1d, req};
use super::{
    AttrValue, BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType,
};
use crate::tensor::{DType, Tensor};
use vkml_shaders::lookup8;

pub const OP_TYPE: &str = "Lookup8";

pub fn register(r: &mut Registry) {
    r.add(OP_TYPE, build);
}

#[derive(Debug)]
struct Lookup8 {
    table: Tensor,
}

fn is_byte(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let Some(table) = spec.attrs.tensor_opt("table")? else {
        return Err(OpError::invalid("Lookup8 has no table attribute"));
    };
    if !is_byte(table.dtype()) || table.shape() != [256] {
        return Err(OpError::invalid(format!(
            "Lookup8: the table is {} {:?}; it must be 256 int8 or uint8 values",
            table.dtype(),
            table.shape()
        )));
    }
    Ok(Box::new(Lookup8 {
        table: table.clone(),
    }))
}

/// The attributes of a Lookup8 node with `table`.
pub fn attrs(table: Tensor) -> Vec<(String, AttrValue)> {
    vec![("table".to_string(), AttrValue::Tensor(table))]
}

impl Op for Lookup8 {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !is_byte(x.dtype) {
            return Err(OpError::invalid(format!(
                "Lookup8 of {}: it maps int8 or uint8 values",
                x.dtype
            )));
        }
        Ok(vec![ValueType::new(self.table.dtype(), x.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let t = self.table.bytes();
        let y: Vec<u8> = x.bytes().iter().map(|&b| t[b as usize]).collect();
        let y = Tensor::from_bytes(self.table.dtype(), x.shape().to_vec(), y.into())
            .map_err(|e| OpError::invalid(e.to_string()))?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let n = u32::try_from(x.numel()).ok()?;
        if n == 0 {
            return None;
        }
        let table = self.table.bytes().iter().map(|&b| u32::from(b)).collect();
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                lookup8::Variant::Main,
                lookup8::Buffers {
                    x: BufRef::Input(0),
                    table: BufRef::Table(table),
                    y: BufRef::Output(0),
                },
                lookup8::Params { n },
                groups_1d(x.numel().div_ceil(4), 256),
            )],
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        req(inputs, 0).map_or(0, |x| x.numel() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attrs;
    use crate::testkit::gpu::gpu_same_bytes;
    use crate::testkit::{Rng, run};

    fn lookup(table: Tensor) -> Box<dyn Op> {
        build(&NodeSpec {
            name: "t",
            op_type: OP_TYPE,
            attrs: &Attrs(attrs(table).into_iter().collect()),
            opset: 21,
            num_inputs: 1,
            num_outputs: 1,
        })
        .unwrap()
    }

    #[test]
    fn maps_each_byte_through_the_table() {
        // The table negates as int8: entry b holds -(b as i8), wrapping at -128.
        let t: Vec<i8> = (0..=255u8).map(|b| (b as i8).wrapping_neg()).collect();
        let op = lookup(Tensor::from_vec(vec![256], t));
        let x = Tensor::from_vec(vec![2, 3], vec![0i8, 1, -1, 127, -128, 5]);
        let y = run(&*op, &[Some(&x)]).unwrap();
        assert_eq!(y[0].dtype(), DType::I8);
        assert_eq!(y[0].to_i64_vec().unwrap(), [0, -1, 1, -127, -128, -5]);
    }

    #[test]
    fn gpu_matches_the_cpu() {
        let mut rng = Rng::new(5);
        let t: Vec<u8> = (0..256).map(|_| rng.next_u64() as u8).collect();
        let op = lookup(Tensor::from_vec(vec![256], t));
        // Lengths a multiple of 4 (words) and not (bytes), past one workgroup.
        for n in [1, 7, 256, 1024, 4099, 70_001] {
            let x: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            let x = Tensor::from_vec(vec![n], x);
            gpu_same_bytes(&*op, &[Some(&x)], &format!("{n} bytes"));
        }
    }

    #[test]
    fn a_bad_table_is_refused() {
        let spec = |t: Tensor| {
            let a = Attrs(attrs(t).into_iter().collect());
            build(&NodeSpec {
                name: "t",
                op_type: OP_TYPE,
                attrs: &a,
                opset: 21,
                num_inputs: 1,
                num_outputs: 1,
            })
            .map(|_| ())
        };
        let e = spec(Tensor::from_vec(vec![3], vec![1u8, 2, 3])).unwrap_err();
        assert!(e.to_string().contains("256 int8 or uint8"), "{e}");
    }
}
