//! The ONNX documentation's examples and hand-derived duplicate cases, then GPU against CPU.

use super::*;
use crate::AttrValue;
use crate::testkit::*;

fn t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

fn red(r: &str) -> Vec<(&str, AttrValue)> {
    vec![("reduction", AttrValue::String(r.into()))]
}

fn nd(r: &str, d: &Tensor, i: &Tensor, u: &Tensor) -> Vec<i64> {
    run_node("ScatterND", 18, red(r), &[Some(d), Some(i), Some(u)])
        .unwrap()
        .to_i64_vec()
        .unwrap()
}

#[test]
fn scatter_nd_writes_and_reduces_in_order() {
    let d = t(&[8], &[1, 2, 3, 4, 5, 6, 7, 8]);
    let i = t(&[4, 1], &[4, 3, 1, 7]);
    assert_eq!(
        nd("none", &d, &i, &t(&[4], &[9, 10, 11, 12])),
        [1, 11, 3, 10, 9, 6, 7, 12]
    );
    let d = t(&[4], &[1, 2, 3, 4]);
    let i = t(&[3, 1], &[1, 1, -1]);
    let u = t(&[3], &[10, 20, 30]);
    assert_eq!(nd("add", &d, &i, &u), [1, 32, 3, 34]);
    assert_eq!(nd("mul", &d, &i, &u), [1, 400, 3, 120]);
    assert_eq!(nd("max", &d, &i, &u), [1, 20, 3, 30]);
    assert_eq!(nd("min", &d, &i, &u), [1, 2, 3, 4]);
    // Without a reduction the last duplicate wins (the spec leaves it open; we fix it).
    assert_eq!(nd("none", &d, &i, &u), [1, 20, 3, 30]);
    // Slices: rows of a [2, 3] matrix.
    let d = t(&[2, 3], &[0; 6]);
    let y = nd("none", &d, &t(&[1, 1], &[1]), &t(&[1, 3], &[7, 8, 9]));
    assert_eq!(y, [0, 0, 0, 7, 8, 9]);
    assert_err(
        op("ScatterND", 16, red("max"), 3),
        false,
        "not defined at opset 16",
    );
}

#[test]
fn scatter_elements_spec_examples() {
    let se = |axis, r: &str, d: &Tensor, i: &Tensor, u: &Tensor| {
        let mut a = red(r);
        a.push(("axis", AttrValue::Int(axis)));
        run_node("ScatterElements", 18, a, &[Some(d), Some(i), Some(u)])
            .unwrap()
            .to_i64_vec()
            .unwrap()
    };
    let d = t(&[3, 3], &[0; 9]);
    let i = t(&[2, 3], &[1, 0, 2, 0, 2, 1]);
    let u = t(&[2, 3], &[10, 11, 12, 20, 21, 22]);
    assert_eq!(se(0, "none", &d, &i, &u), [20, 11, 0, 10, 0, 22, 0, 21, 12]);
    let d = t(&[1, 5], &[1, 2, 3, 4, 5]);
    assert_eq!(
        se(1, "none", &d, &t(&[1, 2], &[1, 3]), &t(&[1, 2], &[11, 21])),
        [1, 11, 3, 21, 5]
    );
    let dup = t(&[1, 2], &[1, -4]);
    let u = t(&[1, 2], &[10, -5]);
    assert_eq!(se(1, "add", &d, &dup, &u), [1, 7, 3, 4, 5]);
    assert_eq!(se(-1, "max", &d, &dup, &u), [1, 10, 3, 4, 5]);
    assert_eq!(se(1, "min", &d, &dup, &u), [1, -5, 3, 4, 5]);
    // Scatter (opset 9) is ScatterElements without reductions.
    let y = run_node(
        "Scatter",
        9,
        vec![("axis", AttrValue::Int(1))],
        &[Some(&d), Some(&t(&[1, 1], &[0])), Some(&t(&[1, 1], &[9]))],
    )
    .unwrap();
    assert_eq!(y.to_i64_vec().unwrap(), [9, 2, 3, 4, 5]);
}

/// Random small values: floats finite (random bytes would hold NaNs, whose reductions the
/// backends need not agree on bit for bit).
fn small(dtype: crate::tensor::DType, shape: &[usize], seed: u64) -> Tensor {
    let raw = random_tensor(crate::tensor::DType::U8, shape, seed);
    let v: Vec<f64> = raw.bytes().iter().map(|&b| (b % 16) as f64 - 8.0).collect();
    match dtype {
        crate::tensor::DType::F32 => {
            Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as f32).collect())
        }
        crate::tensor::DType::F16 => Tensor::from_vec(
            shape.to_vec(),
            v.iter().map(|&x| half::f16::from_f64(x)).collect(),
        ),
        d => random_tensor(d, shape, seed),
    }
}

#[test]
fn gpu_scatters_match_cpu() {
    use crate::tensor::DType;
    for r in ["none", "add", "mul", "max", "min"] {
        let nd = op("ScatterND", 18, red(r), 3).unwrap();
        let mut a = red(r);
        a.push(("axis", AttrValue::Int(1)));
        let se = op("ScatterElements", 18, a, 3).unwrap();
        for dtype in [DType::F32, DType::F16, DType::I64, DType::I32, DType::U8] {
            let data = small(dtype, &[4, 5, 3], 1);
            // Duplicate tuples on purpose: rows 0 and 2, rows 1 and 4.
            let idx = t(&[5, 2], &[1, 2, 3, -1, 1, 2, 0, 0, -1, 4]);
            let upd = small(dtype, &[5, 3], 2);
            let what = format!("ScatterND {r} {dtype}");
            gpu_same_bytes(nd.as_ref(), &[Some(&data), Some(&idx), Some(&upd)], &what);
            let ie: Vec<i32> = (0..4 * 3 * 3).map(|k| (k * 5 % 7) - 2).collect();
            let ie = Tensor::from_vec(vec![4, 3, 3], ie);
            let ue = small(dtype, &[4, 3, 3], 3);
            let what = format!("ScatterElements {r} {dtype}");
            gpu_same_bytes(se.as_ref(), &[Some(&data), Some(&ie), Some(&ue)], &what);
        }
    }
}

#[test]
fn gpu_scatter_nd_many_duplicate_rows() {
    use crate::tensor::DType;
    // 3000 rows into 50 slices: every slice named many times, across workgroups.
    let data = small(DType::F32, &[50, 3], 7);
    let idx: Vec<i64> = (0..3000).map(|r| (r * 37 % 50) - 25).collect();
    let idx = t(&[3000, 1], &idx);
    let upd = small(DType::F32, &[3000, 3], 8);
    for r in ["none", "add", "max"] {
        let o = op("ScatterND", 18, red(r), 3).unwrap();
        gpu_same_bytes(o.as_ref(), &[Some(&data), Some(&idx), Some(&upd)], r);
    }
}

#[test]
fn gpu_scatter_elements_long_lines() {
    use crate::tensor::DType;
    // Lines of 2000 updates along axis 0 into 40 positions: many duplicates per line.
    let data = small(DType::I32, &[40, 3], 9);
    let idx: Vec<i64> = (0..2000 * 3).map(|k| (k * 13 % 80) - 40).collect();
    let idx = t(&[2000, 3], &idx);
    let upd = small(DType::I32, &[2000, 3], 10);
    for r in ["none", "mul", "min"] {
        let mut a = red(r);
        a.push(("axis", AttrValue::Int(0)));
        let o = op("ScatterElements", 18, a, 3).unwrap();
        gpu_same_bytes(o.as_ref(), &[Some(&data), Some(&idx), Some(&upd)], r);
    }
}
