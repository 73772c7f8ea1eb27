//! NonMaxSuppression (opsets 10, 11): per batch and class, the boxes above score_threshold by
//! falling score (lower index first among equal scores), each kept unless its IoU with a box
//! kept before exceeds iou_threshold, at most max_output_boxes_per_class of them. Corners may
//! come in either order (center_point_box 0) or as center and size (1). The output's length
//! depends on the values, so, like NonZero, the node is computed where its inputs are known:
//! folded while planning.

use super::util::{const_input, opt, req};
use super::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("NonMaxSuppression", build);
}

#[derive(Debug)]
struct Nms {
    center: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let center = match spec.attrs.int("center_point_box", 0)? {
        0 => false,
        1 => true,
        v => {
            return Err(OpError::invalid(format!(
                "NonMaxSuppression: center_point_box {v} is not 0 or 1"
            )));
        }
    };
    Ok(Box::new(Nms { center }))
}

fn bad(e: impl std::fmt::Display) -> OpError {
    OpError::invalid(format!("NonMaxSuppression: {e}"))
}

/// (x min, x max, y min, y max) of a box.
type Extent = (f64, f64, f64, f64);

impl Nms {
    fn extent(&self, b: &[f64]) -> Extent {
        if self.center {
            let (w, h) = (b[2] / 2.0, b[3] / 2.0);
            (b[0] - w, b[0] + w, b[1] - h, b[1] + h)
        } else {
            (
                b[1].min(b[3]),
                b[1].max(b[3]),
                b[0].min(b[2]),
                b[0].max(b[2]),
            )
        }
    }

    fn select(&self, inputs: &[Option<&Tensor>]) -> Result<Tensor, OpError> {
        let boxes = req(inputs, 0)?;
        let scores = req(inputs, 1)?;
        let (bs, ss) = (boxes.shape(), scores.shape());
        if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
            return Err(bad(format!(
                "boxes {bs:?} and scores {ss:?} must be [batches, boxes, 4] and [batches, \
                 classes, boxes]"
            )));
        }
        let scalar = |i: usize| -> Result<Option<f64>, OpError> {
            match opt(inputs, i) {
                None => Ok(None),
                Some(t) if t.numel() == 0 => Ok(None),
                Some(t) => Ok(Some(t.to_f64_vec().map_err(bad)?[0])),
            }
        };
        let most = scalar(2)?.unwrap_or(0.0).max(0.0) as usize;
        let iou_max = scalar(3)?.unwrap_or(0.0);
        let min_score = scalar(4)?;
        let b = boxes.to_f64_vec().map_err(bad)?;
        let s = scores.to_f64_vec().map_err(bad)?;
        let (batches, n, classes) = (bs[0], bs[1], ss[1]);
        let mut picked: Vec<i64> = Vec::new();
        for batch in 0..batches {
            let ext: Vec<Extent> = (0..n)
                .map(|i| self.extent(&b[(batch * n + i) * 4..][..4]))
                .collect();
            for class in 0..classes {
                let sc = &s[(batch * classes + class) * n..][..n];
                let mut order: Vec<usize> = (0..n)
                    .filter(|&i| min_score.is_none_or(|m| sc[i] > m))
                    .collect();
                // Falling score; the lower index first among equals (a stable sort).
                order.sort_by(|&x, &y| sc[y].total_cmp(&sc[x]));
                let mut kept: Vec<usize> = Vec::new();
                for i in order {
                    if kept.len() >= most {
                        break;
                    }
                    if kept.iter().all(|&k| iou(ext[k], ext[i]) <= iou_max) {
                        kept.push(i);
                        picked.extend([batch as i64, class as i64, i as i64]);
                    }
                }
            }
        }
        let rows = picked.len() / 3;
        Ok(Tensor::from_vec(vec![rows, 3], picked))
    }
}

/// Intersection over union, 0 for boxes that do not overlap or have no area.
fn iou(a: Extent, b: Extent) -> f64 {
    let w = a.1.min(b.1) - a.0.max(b.0);
    let h = a.3.min(b.3) - a.2.max(b.2);
    if w <= 0.0 || h <= 0.0 {
        return 0.0;
    }
    let inter = w * h;
    let area = |e: Extent| (e.1 - e.0) * (e.3 - e.2);
    let union = area(a) + area(b) - inter;
    if area(a) <= 0.0 || area(b) <= 0.0 || union <= 0.0 {
        return 0.0;
    }
    inter / union
}

impl Op for Nms {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        for x in inputs.iter().take(2).flatten() {
            if !matches!(x.ty.dtype, DType::F32 | DType::F64 | DType::F16) {
                return Err(OpError::unsupported(format!(
                    "NonMaxSuppression of {}",
                    x.ty.dtype
                )));
            }
        }
        let mut values = Vec::with_capacity(inputs.len());
        for i in 0..inputs.len() {
            values.push(match inputs[i] {
                Some(_) => Some(const_input(inputs, i)?),
                None => None,
            });
        }
        Ok(vec![ValueType::of(&self.select(&values)?)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![self.select(inputs)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{op, run};

    #[test]
    fn keeps_the_best_of_overlapping_boxes() {
        // Box 1 lies inside box 0: IoU 0.81 / 1; box 2 stands apart. Scores 0.9, 0.95, 0.3: box
        // 1 first, box 0 suppressed at 0.5, kept at 0.85; box 2 under the score threshold 0.4.
        let boxes = Tensor::from_vec(
            vec![1, 3, 4],
            vec![
                0.0f32, 0.0, 1.0, 1.0, 0.1, 0.1, 1.0, 1.0, 5.0, 5.0, 6.0, 6.0,
            ],
        );
        let scores = Tensor::from_vec(vec![1, 1, 3], vec![0.9f32, 0.95, 0.3]);
        let nms = op("NonMaxSuppression", 11, vec![], 5).unwrap();
        let most = Tensor::scalar(10i64);
        let min = Tensor::scalar(0.4f32);
        for (iou, want) in [(0.5f32, vec![0i64, 0, 1]), (0.85, vec![0, 0, 1, 0, 0, 0])] {
            let iou = Tensor::scalar(iou);
            let y = run(
                &*nms,
                &[
                    Some(&boxes),
                    Some(&scores),
                    Some(&most),
                    Some(&iou),
                    Some(&min),
                ],
            )
            .unwrap();
            assert_eq!(y[0].to_i64_vec().unwrap(), want);
        }
        // Without a score threshold box 2 is a candidate too; at most one box per class.
        let one = Tensor::scalar(1i64);
        let iou = Tensor::scalar(0.5f32);
        let y = run(
            &*nms,
            &[Some(&boxes), Some(&scores), Some(&one), Some(&iou)],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), [0, 0, 1]);
    }
}
