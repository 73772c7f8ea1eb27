//! Helpers shared by op rules and kernels.

use super::{InferInput, OpError, ValueType};
use crate::tensor::Tensor;

/// The present input `i`, or an error naming it.
pub fn req<T: Copy>(inputs: &[Option<T>], i: usize) -> Result<T, OpError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| OpError::invalid(format!("input {i} is required but missing")))
}

/// The input `i` if present.
pub fn opt<T: Copy>(inputs: &[Option<T>], i: usize) -> Option<T> {
    inputs.get(i).copied().flatten()
}

/// The value of input `i` when it is known at planning time, or [`OpError::NeedsValue`] so the
/// graph layer can specialize on the graph inputs it comes from.
pub fn const_input<'a>(inputs: &[Option<InferInput<'a>>], i: usize) -> Result<&'a Tensor, OpError> {
    req(inputs, i)?.value.ok_or(OpError::NeedsValue(i))
}

/// Normalises a possibly negative axis for a tensor of `rank`.
pub fn axis(a: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    if a < -r || a >= r {
        return Err(OpError::invalid(format!(
            "axis {a} is out of range for rank {rank}"
        )));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// [`axis`] of a tensor that must have one: a scalar has no axis to split, slice, pad or pick
/// along, where [`axis`] lets axis 0 of a scalar mean the whole value.
pub fn axis_of_tensor(a: i64, rank: usize) -> Result<usize, OpError> {
    if rank == 0 {
        return Err(OpError::invalid(format!(
            "axis {a} of a scalar: the input must have rank 1 or more"
        )));
    }
    axis(a, rank)
}

/// Numpy-style broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, OpError> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(OpError::invalid(format!(
                    "shapes {a:?} and {b:?} cannot be broadcast together"
                )));
            }
        };
    }
    Ok(out)
}

/// Element strides of `shape` as seen from a broadcast `out` shape: 0 on broadcast axes.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = crate::tensor::strides(shape);
    let pad = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < pad || shape[i - pad] == 1 {
                0
            } else {
                own[i - pad]
            }
        })
        .collect()
}

pub use vkml_shaders::groups_1d;

/// Checks an input's dtype against the ones an op accepts.
pub fn expect_dtype(
    ty: &ValueType,
    allowed: &[crate::tensor::DType],
    what: &str,
) -> Result<(), OpError> {
    if allowed.contains(&ty.dtype) {
        Ok(())
    } else {
        Err(OpError::unsupported(format!(
            "{what} of type {} (supported: {})",
            ty.dtype,
            allowed
                .iter()
                .map(|d| d.onnx_name())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

/// The types of planning-time inputs, for rules that need only those.
pub fn types_of<'a>(inputs: &[Option<super::InferInput<'a>>]) -> Vec<Option<&'a ValueType>> {
    inputs.iter().map(|i| i.map(|i| i.ty)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scalar has no axis: Split and Slice of one indexed its shape at 0 (a fuzzer's find).
    #[test]
    fn axes_are_in_range_and_a_scalar_has_none() {
        assert_eq!(axis(-1, 3).unwrap(), 2);
        assert_eq!(axis(2, 3).unwrap(), 2);
        assert!(axis(3, 3).is_err());
        assert!(axis(-4, 3).is_err());
        assert!(axis(0, 0).is_err());
        assert!(axis(-1, 0).is_err());
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(
            broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap(),
            vec![2, 4, 3]
        );
        assert!(broadcast_shapes(&[2, 3], &[4]).is_err());
        assert_eq!(broadcast_strides(&[4, 1], &[2, 4, 3]), vec![0, 1, 0]);
    }

    #[test]
    fn large_launches_fold_into_y() {
        let g = groups_1d(256 * 70_000, 256);
        assert!(g[0] <= 65_535 && (g[0] as u64) * (g[1] as u64) >= 70_000);
    }
}
