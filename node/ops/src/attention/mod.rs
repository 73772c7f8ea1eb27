//! Attention: ONNX's Attention (opsets 23 and 24), and ONNX Runtime's com.microsoft
//! MultiHeadAttention and GroupQueryAttention (what Optimum and the GenAI model builder emit
//! for LLMs).
//!
//! Each op only maps its inputs onto one description, [`core::Plan`]: the geometry (batch,
//! query and kv heads, query and key lengths, head sizes), where the rows of q, k, v and y
//! sit in their buffers (so 3-D, 4-D and packed inputs are read in place), the scale and
//! softcap, the causal offset, the local window, per-batch lengths and mask inputs with their
//! broadcast strides. Before attending, a plan may list packs: the present key and value
//! (past rows, then new rows, then zeros for GQA's fixed-size cache) and a rotated query.
//! Both kernels run a plan: `cpu.rs` row by row in f32, `gpu.rs` as dispatches.
//!
//! On the GPU, what is fused and why:
//! - attention.comp fuses q k^T, the scale, softcap, causal/window/length/mask handling, the
//!   softmax and the product with v: the S x T score matrix is never written to memory, which
//!   for long prompts is most of the memory traffic and, at T in the thousands, more memory
//!   than the model's weights. It tiles the keys through shared memory with an online
//!   softmax, skips tiles that no row of the block can see (above the causal diagonal,
//!   before the window, past the valid length), and handles a kv head's whole query group in
//!   one workgroup, so GQA reads each key tile once per group.
//! - For few query rows over a long cache (decoding), the key range is also split across
//!   workgroups and attention_combine.comp merges the partial softmaxes (flash-decoding):
//!   otherwise one query row per head would occupy a handful of workgroups.
//! - Rotary embedding, the input bias (MultiHeadAttention) and the transposition to BNSH
//!   happen in attention_pack.comp while the present key/value is written, which the op must
//!   output anyway; only a rotated query needs a scratch copy.
//! - A qk output, the S x T matrix the fused kernel avoids, is its own dispatch
//!   (attention_qk.comp, one workgroup per query row) when a model asks for it.
//! - Not on the GPU (the op runs on the CPU): two masks at once, head sizes above 256, types
//!   other than f32 and f16.

mod core;
mod cpu;
mod gpu;
mod gqa;
mod mha;
mod onnx;
#[cfg(test)]
mod tests;

use crate::tensor::Tensor;
use crate::{GpuKernel, InferInput, KernelTuning, MS_DOMAIN, Op, OpError, Registry, ValueType};
use core::Plan;

pub fn register(r: &mut Registry) {
    r.add("Attention", onnx::build);
    r.add_in(MS_DOMAIN, "GroupQueryAttention", gqa::build);
    r.add_in(MS_DOMAIN, "MultiHeadAttention", mha::build);
}

/// How an op maps a node's inputs onto a [`Plan`], and the output types that go with it.
trait Mapping: Send + Sync + std::fmt::Debug {
    fn plan(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(Plan, Vec<ValueType>), OpError>;

    /// See [`Op::writes_in_place`].
    fn writes_in_place(&self, _input: usize, _output: usize) -> bool {
        false
    }
}

/// An attention op: its mapping, run by the shared kernels.
#[derive(Debug)]
struct Attention<M>(M);

fn infer_inputs<'a>(
    inputs: &'a [Option<&'a Tensor>],
    types: &'a [Option<ValueType>],
) -> Vec<Option<InferInput<'a>>> {
    inputs
        .iter()
        .zip(types)
        .map(|(t, ty)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
        .collect()
}

impl<M: Mapping> Op for Attention<M> {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(self.0.plan(inputs)?.1)
    }

    fn writes_in_place(&self, input: usize, output: usize) -> bool {
        self.0.writes_in_place(input, output)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let (plan, _) = self.0.plan(&infer_inputs(inputs, &types))?;
        cpu::run(&plan, inputs, outputs)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        _tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        let (plan, _) = self.0.plan(inputs).ok()?;
        gpu::kernel(&plan, None)
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        // The shape rule has refused what does not plan; only the lengths are new here.
        let Ok((plan, _)) = self.0.plan(inputs) else {
            return Ok(());
        };
        match plan
            .lens
            .and_then(|l| inputs.get(l.input).copied().flatten()?.value)
        {
            Some(t) => {
                let lens = t
                    .to_i64_vec()
                    .map_err(|e| OpError::invalid(e.to_string()))?;
                cpu::check_lens(&plan, &lens)
            }
            None => Ok(()),
        }
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        let types: Vec<Option<InferInput<'_>>> = inputs
            .iter()
            .map(|t| t.map(|ty| InferInput { ty, value: None }))
            .collect();
        match self.0.plan(&types) {
            Ok((p, _)) => {
                let rows = (p.batch * p.q_heads * p.q_len) as u64;
                2 * rows * p.kv_len as u64 * (p.head_dim + p.v_head_dim) as u64
            }
            // A value the plan needs is unknown here (GQA's total length): the present's
            // length still gives the keys per row, about as many products as y has values.
            Err(_) => {
                let keys = outputs.get(1).and_then(|p| p.shape.get(2)).copied();
                let y = outputs.first().map_or(0, ValueType::numel);
                4 * y as u64 * keys.unwrap_or(1) as u64
            }
        }
    }
}
