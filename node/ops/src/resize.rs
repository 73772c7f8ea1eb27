//! Resize (opsets 10, 11, 13, 18, 19) and the deprecated Upsample: nearest, linear and cubic
//! sampling, every coordinate transformation, scales or sizes, axes, keep_aspect_ratio_policy,
//! antialias, exclude_outside, cubic_coeff_a and extrapolation_value. Computed separably, one
//! axis at a time, in f64 (see taps.rs); the result is rounded back to the input's type.

mod taps;

use self::taps::{Mode, Nearest, Sampling, Transform, axis_taps};
use super::shape_ops::attr_since;
use super::util::{const_input, opt, req};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("Resize", build_resize);
    r.add("Upsample", build_upsample);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Where the op's inputs are.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    /// Resize-10 and Upsample-9: (X, scales).
    Scales1,
    /// Upsample-7: scales as an attribute.
    ScalesAttr,
    /// Resize-11 on: (X, roi, scales, sizes).
    Full,
}

#[derive(Debug)]
struct Resize {
    sampling: Sampling,
    layout: Layout,
    attr_scales: Vec<f32>,
    extrapolation: f64,
    axes: Option<Vec<i64>>,
    policy: Policy,
}

fn parse_mode(spec: &NodeSpec<'_>, legacy: bool) -> Result<Mode, OpError> {
    let nearest = if legacy {
        Nearest::Simple
    } else {
        match spec.attrs.string("nearest_mode", "round_prefer_floor")? {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            other => return Err(OpError::invalid(format!("unknown nearest_mode '{other}'"))),
        }
    };
    Ok(match spec.attrs.string("mode", "nearest")? {
        "nearest" => Mode::Nearest(nearest),
        // Upsample-7 calls linear "bilinear" in some exporters.
        "linear" | "bilinear" => Mode::Linear,
        "cubic" if !legacy => Mode::Cubic(spec.attrs.float("cubic_coeff_a", -0.75)? as f64),
        other => {
            return Err(OpError::invalid(format!(
                "{} mode '{other}' is not nearest, linear{}",
                spec.op_type,
                if legacy { "" } else { " or cubic" }
            )));
        }
    })
}

fn build_resize(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    for a in ["antialias", "axes", "keep_aspect_ratio_policy"] {
        attr_since(spec, a, 18)?;
    }
    let legacy = spec.opset < 11;
    let transform = if legacy {
        Transform::Asymmetric
    } else {
        match spec
            .attrs
            .string("coordinate_transformation_mode", "half_pixel")?
        {
            "half_pixel" => Transform::HalfPixel,
            "half_pixel_symmetric" if spec.opset >= 19 => Transform::HalfPixelSymmetric,
            "pytorch_half_pixel" => Transform::PytorchHalfPixel,
            "align_corners" => Transform::AlignCorners,
            "asymmetric" => Transform::Asymmetric,
            "tf_crop_and_resize" => Transform::TfCropAndResize,
            // tf_half_pixel_for_nn existed in opset 11 only; it equals half_pixel for nearest
            // without the -0.5, which no current exporter writes.
            other => {
                return Err(OpError::unsupported(format!(
                    "Resize coordinate_transformation_mode '{other}' at opset {}",
                    spec.opset
                )));
            }
        }
    };
    let mode = parse_mode(spec, legacy)?;
    let policy = match spec.attrs.string("keep_aspect_ratio_policy", "stretch")? {
        "stretch" => Policy::Stretch,
        "not_larger" => Policy::NotLarger,
        "not_smaller" => Policy::NotSmaller,
        other => {
            return Err(OpError::invalid(format!(
                "unknown keep_aspect_ratio_policy '{other}'"
            )));
        }
    };
    Ok(Box::new(Resize {
        sampling: Sampling {
            mode,
            transform,
            antialias: spec.attrs.int("antialias", 0)? != 0 && !matches!(mode, Mode::Nearest(_)),
            exclude_outside: spec.attrs.int("exclude_outside", 0)? != 0,
        },
        layout: if legacy {
            Layout::Scales1
        } else {
            Layout::Full
        },
        attr_scales: Vec::new(),
        extrapolation: spec.attrs.float("extrapolation_value", 0.0)? as f64,
        axes: spec.attrs.ints_opt("axes")?.map(<[i64]>::to_vec),
        policy,
    }))
}

fn build_upsample(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let mode = parse_mode(spec, true)?;
    let (layout, attr_scales) = if spec.opset < 9 {
        let s = spec
            .attrs
            .floats_opt("scales")?
            .ok_or_else(|| OpError::invalid("Upsample-7 needs its 'scales' attribute"))?;
        (Layout::ScalesAttr, s.to_vec())
    } else {
        (Layout::Scales1, Vec::new())
    };
    Ok(Box::new(Resize {
        sampling: Sampling {
            mode,
            transform: Transform::Asymmetric,
            antialias: false,
            exclude_outside: false,
        },
        layout,
        attr_scales,
        extrapolation: 0.0,
        axes: None,
        policy: Policy::Stretch,
    }))
}

fn floats(t: &Tensor, what: &str) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec()
        .map_err(|e| OpError::invalid(format!("{what}: {e}")))
}

/// What a resize does on each axis.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    out: Vec<usize>,
    scales: Vec<f64>,
    roi: Vec<(f64, f64)>,
    /// The axes resized, in the order they are applied.
    axes: Vec<usize>,
}

impl Resize {
    /// The plan from the values of (roi, scales, sizes), each possibly absent or empty.
    fn plan(
        &self,
        shape: &[usize],
        roi: Option<&Tensor>,
        scales: Option<&Tensor>,
        sizes: Option<&Tensor>,
    ) -> Result<Plan, OpError> {
        fn nonempty(t: Option<&Tensor>) -> Option<&Tensor> {
            t.filter(|t| t.numel() > 0)
        }
        let r = shape.len();
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&a| super::util::axis_of_tensor(a, r))
                .collect::<Result<_, _>>()?,
            None => (0..r).collect(),
        };
        let listed = |v: Vec<f64>, what: &str| -> Result<Vec<f64>, OpError> {
            if v.len() != axes.len() {
                return Err(OpError::invalid(format!(
                    "Resize {what} has {} entries for {} axes",
                    v.len(),
                    axes.len()
                )));
            }
            Ok(v)
        };
        let mut full_roi = vec![(0.0, 1.0); r];
        if let Some(t) = nonempty(roi) {
            let v = floats(t, "Resize roi")?;
            if v.len() != 2 * axes.len() {
                return Err(OpError::invalid(format!(
                    "Resize roi has {} entries, expected {}",
                    v.len(),
                    2 * axes.len()
                )));
            }
            for (i, &a) in axes.iter().enumerate() {
                full_roi[a] = (v[i], v[axes.len() + i]);
            }
        }
        let mut scale = vec![1.0; r];
        let mut out = shape.to_vec();
        let scale_list = if self.layout == Layout::ScalesAttr {
            Some(self.attr_scales.iter().map(|&v| v as f64).collect())
        } else {
            nonempty(scales)
                .map(|t| floats(t, "Resize scales"))
                .transpose()?
        };
        match (scale_list, nonempty(sizes)) {
            (Some(_), Some(_)) => {
                return Err(OpError::invalid("Resize takes scales or sizes, not both"));
            }
            (Some(s), None) => {
                let s = listed(s, "scales")?;
                for (i, &a) in axes.iter().enumerate() {
                    // Written so that NaN fails too.
                    if !(s[i] > 0.0 && s[i].is_finite()) {
                        return Err(OpError::invalid(format!(
                            "Resize scale {} must be positive and finite",
                            s[i]
                        )));
                    }
                    scale[a] = s[i];
                    out[a] = floor_size(s[i] * shape[a] as f64, a)?;
                }
            }
            (None, Some(t)) => {
                let v = super::shape_ops::int_list(t, "Resize sizes")?;
                let v = listed(v.iter().map(|&x| x as f64).collect(), "sizes")?;
                for (i, &a) in axes.iter().enumerate() {
                    if v[i] < 0.0 {
                        return Err(OpError::invalid("Resize sizes must not be negative"));
                    }
                    scale[a] = v[i] / shape[a] as f64;
                    out[a] = floor_size(v[i], a)?;
                }
                if self.policy != Policy::Stretch {
                    let pick = axes.iter().map(|&a| scale[a]);
                    let s = if self.policy == Policy::NotLarger {
                        pick.fold(f64::INFINITY, f64::min)
                    } else {
                        pick.fold(f64::NEG_INFINITY, f64::max)
                    };
                    for &a in &axes {
                        scale[a] = s;
                        out[a] = floor_size(s * shape[a] as f64 + 0.5, a)?;
                    }
                }
            }
            (None, None) => {
                return Err(OpError::invalid("Resize needs scales or sizes"));
            }
        }
        crate::size::check_shape(&out, "Resize's output")?;
        Ok(Plan {
            out,
            scales: scale,
            roi: full_roi,
            axes,
        })
    }

    fn values<'a>(&self, get: impl Fn(usize) -> Option<&'a Tensor>) -> [Option<&'a Tensor>; 3] {
        match self.layout {
            Layout::Full => [get(1), get(2), get(3)],
            Layout::Scales1 => [None, get(1), None],
            Layout::ScalesAttr => [None, None, None],
        }
    }

    fn run(&self, x: &Tensor, p: &Plan) -> Result<Tensor, OpError> {
        // An empty output has nothing to compute: its axes' taps could still be billions.
        if p.out.contains(&0) {
            return from_f64(x.dtype(), p.out.clone(), &[]);
        }
        if let Some(y) = self.nearest_gather(x, p) {
            return Ok(y);
        }
        let mut shape = x.shape().to_vec();
        let mut data = x
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("Resize input: {e}")))?;
        // Shrinking axes first: each axis is separable, so the order changes nothing but the
        // intermediate sizes, which then never pass the larger of the input and the output
        // (both checked against the budget); growing first could make one far larger.
        let mut axes = p.axes.clone();
        axes.sort_by_key(|&a| (p.out[a] as u128 * 1_000_000 / shape[a].max(1) as u128, a));
        for &a in &axes {
            let (in_w, out_w, scale, roi) = (shape[a], p.out[a], p.scales[a], p.roi[a]);
            let identity = (scale - 1.0).abs() < 1e-9
                && out_w == in_w
                && (roi.0.abs() < 1e-9 && (roi.1 - 1.0).abs() < 1e-9);
            if identity {
                continue;
            }
            if in_w == 0 && out_w > 0 {
                return Err(OpError::invalid("Resize cannot enlarge an empty axis"));
            }
            let taps = axis_taps(&self.sampling, in_w, out_w, scale, roi);
            let outer: usize = shape[..a].iter().product();
            let inner: usize = shape[a + 1..].iter().product();
            let mut next = vec![0.0; outer * out_w * inner];
            for o in 0..outer {
                for (y, t) in taps.taps.iter().enumerate() {
                    let dst = &mut next[(o * out_w + y) * inner..(o * out_w + y + 1) * inner];
                    match t {
                        None => dst.fill(self.extrapolation),
                        Some(t) => {
                            for &(i, w) in t {
                                if w == 0.0 {
                                    continue;
                                }
                                let src = &data[(o * in_w + i) * inner..(o * in_w + i + 1) * inner];
                                for (d, s) in dst.iter_mut().zip(src) {
                                    *d += w * s;
                                }
                            }
                        }
                    }
                }
            }
            data = next;
            shape[a] = out_w;
        }
        from_f64(x.dtype(), p.out.clone(), &data)
    }
}

impl Resize {
    /// The nearest modes read one input element per output element: the resize is then a
    /// gather of the elements as stored (no f64 round trip), rows of the output in parallel.
    /// None for the other modes, and where a coordinate reads the extrapolation value.
    fn nearest_gather(&self, x: &Tensor, p: &Plan) -> Option<Tensor> {
        if !matches!(self.sampling.mode, Mode::Nearest(_)) || x.shape().is_empty() {
            return None;
        }
        let shape = x.shape();
        let mut maps = Vec::with_capacity(shape.len());
        for (a, &in_w) in shape.iter().enumerate() {
            let out_w = p.out[a];
            if !p.axes.contains(&a) && out_w == in_w {
                maps.push((0..in_w).collect());
                continue;
            }
            if in_w == 0 {
                return None;
            }
            let taps = axis_taps(&self.sampling, in_w, out_w, p.scales[a], p.roi[a]);
            let map: Option<Vec<usize>> = (taps.taps.iter())
                .map(|t| {
                    // Both neighbours are listed, the one not read with weight 0.
                    let mut read = t.as_ref()?.iter().filter(|(_, w)| *w != 0.0);
                    match (read.next(), read.next()) {
                        (Some(&(i, 1.0)), None) => Some(i),
                        _ => None,
                    }
                })
                .collect();
            maps.push(map?);
        }
        macro_rules! typed {
            ($($d:ident => $t:ty),*) => {
                match x.dtype() {
                    $(DType::$d => {
                        let v = x.view::<$t>().ok()?;
                        Tensor::from_vec(p.out.clone(), gather(&v, shape, &p.out, &maps))
                    })*
                    _ => return None,
                }
            };
        }
        Some(typed!(
            F32 => f32, F16 => half::f16, BF16 => half::bf16, F64 => f64, I8 => i8, U8 => u8,
            I16 => i16, U16 => u16, I32 => i32, U32 => u32, I64 => i64, U64 => u64
        ))
    }
}

/// `y[o] = x[maps[0][o_0], ..., maps[r-1][o_r-1]]` over the output `out` (every map indexes
/// its axis of `shape`), a row of the last axis at a time.
fn gather<T: Copy + Default + Send + Sync>(
    x: &[T],
    shape: &[usize],
    out: &[usize],
    maps: &[Vec<usize>],
) -> Vec<T> {
    let r = shape.len();
    let mut stride = vec![1usize; r];
    for a in (0..r - 1).rev() {
        stride[a] = stride[a + 1] * shape[a + 1];
    }
    let last = out[r - 1].max(1);
    let mut y = vec![T::default(); out.iter().product()];
    crate::window::par::for_each_chunk(&mut y, last, last, |row, dst| {
        let (mut rem, mut off) = (row, 0);
        for a in (0..r - 1).rev() {
            off += maps[a][rem % out[a]] * stride[a];
            rem /= out[a];
        }
        for (d, &i) in dst.iter_mut().zip(&maps[r - 1]) {
            *d = x[off + i];
        }
    });
    y
}

/// f64 values back into `dtype`: floats rounded to nearest, integers rounded half to even and
/// saturated, as ONNX's reference does.
fn from_f64(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Result<Tensor, OpError> {
    macro_rules! int {
        ($t:ty) => {
            Tensor::from_vec(
                shape,
                v.iter()
                    .map(|&x| {
                        x.round_ties_even()
                            .clamp(<$t>::MIN as f64, <$t>::MAX as f64) as $t
                    })
                    .collect(),
            )
        };
    }
    Ok(match dtype {
        DType::F32 => Tensor::from_vec(shape, v.iter().map(|&x| x as f32).collect()),
        DType::F64 => Tensor::from_vec(shape, v.to_vec()),
        DType::F16 => Tensor::from_vec(shape, v.iter().map(|&x| half::f16::from_f64(x)).collect()),
        DType::BF16 => {
            Tensor::from_vec(shape, v.iter().map(|&x| half::bf16::from_f64(x)).collect())
        }
        DType::I8 => int!(i8),
        DType::U8 => int!(u8),
        DType::I16 => int!(i16),
        DType::U16 => int!(u16),
        DType::I32 => int!(i32),
        DType::U32 => int!(u32),
        DType::I64 => int!(i64),
        DType::U64 => int!(u64),
        DType::Bool => {
            return Err(OpError::invalid("Resize of bool tensors"));
        }
        d => return Err(OpError::unsupported(format!("Resize of {d} tensors"))),
    })
}

impl Op for Resize {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.dtype == DType::Bool {
            return Err(OpError::invalid("Resize of bool tensors"));
        }
        // Scales or sizes shape the output; roi only matters to tf_crop_and_resize, and
        // otherwise may be a run-time value.
        let get = |i: usize| -> Result<Option<&Tensor>, OpError> {
            match opt(inputs, i) {
                None => Ok(None),
                Some(v) if v.ty.numel() == 0 => Ok(None),
                Some(_) => const_input(inputs, i).map(Some),
            }
        };
        let roi = if self.sampling.transform == Transform::TfCropAndResize {
            get(1)?
        } else {
            opt(inputs, 1).and_then(|v| v.value)
        };
        let vals = match self.layout {
            Layout::Full => [roi, get(2)?, get(3)?],
            Layout::Scales1 => [None, get(1)?, None],
            Layout::ScalesAttr => [None, None, None],
        };
        let p = self.plan(&x.shape, vals[0], vals[1], vals[2])?;
        Ok(vec![ValueType::new(x.dtype, p.out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let v = self.values(|i| opt(inputs, i));
        let p = self.plan(x.shape(), v[0], v[1], v[2])?;
        Ok(vec![self.run(x, &p)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu::kernel(self, inputs, outputs)
    }
}

mod gpu;

#[cfg(test)]
mod tests;

/// An output size from a float product, rounded down: NaN, infinite or too large is an error.
fn floor_size(v: f64, axis: usize) -> Result<usize, OpError> {
    let what = format_args!("Resize's output size on axis {axis}");
    Ok(crate::size::Size::from_f64_ceil(v.floor(), what)?.get())
}
