//! TopK (opsets 1, 10, 11): the `k` largest (or smallest) elements along an axis and their
//! int64 indices. `k` is an attribute at opset 1 and input 1 from opset 10. Equal values keep
//! their index order (the lower index first), which is ONNX's rule; a NaN counts as larger
//! than every number. The output is always sorted, which `sorted = 0` permits.
//! GPU (shaders/topk.comp): rows up to [`GPU_MAX_LEN`] long rank every element against its
//! row; longer rows with k up to [`GPU_MAX_K`] pick their k elements in order, a workgroup
//! per row. Longer rows with larger k stay on the CPU.

use super::numeric::{Wide, narrow, widen};
use super::util::{axis as norm_axis, const_input, groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::topk;

pub fn register(r: &mut Registry) {
    r.add("TopK", build);
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let k_attr = if spec.opset < 10 {
        Some(
            spec.attrs
                .int_opt("k")?
                .ok_or_else(|| OpError::invalid("TopK: attribute k is required before opset 10"))?,
        )
    } else {
        None
    };
    Ok(Box::new(TopK {
        k_attr,
        axis: spec.attrs.int("axis", -1)?,
        largest: spec.attrs.int("largest", 1)? != 0,
    }))
}

/// Longest row the ranking shader takes (it does `len` comparisons per element).
const GPU_MAX_LEN: usize = 4096;
/// Largest k the per-row shader takes (it scans the row k times).
const GPU_MAX_K: usize = 1024;

#[derive(Debug)]
struct TopK {
    k_attr: Option<i64>,
    axis: i64,
    largest: bool,
}

impl TopK {
    fn geometry(&self, shape: &[usize], k: i64) -> Result<(usize, usize, Vec<usize>), OpError> {
        if shape.is_empty() {
            return Err(OpError::invalid(
                "TopK: the input is a scalar, it has no axis",
            ));
        }
        let a = norm_axis(self.axis, shape.len())
            .map_err(|e| OpError::invalid(format!("TopK: {e}")))?;
        if k < 0 || k as usize > shape[a] {
            return Err(OpError::invalid(format!(
                "TopK: k = {k} is outside [0, {}] for axis {a} of {shape:?}",
                shape[a]
            )));
        }
        let mut out = shape.to_vec();
        out[a] = k as usize;
        Ok((a, k as usize, out))
    }

    fn k_of(&self, t: Option<&Tensor>) -> Result<i64, OpError> {
        if let Some(k) = self.k_attr {
            return Ok(k);
        }
        let v = req(&[t], 0)?
            .to_i64_vec()
            .map_err(|e| OpError::invalid(e.to_string()))?;
        match v[..] {
            [k] => Ok(k),
            _ => Err(OpError::invalid(format!(
                "TopK: K must hold one value, found {}",
                v.len()
            ))),
        }
    }

    fn select<T: Copy>(
        &self,
        v: &[T],
        shape: &[usize],
        a: usize,
        k: usize,
        cmp: impl Fn(T, T) -> std::cmp::Ordering,
    ) -> (Vec<T>, Vec<i64>) {
        let outer: usize = shape[..a].iter().product();
        let len = shape[a];
        let inner: usize = shape[a + 1..].iter().product();
        let mut vals = Vec::with_capacity(outer * k * inner);
        let mut idx = vec![0i64; outer * k * inner];
        let mut out_vals = vec![None; outer * k * inner];
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| v[(o * len + j) * inner + i];
                let mut order: Vec<usize> = (0..len).collect();
                // Stable: equal values keep ascending index order.
                order.sort_by(|&x, &y| {
                    let c = cmp(at(x), at(y));
                    if self.largest { c.reverse() } else { c }
                });
                for (r, &j) in order.iter().take(k).enumerate() {
                    let pos = (o * k + r) * inner + i;
                    out_vals[pos] = Some(at(j));
                    idx[pos] = j as i64;
                }
            }
        }
        vals.extend(out_vals.into_iter().flatten());
        (vals, idx)
    }
}

/// Total order on f64 with NaN above every number.
fn cmp_f(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
    }
}

impl Op for TopK {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.dtype == DType::Bool {
            return Err(OpError::unsupported("TopK: bool input"));
        }
        let k = if self.k_attr.is_some() {
            self.k_of(None)?
        } else {
            self.k_of(Some(const_input(inputs, 1)?))?
        };
        let (_, _, out) = self.geometry(&x.shape, k)?;
        Ok(vec![
            ValueType::new(x.dtype, out.clone()),
            ValueType::new(DType::I64, out),
        ])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let k = self.k_of(inputs.get(1).copied().flatten())?;
        let (a, k, out) = self.geometry(x.shape(), k)?;
        if x.dtype() == DType::U64 {
            // Compared as unsigned: through i64 the values from 2^63 up would rank below 0.
            let v = x
                .view::<u64>()
                .map_err(|e| OpError::invalid(e.to_string()))?;
            let (vals, idx) = self.select(&v, x.shape(), a, k, |a: u64, b: u64| a.cmp(&b));
            return Ok(vec![
                Tensor::from_vec(out.clone(), vals),
                Tensor::from_vec(out, idx),
            ]);
        }
        let (vals, idx) = match widen(x)? {
            Wide::F(v) => {
                let (vals, idx) = self.select(&v, x.shape(), a, k, cmp_f);
                (Wide::F(vals), idx)
            }
            Wide::I(v) => {
                let (vals, idx) = self.select(&v, x.shape(), a, k, |a: i64, b: i64| a.cmp(&b));
                (Wide::I(vals), idx)
            }
        };
        Ok(vec![
            narrow(x.dtype(), out.clone(), vals)?,
            Tensor::from_vec(out, idx),
        ])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        u32::try_from(x.numel()).ok()?;
        // k is the output's extent along the axis, so the shapes alone give it.
        let (a, _, _) = self.geometry(&x.shape, 0).ok()?;
        let k = outputs.first()?.shape.get(a).copied()?;
        let len = x.shape[a];
        let row = len > GPU_MAX_LEN;
        if (row && k > GPU_MAX_K) || outputs.len() != 2 {
            return None;
        }
        let variant = if row {
            by_dtype!(x.dtype, topk::Variant, [F32 => F32Row, F16 => F16Row, I32 => I32Row, I64 => I64Row, U32 => U32Row, U64 => U64Row])
        } else {
            by_dtype!(x.dtype, topk::Variant, [F32, F16, I32, I64, U32, U64])
        }?;
        let inner: usize = x.shape[a + 1..].iter().product();
        let rows = x.numel() / len.max(1);
        let (n, groups) = if row {
            let gy = rows.div_ceil(65_535).max(1);
            (rows, [rows.div_ceil(gy) as u32, u32::try_from(gy).ok()?, 1])
        } else {
            (x.numel(), groups_1d(x.numel(), 256))
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                topk::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                    idx: BufRef::Output(1),
                },
                topk::Params {
                    n: n as u32,
                    len: len as u32,
                    inner: inner as u32,
                    k: k as u32,
                    largest: self.largest as u32,
                },
                groups,
            )],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::run;
    use crate::{AttrValue, Attrs};

    fn topk(
        opset: i64,
        attrs: &[(&str, AttrValue)],
        ins: &[Option<&Tensor>],
    ) -> Result<Vec<Tensor>, OpError> {
        let attrs = Attrs(
            attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        );
        let op = crate::build(&NodeSpec {
            name: "t",
            op_type: "TopK",
            attrs: &attrs,
            opset,
            num_inputs: 2,
            num_outputs: 2,
        })?;
        run(&*op, ins)
    }

    #[test]
    fn by_hand() {
        let x = Tensor::from_vec(vec![2, 4], vec![1f32, 4., 4., 2., 0., -1., 7., 7.]);
        let k = Tensor::from_vec(vec![1], vec![2i64]);
        let y = topk(11, &[], &[Some(&x), Some(&k)]).unwrap();
        assert_eq!(y[0].to_f64_vec().unwrap(), vec![4., 4., 7., 7.]);
        assert_eq!(y[1].to_i64_vec().unwrap(), vec![1, 2, 2, 3]);
        let y = topk(11, &[("largest", AttrValue::Int(0))], &[Some(&x), Some(&k)]).unwrap();
        assert_eq!(y[0].to_f64_vec().unwrap(), vec![1., 2., -1., 0.]);
        assert_eq!(y[1].to_i64_vec().unwrap(), vec![0, 3, 1, 0]);
        let y = topk(
            1,
            &[("k", AttrValue::Int(1)), ("axis", AttrValue::Int(0))],
            &[Some(&x)],
        )
        .unwrap();
        assert_eq!(y[0].shape(), &[1, 4]);
        assert_eq!(y[1].to_i64_vec().unwrap(), vec![0, 0, 1, 1]);
        let i = Tensor::from_vec(vec![3], vec![5i64, -2, 9]);
        let y = topk(
            11,
            &[],
            &[Some(&i), Some(&Tensor::from_vec(vec![1], vec![3i64]))],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), vec![9, 5, -2]);
        assert!(
            topk(
                11,
                &[],
                &[Some(&i), Some(&Tensor::from_vec(vec![1], vec![4i64]))]
            )
            .is_err()
        );
    }

    #[test]
    fn gpu_matches_cpu() {
        let mut rng = crate::testkit::Rng::new(8);
        for (axis, largest, k) in [(-1i64, 1i64, 3i64), (1, 0, 5), (0, 1, 2), (2, 0, 0)] {
            let attrs = vec![
                ("axis", AttrValue::Int(axis)),
                ("largest", AttrValue::Int(largest)),
            ];
            let op = crate::testkit::node("TopK", 11, attrs, 2, 2).unwrap();
            let kt = Tensor::from_vec(vec![1], vec![k]);
            // Few distinct values: ties must keep index order on both sides.
            let v: Vec<f32> = rng
                .f32s(4 * 6 * 7)
                .iter()
                .map(|x| (x * 4.0).round())
                .collect();
            let x = Tensor::from_vec(vec![4, 6, 7], v.clone());
            crate::testkit::gpu_matches_cpu(&*op, &[Some(&x), Some(&kt)], 0.0);
            let i = Tensor::from_vec(vec![4, 6, 7], v.iter().map(|&f| f as i64).collect());
            crate::testkit::gpu_matches_cpu(&*op, &[Some(&i), Some(&kt)], 0.0);
            let h = Tensor::from_vec(
                vec![4, 6, 7],
                v.iter().map(|&f| half::f16::from_f32(f)).collect(),
            );
            crate::testkit::gpu_matches_cpu(&*op, &[Some(&h), Some(&kt)], 0.0);
        }
        // Long rows: the per-row shader, ties and a NaN included.
        for (axis, largest, k) in [(1i64, 1i64, 10i64), (0, 0, 7)] {
            let attrs = vec![
                ("axis", AttrValue::Int(axis)),
                ("largest", AttrValue::Int(largest)),
            ];
            let op = crate::testkit::node("TopK", 11, attrs, 2, 2).unwrap();
            let kt = Tensor::from_vec(vec![1], vec![k]);
            let shape = if axis == 1 {
                vec![2, 5000]
            } else {
                vec![5000, 2]
            };
            let mut v: Vec<f32> = rng
                .f32s(10_000)
                .iter()
                .map(|x| (x * 50.0).round())
                .collect();
            v[123] = f32::NAN;
            let x = Tensor::from_vec(shape.clone(), v.clone());
            crate::testkit::gpu_matches_cpu(&*op, &[Some(&x), Some(&kt)], 0.0);
            let i = Tensor::from_vec(
                shape,
                v.iter()
                    .map(|&f| if f.is_nan() { 99 } else { f as i32 })
                    .collect(),
            );
            crate::testkit::gpu_matches_cpu(&*op, &[Some(&i), Some(&kt)], 0.0);
        }
    }

    /// Unsigned rows on the GPU (both shaders) against a stable sort of the indices, values
    /// from 2^63 up included: they must rank above the small ones.
    #[test]
    fn gpu_unsigned_rows_match_a_sort() {
        use crate::testkit::gpu::run_op;
        let mut rng = crate::testkit::Rng::new(9);
        for (rows, len, k, largest) in [(3, 7, 3, true), (5, 13, 13, false), (2, 5001, 9, true)] {
            let attrs = vec![("largest", AttrValue::Int(i64::from(largest)))];
            let op = crate::testkit::node("TopK", 11, attrs, 2, 2).unwrap();
            let kt = Tensor::from_vec(vec![1], vec![k as i64]);
            // Few distinct values (ties keep index order), about half of them from 2^63 up; 5001 is past GPU_MAX_LEN, for the per-row shader.
            let v64: Vec<u64> = (0..rows * len)
                .map(|_| (rng.range(0, 6) as u64) << if rng.coin() { 62 } else { 1 })
                .collect();
            let want = |v: &[u64]| {
                let (mut vals, mut idx) = (Vec::new(), Vec::new());
                for r in 0..rows {
                    let row = &v[r * len..(r + 1) * len];
                    let mut order: Vec<usize> = (0..len).collect();
                    order.sort_by_key(|&j| if largest { u64::MAX - row[j] } else { row[j] });
                    vals.extend(order[..k].iter().map(|&j| row[j]));
                    idx.extend(order[..k].iter().map(|&j| j as i64));
                }
                (vals, idx)
            };
            let (vals, idx) = want(&v64);
            let x = Tensor::from_vec(vec![rows, len], v64.clone());
            let outs = crate::testkit::infer_known(&*op, &[Some(&x), Some(&kt)]).unwrap();
            assert_eq!(
                run(&*op, &[Some(&x), Some(&kt)]).unwrap()[0]
                    .view::<u64>()
                    .unwrap()[..],
                vals[..]
            );
            let Ok(y) = run_op(&*op, &[Some(&x), Some(&kt)], &outs) else {
                return; // no GPU (VKML_SKIP_VULKAN=1)
            };
            assert_eq!(
                y[0].view::<u64>().unwrap()[..],
                vals[..],
                "{rows}x{len} k={k}"
            );
            assert_eq!(y[1].to_i64_vec().unwrap(), idx, "{rows}x{len} k={k}");
            // uint32: the same values shifted into range.
            let v32: Vec<u32> = v64.iter().map(|&v| (v >> 32) as u32).collect();
            let (vals, idx) = want(&v32.iter().map(|&v| u64::from(v)).collect::<Vec<_>>());
            let x = Tensor::from_vec(vec![rows, len], v32);
            let y = run_op(&*op, &[Some(&x), Some(&kt)], &outs_of(&*op, &x, &kt)).unwrap();
            let got: Vec<u64> = y[0]
                .view::<u32>()
                .unwrap()
                .iter()
                .map(|&v| u64::from(v))
                .collect();
            assert_eq!(got, vals, "u32 {rows}x{len} k={k}");
            assert_eq!(y[1].to_i64_vec().unwrap(), idx, "u32 {rows}x{len} k={k}");
        }
    }

    fn outs_of(op: &dyn Op, x: &Tensor, k: &Tensor) -> Vec<ValueType> {
        crate::testkit::infer_known(op, &[Some(x), Some(k)]).unwrap()
    }
}
