//! Sliding-window geometry shared by Conv and the pools: the attributes every windowed op has
//! (kernel_shape, strides, dilations, pads, auto_pad), resolved against an input's spatial
//! sizes into one [`Axis`] per spatial dimension.

use crate::size::Size;
use crate::{Attrs, OpError};

/// How the padding is chosen. `auto_pad` is deprecated in ONNX but still common in old models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoPad {
    /// The explicit `pads` attribute.
    NotSet,
    /// Output size ceil(input / stride); an odd total pad puts the extra one at the end.
    SameUpper,
    /// As SameUpper, with the extra one at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

impl AutoPad {
    pub fn parse(op: &str, s: &str) -> Result<AutoPad, OpError> {
        match s {
            // Some exporters write an empty string for the default.
            "NOTSET" | "" => Ok(AutoPad::NotSet),
            "SAME_UPPER" => Ok(AutoPad::SameUpper),
            "SAME_LOWER" => Ok(AutoPad::SameLower),
            "VALID" => Ok(AutoPad::Valid),
            other => Err(OpError::invalid(format!(
                "{op}: auto_pad '{other}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
            ))),
        }
    }
}

/// The window attributes as written on the node. Their lengths can only be checked once the
/// input's rank is known, in [`WindowAttrs::resolve`].
#[derive(Debug, Clone, PartialEq)]
pub struct WindowAttrs {
    pub kernel_shape: Option<Vec<usize>>,
    pub strides: Option<Vec<usize>>,
    pub dilations: Option<Vec<usize>>,
    /// `[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`.
    pub pads: Option<Vec<usize>>,
    pub auto_pad: AutoPad,
}

/// One spatial axis of a windowed op, fully resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Axis {
    pub input: usize,
    pub output: usize,
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
    pub pad_begin: usize,
    pub pad_end: usize,
}

impl Axis {
    /// An axis that does nothing: size 1, kernel 1.
    pub const UNIT: Axis = Axis {
        input: 1,
        output: 1,
        kernel: 1,
        stride: 1,
        dilation: 1,
        pad_begin: 0,
        pad_end: 0,
    };

    /// Elements of one input plane (the product of the spatial input sizes).
    pub fn input_volume(axes: &[Axis]) -> usize {
        axes.iter().map(|a| a.input).product()
    }

    /// Elements of one output plane.
    pub fn output_volume(axes: &[Axis]) -> usize {
        axes.iter().map(|a| a.output).product()
    }

    /// `axes` padded in front to exactly three with [`Axis::UNIT`], so kernels can be written
    /// once for 1-D to 3-D.
    pub fn pad_to_3(axes: &[Axis]) -> [Axis; 3] {
        let mut out = [Axis::UNIT; 3];
        out[3 - axes.len()..].copy_from_slice(axes);
        out
    }

    /// Input coordinate of output `o`'s first tap; negative when it lies in the padding.
    pub fn start(&self, o: usize) -> i64 {
        (o * self.stride) as i64 - self.pad_begin as i64
    }

    /// The taps `k` of output `o`'s window whose coordinate `start + k * dilation` lies in
    /// `[lo, hi)`, as a half-open range (empty when `first >= last`).
    pub fn taps_within(&self, o: usize, lo: i64, hi: i64) -> (usize, usize) {
        let start = self.start(o);
        let d = self.dilation as i64;
        let first = ((lo - start).max(0) + d - 1) / d;
        let last = ((hi - start).max(0) + d - 1) / d;
        let k = self.kernel as i64;
        (first.min(k) as usize, last.min(k) as usize)
    }

    /// The taps of output `o` that read the input itself, not its padding.
    pub fn taps_inside(&self, o: usize) -> (usize, usize) {
        self.taps_within(o, 0, self.input as i64)
    }
}

fn ints_at_least(
    op: &str,
    attrs: &Attrs,
    name: &str,
    min: i64,
) -> Result<Option<Vec<usize>>, OpError> {
    let Some(values) = attrs.ints_opt(name)? else {
        return Ok(None);
    };
    if let Some(bad) = values.iter().find(|&&v| v < min) {
        return Err(OpError::invalid(format!(
            "{op}: every value of '{name}' must be at least {min}, found {bad} in {values:?}"
        )));
    }
    let sizes = values
        .iter()
        .map(|&v| Size::from_i64(v, format_args!("{op}: a value of '{name}' {values:?}")))
        .map(|s| s.map(Size::get))
        .collect::<Result<_, _>>()?;
    Ok(Some(sizes))
}

impl WindowAttrs {
    pub fn parse(op: &str, attrs: &Attrs) -> Result<WindowAttrs, OpError> {
        let auto_pad = AutoPad::parse(op, attrs.string("auto_pad", "NOTSET")?)?;
        let pads = ints_at_least(op, attrs, "pads", 0)?;
        if auto_pad != AutoPad::NotSet && pads.as_ref().is_some_and(|p| p.iter().any(|&v| v != 0)) {
            return Err(OpError::invalid(format!(
                "{op}: 'pads' {:?} cannot be combined with auto_pad {auto_pad:?}",
                pads.unwrap_or_default()
            )));
        }
        Ok(WindowAttrs {
            kernel_shape: ints_at_least(op, attrs, "kernel_shape", 1)?,
            strides: ints_at_least(op, attrs, "strides", 1)?,
            dilations: ints_at_least(op, attrs, "dilations", 1)?,
            pads,
            auto_pad,
        })
    }

    /// Resolves the window over `input` (the spatial sizes) with the given kernel. `ceil_mode`
    /// is the pools' attribute (false for Conv).
    pub fn resolve(
        &self,
        op: &str,
        input: &[usize],
        kernel: &[usize],
        ceil_mode: bool,
    ) -> Result<Vec<Axis>, OpError> {
        let rank = input.len();
        let check = |name: &str, v: &Option<Vec<usize>>, want: usize| match v {
            Some(v) if v.len() != want => Err(OpError::invalid(format!(
                "{op}: '{name}' has {} values but the input has {rank} spatial axes (expected {want})",
                v.len()
            ))),
            _ => Ok(()),
        };
        check("strides", &self.strides, rank)?;
        check("dilations", &self.dilations, rank)?;
        check("pads", &self.pads, 2 * rank)?;
        if kernel.len() != rank {
            return Err(OpError::invalid(format!(
                "{op}: the kernel has {} spatial axes but the input has {rank}",
                kernel.len()
            )));
        }
        (0..rank)
            .map(|i| {
                let axis = Axis {
                    input: input[i],
                    output: 0,
                    kernel: kernel[i],
                    stride: self.strides.as_ref().map_or(1, |s| s[i]),
                    dilation: self.dilations.as_ref().map_or(1, |d| d[i]),
                    pad_begin: self.pads.as_ref().map_or(0, |p| p[i]),
                    pad_end: self.pads.as_ref().map_or(0, |p| p[rank + i]),
                };
                self.resolve_axis(op, i, axis, ceil_mode)
            })
            .collect()
    }

    fn resolve_axis(
        &self,
        op: &str,
        i: usize,
        mut a: Axis,
        ceil_mode: bool,
    ) -> Result<Axis, OpError> {
        if a.kernel == 0 {
            return Err(OpError::invalid(format!(
                "{op}: kernel size 0 on spatial axis {i}"
            )));
        }
        // Lazy: the message is only written when a check fails. Formatting it eagerly, a
        // dozen strings per axis, was 15% of a small ResNet's CPU time (Conv and the pools
        // resolve their windows on every run).
        let what = |name| AxisWhat { op, name, axis: i };
        let size = |v: usize, name| Size::new(v, what(name));
        let (s, n) = (size(a.stride, "stride")?, size(a.input, "input size")?);
        // (kernel - 1) * dilation + 1, checked: the kernel and dilation come from the model.
        let extent = size(a.kernel - 1, "kernel")?
            .mul(size(a.dilation, "dilation")?, what("window extent"))?
            .add(Size::ONE, what("window extent"))?;
        let (pb, pe) = (size(a.pad_begin, "pad")?, size(a.pad_end, "pad")?);
        match self.auto_pad {
            AutoPad::NotSet => {
                let padded = n
                    .add(pb, what("padded size"))?
                    .add(pe, what("padded size"))?;
                if padded >= extent {
                    let span = padded.get() - extent.get();
                    a.output = if ceil_mode {
                        span.div_ceil(s.get()) + 1
                    } else {
                        span / s.get() + 1
                    };
                    // A last window that would start past the input and its leading padding
                    // covers nothing real: drop it (the rule PyTorch and onnxruntime use).
                    if ceil_mode && (a.output - 1) * s.get() >= n.get() + pb.get() {
                        a.output -= 1;
                    }
                }
            }
            AutoPad::Valid => {
                a.pad_begin = 0;
                a.pad_end = 0;
                // The spec's ceil and floor formulas agree here:
                // ceil((n - extent + 1) / s) == floor((n - extent) / s) + 1.
                a.output = if n >= extent {
                    (n.get() - extent.get()) / s.get() + 1
                } else {
                    0
                };
            }
            AutoPad::SameUpper | AutoPad::SameLower => {
                a.output = n.get().div_ceil(s.get());
                let last = size(a.output.max(1) - 1, "output size")?.mul(s, what("last window"))?;
                let total = last
                    .add(extent, what("last window"))?
                    .get()
                    .saturating_sub(n.get());
                let small = total / 2;
                (a.pad_begin, a.pad_end) = if self.auto_pad == AutoPad::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
            }
        }
        if a.output == 0 {
            return Err(OpError::invalid(format!(
                "{op}: spatial axis {i} would have no output: input size {n}, pads ({}, {}), \
                 kernel {} with dilation {} spans {extent}",
                a.pad_begin, a.pad_end, a.kernel, a.dilation
            )));
        }
        // Every window's furthest coordinate, (output - 1) * stride + extent, is then a size
        // too, so the kernels' index arithmetic (in usize and i64) cannot overflow.
        size(a.output - 1, "output size")?
            .mul(s, what("last window's start"))?
            .add(extent, what("last window's end"))?;
        Ok(a)
    }
}

/// "{op}: the {name} of spatial axis {axis}", for a size check's error.
#[derive(Clone, Copy)]
struct AxisWhat<'a> {
    op: &'a str,
    name: &'static str,
    axis: usize,
}

impl std::fmt::Display for AxisWhat<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: the {} of spatial axis {}",
            self.op, self.name, self.axis
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(
        pads: Option<Vec<usize>>,
        strides: usize,
        dil: usize,
        auto_pad: AutoPad,
    ) -> WindowAttrs {
        WindowAttrs {
            kernel_shape: None,
            strides: Some(vec![strides]),
            dilations: Some(vec![dil]),
            pads,
            auto_pad,
        }
    }

    fn one(w: &WindowAttrs, input: usize, kernel: usize, ceil: bool) -> Axis {
        w.resolve("T", &[input], &[kernel], ceil).unwrap()[0]
    }

    // Hand-derived sizes; the ONNX backend cases they mirror are named.
    #[test]
    fn explicit_pads_floor_and_ceil() {
        // averagepool_2d_ceil: 4 wide, kernel 3, stride 2 -> floor 1, ceil 2.
        let w = attrs(None, 2, 1, AutoPad::NotSet);
        assert_eq!(one(&w, 4, 3, false).output, 1);
        assert_eq!(one(&w, 4, 3, true).output, 2);
        // averagepool_2d_ceil_last_window_starts_on_pad: 2 wide, pads 1+1, kernel 3, stride 3:
        // ceil gives 2 windows but the second starts at 3 >= 2 + 1, so it is dropped.
        let w = attrs(Some(vec![1, 1]), 3, 1, AutoPad::NotSet);
        assert_eq!(one(&w, 2, 3, true).output, 1);
        // Dilation: 4 wide, kernel 2 dilated by 2 spans 3 -> 2 outputs.
        let w = attrs(None, 1, 2, AutoPad::NotSet);
        assert_eq!(one(&w, 4, 2, false).output, 2);
    }

    #[test]
    fn same_and_valid_padding() {
        // 5 wide, kernel 3, stride 2: 3 outputs, total pad (3-1)*2+3-5 = 2 -> (1, 1).
        let a = one(&attrs(None, 2, 1, AutoPad::SameUpper), 5, 3, false);
        assert_eq!((a.output, a.pad_begin, a.pad_end), (3, 1, 1));
        // 32 wide, kernel 2, stride 1: total pad 1 -> upper (0, 1), lower (1, 0).
        let a = one(&attrs(None, 1, 1, AutoPad::SameUpper), 32, 2, false);
        assert_eq!((a.output, a.pad_begin, a.pad_end), (32, 0, 1));
        let a = one(&attrs(None, 1, 1, AutoPad::SameLower), 32, 2, false);
        assert_eq!((a.output, a.pad_begin, a.pad_end), (32, 1, 0));
        // Stride larger than the kernel can make the formula negative: no padding then.
        let a = one(&attrs(None, 4, 1, AutoPad::SameUpper), 6, 1, false);
        assert_eq!((a.output, a.pad_begin, a.pad_end), (2, 0, 0));
        // VALID, 5 wide, kernel 2, stride 2: windows at 0 and 2 -> 2, in both modes.
        let w = attrs(None, 2, 1, AutoPad::Valid);
        assert_eq!(one(&w, 5, 2, false).output, 2);
        assert_eq!(one(&w, 5, 2, true).output, 2);
    }

    #[test]
    fn taps_skip_padding() {
        // pad 2, kernel 3 dilated by 2 (taps at -2, 0, 2 for output 0), input 3.
        let w = attrs(Some(vec![2, 2]), 1, 2, AutoPad::NotSet);
        let a = one(&w, 3, 3, false);
        assert_eq!(a.output, 3);
        assert_eq!(a.taps_inside(0), (1, 3)); // coordinates 0 and 2
        assert_eq!(a.taps_inside(1), (1, 2)); // -1, 1, 3 -> only 1
        assert_eq!(a.taps_inside(2), (0, 2)); // 0, 2, 4 -> 0 and 2
        assert_eq!(a.taps_within(1, -2, 5), (0, 3));
    }

    #[test]
    fn bad_attributes_are_named() {
        let w = attrs(None, 1, 1, AutoPad::NotSet);
        let e = w.resolve("MaxPool", &[2], &[5], false).unwrap_err();
        assert!(e.to_string().contains("no output"), "{e}");
        let e = w.resolve("MaxPool", &[4, 4], &[2, 2], false).unwrap_err();
        assert!(e.to_string().contains("'strides' has 1 values"), "{e}");
        assert!(AutoPad::parse("Conv", "SAME").is_err());
    }
}
