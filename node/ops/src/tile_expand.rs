//! Tile, Expand, DepthToSpace and SpaceToDepth: remaps whose maps follow from the input and
//! output shapes alone (Tile is a wrap, Expand a zero step, the depth ops transposes of
//! reshapes), so their GPU kernels need no pre-pass.

use super::remap::{Border, Remap};
use super::shape_ops::int_list;
use super::slice::run_remap;
use super::util::{broadcast_shapes, const_input, req};
use super::{BufRef, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::size::{self, Size};
use crate::tensor::{Tensor, strides};

pub fn register(r: &mut Registry) {
    r.add("Tile", build_tile);
    r.add("Expand", build_expand);
    r.add("DepthToSpace", build_depth_to_space);
    r.add("SpaceToDepth", build_space_to_depth);
}

/// Runs a remap that depends only on the shapes: the CPU and GPU sides of these ops.
trait ShapeRemap {
    fn remap(&self, input: &[usize], output: &[usize]) -> Result<Remap, OpError>;
}

fn cpu<R: ShapeRemap>(op: &R, x: &Tensor, out: &ValueType) -> Result<Vec<Tensor>, OpError> {
    let m = op.remap(x.shape(), &out.shape)?;
    Ok(vec![run_remap(x, &m, out)?])
}

fn gpu<R: ShapeRemap>(
    op: &R,
    inputs: &[Option<&ValueType>],
    outputs: &[ValueType],
) -> Option<GpuKernel> {
    let x = inputs.first().copied().flatten()?;
    let y = outputs.first()?;
    let dispatches = if y.numel() == 0 {
        vec![]
    } else if x.numel() == 0 {
        return None;
    } else {
        let m = op.remap(&x.shape, &y.shape).ok()?;
        vec![m.dispatch(
            x.dtype.size(),
            BufRef::Input(0),
            BufRef::Output(0),
            x.numel(),
            y.numel(),
        )?]
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches,
    })
}

#[derive(Debug)]
struct Tile {
    /// Tile-1 takes (tiles, axis) scalars as inputs 1 and 2 instead of a repeats list.
    legacy: bool,
}

fn build_tile(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Tile {
        legacy: spec.opset < 6,
    }))
}

impl Tile {
    fn out_shape(&self, shape: &[usize], vals: &[&Tensor]) -> Result<Vec<usize>, OpError> {
        let reps: Vec<i64> = if self.legacy {
            let tiles = vals[0]
                .to_i64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))?;
            let axis = vals[1]
                .to_i64_vec()
                .map_err(|e| OpError::invalid(e.to_string()))?;
            let (Some(&t), Some(&a)) = (tiles.first(), axis.first()) else {
                return Err(OpError::invalid("Tile-1 needs scalar tiles and axis"));
            };
            let a = super::util::axis_of_tensor(a, shape.len())?;
            (0..shape.len())
                .map(|k| if k == a { t } else { 1 })
                .collect()
        } else {
            int_list(vals[0], "Tile's repeats")?
        };
        if reps.len() != shape.len() {
            return Err(OpError::invalid(format!(
                "Tile repeats {reps:?} has {} entries for an input of rank {}",
                reps.len(),
                shape.len()
            )));
        }
        let out = shape
            .iter()
            .zip(&reps)
            .map(|(&d, &r)| {
                let r = Size::from_i64(r, format_args!("an entry of Tile's repeats {reps:?}"))?;
                let d = Size::new(d, "a dimension of Tile's input")?;
                Ok(d.mul(
                    r,
                    format_args!("Tile of {shape:?} by {reps:?}: an output dimension"),
                )?
                .get())
            })
            .collect::<Result<Vec<_>, OpError>>()?;
        size::check_shape(&out, "Tile's output")?;
        Ok(out)
    }
}

impl ShapeRemap for Tile {
    fn remap(&self, input: &[usize], output: &[usize]) -> Result<Remap, OpError> {
        let st = strides(input);
        let mut m = Remap::new(output);
        for (k, a) in m.axes.iter_mut().enumerate() {
            a.in_dim = input[k];
            a.in_stride = st[k];
            a.step = 1;
            a.border = Border::Wrap;
        }
        Ok(m)
    }
}

impl Op for Tile {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let vals = if self.legacy {
            vec![const_input(inputs, 1)?, const_input(inputs, 2)?]
        } else {
            vec![const_input(inputs, 1)?]
        };
        Ok(vec![ValueType::new(
            x.dtype,
            self.out_shape(&x.shape, &vals)?,
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let vals = if self.legacy {
            vec![req(inputs, 1)?, req(inputs, 2)?]
        } else {
            vec![req(inputs, 1)?]
        };
        let out = ValueType::new(x.dtype(), self.out_shape(x.shape(), &vals)?);
        cpu(self, x, &out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu(self, inputs, outputs)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[derive(Debug)]
struct Expand;

fn build_expand(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Expand))
}

impl Expand {
    fn out_shape(input: &[usize], shape: &Tensor) -> Result<Vec<usize>, OpError> {
        let s = int_list(shape, "Expand's shape")?;
        let s = size::shape_from_i64(&s, "Expand's shape")?;
        let out = broadcast_shapes(input, &s)?;
        size::check_shape(&out, "Expand's output")?;
        Ok(out)
    }
}

impl ShapeRemap for Expand {
    fn remap(&self, input: &[usize], output: &[usize]) -> Result<Remap, OpError> {
        let st = super::util::broadcast_strides(input, output);
        let pad = output.len() - input.len();
        let mut m = Remap::new(output);
        for (k, a) in m.axes.iter_mut().enumerate() {
            a.in_stride = st[k];
            if k >= pad && input[k - pad] != 1 {
                a.in_dim = input[k - pad];
                a.step = 1;
            }
        }
        Ok(m)
    }
}

impl Op for Expand {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let shape = Expand::out_shape(&x.shape, const_input(inputs, 1)?)?;
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let out = ValueType::new(x.dtype(), Expand::out_shape(x.shape(), req(inputs, 1)?)?);
        cpu(self, x, &out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu(self, inputs, outputs)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

/// DepthToSpace (`to_space`) and SpaceToDepth: a 4-D input seen as 6-D and transposed.
#[derive(Debug)]
struct DepthSpace {
    to_space: bool,
    block: usize,
    /// DepthToSpace's CRD mode (opset 11); DCR otherwise.
    crd: bool,
}

fn block(spec: &NodeSpec<'_>) -> Result<usize, OpError> {
    let b = spec
        .attrs
        .int_opt("blocksize")?
        .ok_or_else(|| OpError::invalid(format!("{} needs its 'blocksize'", spec.op_type)))?;
    if b <= 0 {
        return Err(OpError::invalid(format!("blocksize {b} must be positive")));
    }
    Ok(Size::from_i64(b, format_args!("{}: blocksize", spec.op_type))?.get())
}

fn build_depth_to_space(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let crd = match spec.attrs.string("mode", "DCR")? {
        "DCR" => false,
        "CRD" if spec.opset >= 11 => true,
        other => {
            return Err(OpError::invalid(format!(
                "DepthToSpace mode '{other}' is not DCR or CRD (CRD from opset 11)"
            )));
        }
    };
    Ok(Box::new(DepthSpace {
        to_space: true,
        block: block(spec)?,
        crd,
    }))
}

fn build_space_to_depth(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(DepthSpace {
        to_space: false,
        block: block(spec)?,
        crd: false,
    }))
}

impl DepthSpace {
    fn out_shape(&self, s: &[usize]) -> Result<Vec<usize>, OpError> {
        let [n, c, h, w] = s else {
            return Err(OpError::invalid(format!(
                "the input must be 4-D [N, C, H, W], found {s:?}"
            )));
        };
        let b = Size::new(self.block, "blocksize")?;
        let sz = |v: usize| Size::new(v, "a dimension of the input");
        let bb = b.mul(b, "blocksize²")?.get();
        let out = if self.to_space {
            if !c.is_multiple_of(bb) {
                return Err(OpError::invalid(format!(
                    "DepthToSpace: {c} channels do not divide by blocksize² = {bb}"
                )));
            }
            let what = "DepthToSpace's output";
            vec![
                *n,
                c / bb,
                sz(*h)?.mul(b, what)?.get(),
                sz(*w)?.mul(b, what)?.get(),
            ]
        } else {
            let b = b.get();
            if !h.is_multiple_of(b) || !w.is_multiple_of(b) {
                return Err(OpError::invalid(format!(
                    "SpaceToDepth: {h} x {w} does not divide by blocksize {b}"
                )));
            }
            vec![
                *n,
                sz(*c)?
                    .mul(Size::new(bb, "blocksize²")?, "SpaceToDepth's output")?
                    .get(),
                h / b,
                w / b,
            ]
        };
        size::check_shape(&out, "the output")?;
        Ok(out)
    }
}

impl ShapeRemap for DepthSpace {
    fn remap(&self, input: &[usize], _output: &[usize]) -> Result<Remap, OpError> {
        self.out_shape(input)?;
        let (n, c, h, w) = (input[0], input[1], input[2], input[3]);
        let b = self.block;
        let (six, perm): (Vec<usize>, [usize; 6]) = match (self.to_space, self.crd) {
            (true, false) => (vec![n, b, b, c / (b * b), h, w], [0, 3, 4, 1, 5, 2]),
            (true, true) => (vec![n, c / (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]),
            (false, _) => (vec![n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4]),
        };
        Ok(Remap::transpose(&six, &perm))
    }
}

impl Op for DepthSpace {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        Ok(vec![ValueType::new(x.dtype, self.out_shape(&x.shape)?)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let out = ValueType::new(x.dtype(), self.out_shape(x.shape())?);
        cpu(self, x, &out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu(self, inputs, outputs)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
