//! Where (3-way broadcast, bool condition) and Dropout at inference.

use super::broadcast;
use crate::tensor::{DType, Tensor, numel};
use crate::util::{broadcast_shapes, broadcast_strides, groups_1d, opt, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};
use vkml_shaders::{fill, r#where};

#[derive(Debug)]
pub struct Where;

impl Where {
    pub fn build(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Where))
    }
}

/// Where only moves elements, so it runs on the raw element bits: one kernel per element size
/// serves every dtype, on the CPU and in shaders/where.comp alike.
fn select<U: bytemuck::Pod + Default>(
    c: &Tensor,
    x: &Tensor,
    y: &Tensor,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let cv: Vec<bool> = c.view_bool().map_err(|e| OpError::invalid(e.to_string()))?;
    let xv: Vec<U> = bytemuck::pod_collect_to_vec(x.bytes());
    let yv: Vec<U> = bytemuck::pod_collect_to_vec(y.bytes());
    let v = broadcast::ternary(
        (&cv, c.shape()),
        (&xv, x.shape()),
        (&yv, y.shape()),
        &out.shape,
        |k, p, q| if k { p } else { q },
    );
    Tensor::from_bytes(
        out.dtype,
        out.shape.clone(),
        bytemuck::cast_slice::<U, u8>(&v).to_vec().into(),
    )
    .map_err(|e| OpError::invalid(e.to_string()))
}

/// Rank the where shader walks after collapsing (its push constants hold 4 stride lists).
const WHERE_RANK: usize = 5;

impl Op for Where {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (c, x, y) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty, req(inputs, 2)?.ty);
        if c.dtype != DType::Bool {
            return Err(OpError::invalid(format!(
                "Where: the condition must be bool, is {}",
                c.dtype
            )));
        }
        if x.dtype != y.dtype {
            return Err(OpError::invalid(format!(
                "Where: X is {} but Y is {}",
                x.dtype, y.dtype
            )));
        }
        let out = broadcast_shapes(&broadcast_shapes(&c.shape, &x.shape)?, &y.shape)?;
        Ok(vec![ValueType::new(x.dtype, out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (c, x, y) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
        let out = outputs
            .first()
            .ok_or_else(|| OpError::invalid("no output type given"))?;
        let t = match x.dtype().size() {
            1 => select::<u8>(c, x, y, out),
            2 => select::<u16>(c, x, y, out),
            4 => select::<u32>(c, x, y, out),
            _ => select::<u64>(c, x, y, out),
        }?;
        Ok(vec![t])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let (c, x, y) = (
            req(inputs, 0).ok()?,
            req(inputs, 1).ok()?,
            req(inputs, 2).ok()?,
        );
        let out = outputs.first()?;
        let variant = match x.dtype.size() {
            1 => r#where::Variant::W8,
            2 => r#where::Variant::W16,
            4 => r#where::Variant::W32,
            _ => r#where::Variant::W64,
        };
        let n = out.numel();
        let word = |v: usize| u32::try_from(v).ok();
        let lay = broadcast::collapse(
            &out.shape,
            &[
                broadcast_strides(&c.shape, &out.shape),
                broadcast_strides(&x.shape, &out.shape),
                broadcast_strides(&y.shape, &out.shape),
            ],
        );
        let r = lay.dims.len();
        if r > WHERE_RANK {
            return None;
        }
        // Dims padded at the front with 1s, and each operand's strides over them.
        let mut p = r#where::Params {
            n: word(n)?,
            dims: [1; WHERE_RANK],
            ..Default::default()
        };
        let pad = WHERE_RANK - r;
        for i in pad..WHERE_RANK {
            p.dims[i] = word(lay.dims[i - pad])?;
            p.sc[i] = word(lay.strides[0][i - pad])?;
            p.sx[i] = word(lay.strides[1][i - pad])?;
            p.sy[i] = word(lay.strides[2][i - pad])?;
        }
        let dispatch = Dispatch::new(
            variant,
            r#where::Buffers {
                c: BufRef::Input(0),
                x: BufRef::Input(1),
                y: BufRef::Input(2),
                out_: BufRef::Output(0),
            },
            p,
            groups_1d(n, 256),
        );
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 { vec![] } else { vec![dispatch] },
        })
    }
}

/// Dropout at inference: the output is the input, the optional mask all true. Training mode
/// (opset 12's third input, or `is_test=0` before opset 7) would need random numbers and a
/// seed policy this runtime does not offer: Unsupported, unless the ratio is 0.
#[derive(Debug)]
pub struct Dropout {
    opset: i64,
    with_mask: bool,
    /// A training_mode input, whose value a view could not check.
    training_input: bool,
}

impl Dropout {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        if spec.opset < 7 && spec.attrs.int("is_test", 0)? == 0 {
            return Err(OpError::unsupported(
                "Dropout: training mode (is_test=0, opset < 7); only inference is implemented",
            ));
        }
        Ok(Box::new(Dropout {
            opset: spec.opset,
            with_mask: spec.num_outputs > 1,
            training_input: spec.opset >= 12 && spec.num_inputs > 2,
        }))
    }

    fn mask_type(&self, x: &ValueType) -> ValueType {
        // Before opset 10 the mask had the data's type.
        let d = if self.opset < 10 {
            x.dtype
        } else {
            DType::Bool
        };
        ValueType::new(d, x.shape.clone())
    }
}

/// A dispatch setting every element of output `out` (of type `ty`) to one (true for a bool),
/// or none for an empty output; `None` where the fill kernel has no variant for the type.
fn fill_one(ty: &ValueType, out: usize) -> Option<Option<Dispatch>> {
    let one = crate::cast::cast_tensor(&Tensor::from_bools(vec![1], vec![true]), ty.dtype).ok()?;
    let bytes: &[u8] = one.bytes();
    let variant = by_width!(bytes.len(), fill::Variant)?;
    let mut bits = [0u8; 8];
    bits.get_mut(..bytes.len())?.copy_from_slice(bytes);
    let v = u64::from_le_bytes(bits);
    let n = u32::try_from(ty.numel()).ok()?;
    Some((n > 0).then(|| {
        Dispatch::new(
            variant,
            fill::Buffers {
                y: BufRef::Output(out),
            },
            fill::Params {
                n,
                lo: v as u32,
                hi: (v >> 32) as u32,
            },
            groups_1d(n as usize, 256),
        )
    }))
}

/// Training mode is refused unless the ratio (default 0.5) is 0, when it drops nothing.
fn check_training(training: Option<&Tensor>, ratio: Option<&Tensor>) -> Result<(), OpError> {
    let Some(t) = training else { return Ok(()) };
    let on = t
        .view_bool()
        .map_err(|e| OpError::invalid(format!("Dropout: training_mode: {e}")))?;
    if !on.iter().any(|&b| b) {
        return Ok(());
    }
    let zero = match ratio {
        Some(r) => r
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("Dropout: ratio: {e}")))?
            .iter()
            .all(|&v| v == 0.0),
        None => false,
    };
    if zero {
        Ok(())
    } else {
        Err(OpError::unsupported(
            "Dropout: training_mode=true with a ratio other than 0; only inference is implemented",
        ))
    }
}

impl Op for Dropout {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        // Known at planning time: refuse training mode now. Otherwise the CPU kernel checks the
        // values when it runs (`gpu` declines, so it is the CPU kernel that runs).
        let ratio = opt(inputs, 1);
        if let Some(t) = opt(inputs, 2).and_then(|i| i.value)
            && ratio.is_none_or(|r| r.value.is_some())
        {
            check_training(Some(t), ratio.and_then(|r| r.value))?;
        }
        let mut out = vec![x.clone()];
        if self.with_mask {
            out.push(self.mask_type(x));
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        if self.opset >= 12 {
            check_training(opt(inputs, 2), opt(inputs, 1))?;
        }
        let mut out = vec![x.clone()];
        if let Some(m) = outputs.get(1) {
            let n = numel(&m.shape);
            let ones = match m.dtype {
                DType::Bool => Tensor::from_bools(m.shape.clone(), vec![true; n]),
                _ => super::super::cast::cast_tensor(
                    &Tensor::from_bools(m.shape.clone(), vec![true; n]),
                    m.dtype,
                )?,
            };
            out.push(ones);
        }
        Ok(out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        // A training_mode input has a value to check when the op runs: the CPU does that.
        if opt(inputs, 2).is_some() {
            return None;
        }
        // The output is the input: the view ops' copy, for a layer that does not alias (and
        // the copy there is when the mask makes this op no view).
        let mut k = crate::shape_ops::copy_kernel(outputs.first()?)?;
        if let Some(mask) = outputs.get(1) {
            k.dispatches.extend(fill_one(mask, 1)?);
        }
        Some(k)
    }

    fn is_view(&self) -> bool {
        !self.with_mask && !self.training_input
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}
