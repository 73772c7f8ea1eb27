use super::*;
use crate::AttrValue;
use crate::tensor::DType;
use crate::testkit::*;

fn vals(t: &Tensor) -> Vec<i64> {
    t.to_i64_vec().unwrap()
}

#[test]
fn tile_repeats_blocks() {
    let x = Tensor::from_vec(vec![2, 3], (0..6i64).collect());
    let y = run_node("Tile", 13, vec![], &[Some(&x), Some(&i64s(&[2, 2]))]).unwrap();
    assert_eq!(y.shape(), &[4, 6]);
    // np.tile(np.arange(6).reshape(2, 3), (2, 2))
    let want = [
        0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5,
    ];
    assert_eq!(vals(&y), want);
    let legacy = run_node(
        "Tile",
        1,
        vec![],
        &[
            Some(&x),
            Some(&Tensor::scalar(3i64)),
            Some(&Tensor::scalar(1i64)),
        ],
    )
    .unwrap();
    assert_eq!(legacy.shape(), &[2, 9]);
    assert_err(
        run_node("Tile", 13, vec![], &[Some(&x), Some(&i64s(&[2]))]),
        false,
        "rank",
    );
}

#[test]
fn expand_broadcasts_both_ways() {
    let x = Tensor::from_vec(vec![3, 1], vec![0i64, 1, 2]);
    let y = run_node("Expand", 13, vec![], &[Some(&x), Some(&i64s(&[2, 1, 2]))]).unwrap();
    assert_eq!(y.shape(), &[2, 3, 2]);
    assert_eq!(vals(&y), [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
    assert_err(
        run_node("Expand", 13, vec![], &[Some(&x), Some(&i64s(&[2, 2]))]),
        false,
        "broadcast",
    );
}

#[test]
fn depth_space_match_numpy() {
    let x = Tensor::from_vec(vec![1, 8, 1, 1], (0..8i64).collect());
    let b = ("blocksize", AttrValue::Int(2));
    let dcr = run_node("DepthToSpace", 13, vec![b.clone()], &[Some(&x)]).unwrap();
    assert_eq!(dcr.shape(), &[1, 2, 2, 2]);
    assert_eq!(vals(&dcr), [0, 2, 4, 6, 1, 3, 5, 7]);
    let crd = run_node(
        "DepthToSpace",
        13,
        vec![b.clone(), ("mode", AttrValue::String("CRD".into()))],
        &[Some(&x)],
    )
    .unwrap();
    assert_eq!(vals(&crd), [0, 1, 2, 3, 4, 5, 6, 7]);
    let s = Tensor::from_vec(vec![1, 1, 4, 4], (0..16i64).collect());
    let y = run_node("SpaceToDepth", 13, vec![b], &[Some(&s)]).unwrap();
    assert_eq!(y.shape(), &[1, 4, 2, 2]);
    assert_eq!(
        vals(&y),
        [0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15]
    );
}

#[test]
fn gpu_tile_expand_depth_match_cpu() {
    let tile = op("Tile", 13, vec![], 2).unwrap();
    let expand = op("Expand", 13, vec![], 2).unwrap();
    let b = || vec![("blocksize", AttrValue::Int(2))];
    let d2s = op("DepthToSpace", 13, b(), 1).unwrap();
    let crd = op(
        "DepthToSpace",
        13,
        [b(), vec![("mode", AttrValue::String("CRD".into()))]].concat(),
        1,
    )
    .unwrap();
    let s2d = op("SpaceToDepth", 13, b(), 1).unwrap();
    for dtype in [DType::Bool, DType::I16, DType::F32, DType::U64] {
        let x = random_tensor(dtype, &[3, 1, 5], 11);
        gpu_same_bytes(tile.as_ref(), &[Some(&x), Some(&i64s(&[2, 3, 1]))], "Tile");
        gpu_same_bytes(
            expand.as_ref(),
            &[Some(&x), Some(&i64s(&[2, 1, 4, 1]))],
            "Expand",
        );
        let y = random_tensor(dtype, &[2, 12, 3, 5], 12);
        gpu_same_bytes(d2s.as_ref(), &[Some(&y)], "DepthToSpace DCR");
        gpu_same_bytes(crd.as_ref(), &[Some(&y)], "DepthToSpace CRD");
        let z = random_tensor(dtype, &[2, 3, 4, 6], 13);
        gpu_same_bytes(s2d.as_ref(), &[Some(&z)], "SpaceToDepth");
    }
    // Large enough to fold the launch into y (> 65,535 groups of 256).
    let big = random_tensor(DType::U8, &[1, 1 << 13], 5);
    gpu_same_bytes(
        tile.as_ref(),
        &[Some(&big), Some(&i64s(&[2100, 1]))],
        "Tile folded",
    );
}

/// Tile of [4] by 2^62 + 1 made 2^64 + 4 elements, which wrapped to shape [4]: a silently wrong
/// answer. Expand to [2^32, 2^32] wrapped to no elements at all. Both are errors now.
#[test]
fn shapes_that_wrap_are_errors() {
    let x = Tensor::from_vec(vec![4], vec![1i64, 2, 3, 4]);
    let tile = op("Tile", 13, vec![], 2).unwrap();
    let e = infer_known(tile.as_ref(), &[Some(&x), Some(&i64s(&[(1 << 62) + 1]))]);
    assert_err(e, false, "Tile");
    let e = infer_known(tile.as_ref(), &[Some(&x), Some(&i64s(&[-1]))]);
    assert_err(e, false, "negative");
    let expand = op("Expand", 13, vec![], 2).unwrap();
    let one = Tensor::from_vec(vec![1], vec![1f32]);
    let e = infer_known(
        expand.as_ref(),
        &[Some(&one), Some(&i64s(&[1 << 32, 1 << 32]))],
    );
    assert_err(e, false, "element count");
    let d2s = op(
        "DepthToSpace",
        13,
        vec![("blocksize", AttrValue::Int(1 << 40))],
        1,
    )
    .unwrap();
    let x = Tensor::zeros(DType::F32, vec![1, 1, 1, 1]);
    assert_err(infer_known(d2s.as_ref(), &[Some(&x)]), false, "blocksize");
}
