//! Einsums that are batched matrix products (batch labels in both inputs and the output, at
//! most one label of each of M, N and K, the output ordered batch..., M, N) run on the tiled
//! GEMM shader instead of the general one. Labels of size 1 place nothing and are ignored; a
//! label repeated within one input (a diagonal) is just a larger stride, which a strided GEMM
//! takes as it is.

use super::equation::Plan;
use crate::GpuKernel;

pub fn as_gemm(p: &Plan, half: bool, sizes: [usize; 3]) -> Option<GpuKernel> {
    if p.strides.len() != 2 {
        return None;
    }
    let (sa, sb) = (&p.strides[0], &p.strides[1]);
    let no = p.out_sizes.len();
    let size = |l: usize| {
        if l < no {
            p.out_sizes[l]
        } else {
            p.sum_sizes[l - no]
        }
    };
    let (mut batch, mut a_batch, mut b_batch) = (vec![], vec![], vec![]);
    let (mut m, mut n, mut k) = (None, None, None);
    for l in 0..no {
        if size(l) == 1 {
            continue;
        }
        match (sa[l] != 0, sb[l] != 0) {
            (true, true) if m.is_none() && n.is_none() => {
                batch.push(size(l));
                a_batch.push(sa[l]);
                b_batch.push(sb[l]);
            }
            (true, false) if m.is_none() && n.is_none() => m = Some(l),
            (false, true) if n.is_none() => n = Some(l),
            _ => return None,
        }
    }
    for l in no..no + p.sum_sizes.len() {
        if size(l) == 1 {
            continue;
        }
        if sa[l] == 0 || sb[l] == 0 || k.is_some() {
            return None;
        }
        k = Some(l);
    }
    let dim = |l: Option<usize>| l.map_or(1, size);
    let stride = |s: &[usize], l: Option<usize>| l.map_or(0, |l| s[l]);
    crate::matmul::strided_gemm_kernel(
        half,
        (dim(m), dim(n), dim(k)),
        (stride(sa, m), stride(sa, k)),
        (stride(sb, k), stride(sb, n)),
        batch,
        a_batch,
        b_batch,
        sizes,
    )
}
