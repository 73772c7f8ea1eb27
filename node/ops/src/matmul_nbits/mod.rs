//! com.microsoft MatMulNBits: `Y = A x dequantize(B)^T (+ bias)`, the weight format of int4
//! LLMs exported by ONNX Runtime GenAI's model builder.
//!
//! B holds an N x K weight, row `n` quantized in blocks of `block_size` consecutive k: uint8
//! `[N, k_blocks, blob_size]`, `bits` (2, 4 or 8) per value packed from the low bits of each
//! byte up, the last block padded when K is not a multiple of `block_size`. Element (n, k) is
//! `(q - zero_point) * scale` with the scale and zero point of its block: `scales` `[N *
//! k_blocks]` or `[N, k_blocks]` in A's type; `zero_points` either packed like B (uint8, one
//! row of `ceil(k_blocks * bits / 8)` bytes per n) or unpacked in A's type, and
//! `2^(bits - 1)` when absent. A `g_idx` is accepted only when it is the identity grouping
//! (`g_idx[k] == k / block_size`); any other is refused as unsupported.
//!
//! `accuracy_level` only lets onnxruntime quantize or downcast A internally; VKML always
//! computes in f32 (f16 and bf16 inputs widened, the result rounded once), which is at least
//! as accurate as every level asks for.
//!
//! The weights are never expanded: the CPU kernel (cpu.rs) dequantizes a few rows of B at a
//! time, and the GPU kernels (gpu.rs) read the packed words and dequantize in registers
//! (few rows of A) or into shared memory tiles (many rows).

mod cpu;
mod gpu;
#[cfg(test)]
mod tests;

use super::util::{expect_dtype, opt, req, types_of};
use super::{GpuKernel, InferInput, KernelTuning, MS_DOMAIN, NodeSpec, Op, OpError, Registry};
use super::{ValueType, numeric};
use crate::tensor::{DType, Tensor, numel};

pub fn register(r: &mut Registry) {
    r.add_in(MS_DOMAIN, "MatMulNBits", MatMulNBits::build);
}

const NAME: &str = "MatMulNBits";

/// Input positions.
const A: usize = 0;
const B: usize = 1;
const SCALES: usize = 2;
const ZERO_POINTS: usize = 3;
const G_IDX: usize = 4;
const BIAS: usize = 5;

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MatMulNBits {
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
}

/// Where the zero points come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZeroPoints {
    /// None given: `2^(bits - 1)` for every block.
    Default,
    /// uint8, packed like B: block `b` of row `n` at bit `b * bits` of row `n`'s `row_bytes`.
    Packed { row_bytes: usize },
    /// One per block, in A's type.
    Float,
}

/// One product, with everything checked: A is `m` rows of `k`, Y `m` rows of `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    k_blocks: usize,
    /// Bytes of one block of B.
    blob: usize,
    zp: ZeroPoints,
    bias: bool,
    dtype: DType,
}

impl Geometry {
    /// Bytes of one row of B (all its blocks).
    fn row_bytes(&self) -> usize {
        self.k_blocks * self.blob
    }
}

fn invalid(what: impl std::fmt::Display) -> OpError {
    OpError::invalid(format!("{NAME}: {what}"))
}

fn unsupported(what: impl std::fmt::Display) -> OpError {
    OpError::unsupported(format!("{NAME}: {what}"))
}

impl MatMulNBits {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let a = spec.attrs;
        let required = |name: &str| {
            a.int_opt(name)?
                .ok_or_else(|| invalid(format!("the attribute '{name}' is required")))
        };
        let (k, n, block) = (required("K")?, required("N")?, required("block_size")?);
        let bits = a.int("bits", 4)?;
        if k < 1 || n < 1 {
            return Err(invalid(format!(
                "K and N must be positive, got K={k}, N={n}"
            )));
        }
        if !matches!(bits, 2 | 4 | 8) {
            return Err(unsupported(format!(
                "bits={bits}; onnxruntime defines 2, 4 and 8, which are the ones VKML runs"
            )));
        }
        if block < 16 || (block & (block - 1)) != 0 {
            return Err(invalid(format!(
                "block_size must be a power of two of at least 16, got {block}"
            )));
        }
        // A prepacked B is in a CUDA kernel's private layout, not the documented one.
        let prepacked = a.int("weight_prepacked", 0)?;
        if prepacked != 0 {
            return Err(unsupported(format!(
                "weight_prepacked={prepacked} (B in an execution provider's own layout); \
                 export the model without prepacking"
            )));
        }
        // A hint about onnxruntime's internal precision: VKML computes in f32 at every level.
        a.int("accuracy_level", 0)?;
        let size = |v: i64| usize::try_from(v).map_err(|_| invalid(format!("{v} is too large")));
        Ok(Box::new(MatMulNBits {
            k: size(k)?,
            n: size(n)?,
            bits: bits as usize,
            block: size(block)?,
        }))
    }

    fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block)
    }

    /// Checks every input's type and shape against the attributes.
    fn geometry(&self, inputs: &[Option<&ValueType>]) -> Result<Geometry, OpError> {
        let a = req(inputs, A)?;
        expect_dtype(a, &FLOATS, &format!("{NAME}: input A"))?;
        let (&k, lead) = a
            .shape
            .split_last()
            .ok_or_else(|| invalid("A must have rank 1 or more"))?;
        if k != self.k {
            return Err(invalid(format!(
                "A {:?} must end in K={} (the attribute)",
                a.shape, self.k
            )));
        }
        let (kb, n) = (self.k_blocks(), self.n);
        let blob = self.block * self.bits / 8;
        let b = req(inputs, B)?;
        if b.dtype != DType::U8 || b.shape != [n, kb, blob] {
            return Err(invalid(format!(
                "B must be uint8 [N, k_blocks, blob_size] = [{n}, {kb}, {blob}], found {b}"
            )));
        }
        let per_block = |t: &ValueType, what: &str, cols: usize| {
            if t.shape == [n * cols] || t.shape == [n, cols] {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{what} must have shape [{n}, {cols}] or [{}], found {:?}",
                    n * cols,
                    t.shape
                )))
            }
        };
        let same_type = |t: &ValueType, what: &str| {
            if t.dtype == a.dtype {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{what} must be {} like A, found {}",
                    a.dtype, t.dtype
                )))
            }
        };
        let scales = req(inputs, SCALES)?;
        same_type(scales, "scales")?;
        per_block(scales, "scales", kb)?;
        let zp = match opt(inputs, ZERO_POINTS) {
            None => ZeroPoints::Default,
            Some(z) if z.dtype == DType::U8 => {
                let row_bytes = (kb * self.bits).div_ceil(8);
                per_block(z, "packed uint8 zero_points", row_bytes)?;
                ZeroPoints::Packed { row_bytes }
            }
            Some(z) => {
                same_type(z, "zero_points (when not uint8)")?;
                per_block(z, "zero_points", kb)?;
                ZeroPoints::Float
            }
        };
        if let Some(g) = opt(inputs, G_IDX)
            && (g.dtype != DType::I32 || (g.shape != [self.k] && g.shape != [kb * self.block]))
        {
            return Err(invalid(format!(
                "g_idx must be int32 [{}] or [{}], found {g}",
                self.k,
                kb * self.block
            )));
        }
        let bias = opt(inputs, BIAS);
        if let Some(bias) = bias {
            same_type(bias, "bias")?;
            if bias.shape != [n] {
                return Err(invalid(format!(
                    "bias must have shape [{n}], found {:?}",
                    bias.shape
                )));
            }
        }
        Ok(Geometry {
            m: numel(lead),
            k,
            n,
            bits: self.bits,
            block: self.block,
            k_blocks: kb,
            blob,
            zp,
            bias: bias.is_some(),
            dtype: a.dtype,
        })
    }

    /// Refuses a g_idx other than the identity grouping (columns reordered by act-order
    /// quantization), which no kernel here implements.
    fn check_g_idx(&self, g: &Tensor) -> Result<(), OpError> {
        let v = g.to_i64_vec().map_err(invalid)?;
        match v
            .iter()
            .enumerate()
            .find(|&(k, &g)| g != (k / self.block) as i64)
        {
            None => Ok(()),
            Some((k, g)) => Err(unsupported(format!(
                "g_idx[{k}] = {g} where block {} was expected: reordered groups (act-order \
                 quantization) are not implemented; quantize without g_idx",
                k / self.block
            ))),
        }
    }

    /// The output type: A's, with the last axis N.
    fn output(&self, a: &ValueType) -> ValueType {
        let mut shape = a.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = self.n;
        }
        ValueType::new(a.dtype, shape)
    }
}

impl Op for MatMulNBits {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        self.geometry(&types_of(inputs))?;
        if let Some(g) = opt(inputs, G_IDX).and_then(|g| g.value) {
            self.check_g_idx(g)?;
        }
        Ok(vec![self.output(req(inputs, A)?.ty)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let g = self.geometry(&refs)?;
        if let Some(gi) = opt(inputs, G_IDX) {
            self.check_g_idx(gi)?;
        }
        let f32s = |t: &Tensor| -> Result<Vec<f32>, OpError> {
            Ok(match t.dtype() {
                DType::F32 => t.view::<f32>().map_err(invalid)?.into_owned(),
                _ => t
                    .to_f64_vec()
                    .map_err(invalid)?
                    .into_iter()
                    .map(|v| v as f32)
                    .collect(),
            })
        };
        let a = f32s(req(inputs, A)?)?;
        let zp = match (g.zp, opt(inputs, ZERO_POINTS)) {
            (ZeroPoints::Packed { row_bytes }, Some(z)) => cpu::Zp::Packed(z.bytes(), row_bytes),
            (ZeroPoints::Float, Some(z)) => cpu::Zp::Float(f32s(z)?),
            _ => cpu::Zp::Default,
        };
        let weights = cpu::Weights {
            g: &g,
            b: req(inputs, B)?.bytes(),
            scales: f32s(req(inputs, SCALES)?)?,
            zp,
        };
        let mut y = weights.product(&a);
        if let Some(bias) = opt(inputs, BIAS) {
            let bias = f32s(bias)?;
            for row in y.chunks_mut(g.n) {
                row.iter_mut().zip(&bias).for_each(|(v, b)| *v += b);
            }
        }
        let shape = match outputs.first() {
            Some(o) => o.shape.clone(),
            None => self.output(&ValueType::of(req(inputs, A)?)).shape,
        };
        let y = match g.dtype {
            DType::F32 => Tensor::from_vec(shape, y),
            other => numeric::from_f64(other, shape, y.into_iter().map(f64::from).collect())?,
        };
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        // Without its value a g_idx cannot be checked: the CPU kernel checks it when it runs.
        if opt(inputs, G_IDX).is_some() {
            return None;
        }
        gpu::kernel(&self.geometry(inputs).ok()?)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        _tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        // A known identity g_idx changes nothing; the kernels never read it.
        if let Some(g) = opt(inputs, G_IDX) {
            self.check_g_idx(g.value?).ok()?;
        }
        gpu::kernel(&self.geometry(&types_of(inputs)).ok()?)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        opt(inputs, A).map_or(0, |a| {
            let m = numel(&a.shape[..a.shape.len().saturating_sub(1)]) as u64;
            2 * m * self.n as u64 * self.k as u64
        })
    }
}
