//! What the view ops share: their CPU kernel (the same bytes under the output shape) and their
//! GPU fallback (a word copy), plus Identity, the simplest of them.

use crate::tensor::Tensor;
use crate::util::{groups_1d, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use vkml_shaders::copy;

/// The CPU kernel of every view op: input 0's bytes, shared, under the inferred output shape.
pub(super) fn reshape_to(
    inputs: &[Option<&Tensor>],
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, OpError> {
    let x = req(inputs, 0)?;
    let out = outputs
        .first()
        .ok_or_else(|| OpError::invalid("the output type is missing"))?;
    let y = x
        .reshaped(out.shape.clone())
        .map_err(|e| OpError::invalid(e.to_string()))?;
    Ok(vec![y])
}

/// A view op on the GPU. The Vulkan layer is expected to alias the output to the input (see
/// [`Op::is_view`]) and record nothing; this copy is what a layer that does not alias records,
/// so the result is right either way. It moves 32-bit words when the tensor is whole words,
/// and elements otherwise (a partial last word would be written past the end).
pub(crate) fn copy_kernel(ty: &ValueType) -> Option<GpuKernel> {
    let bytes = ty.bytes();
    if !bytes.is_multiple_of(4) {
        // Not whole words: copy element by element instead.
        let d = crate::remap::copy_dispatch(ty.numel(), ty.dtype.size())?;
        return Some(GpuKernel {
            scratch: Vec::new(),
            dispatches: vec![d],
        });
    }
    let words = u32::try_from(bytes / 4).ok()?;
    let dispatches = if words == 0 {
        Vec::new()
    } else {
        vec![Dispatch::new(
            copy::Variant::Main,
            copy::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
            },
            copy::Params { n: words },
            groups_1d(words as usize, 256),
        )]
    };
    Some(GpuKernel {
        scratch: Vec::new(),
        dispatches,
    })
}

#[derive(Debug)]
pub(super) struct Identity;

pub(super) fn build_identity(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Identity))
}

impl Op for Identity {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![req(inputs, 0)?.ty.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        reshape_to(inputs, outputs)
    }

    fn gpu(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        copy_kernel(outputs.first()?)
    }

    fn is_view(&self) -> bool {
        true
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}
