use super::*;

#[test]
fn borders_follow_numpy_pad() {
    // np.pad(np.arange(3), (4, 5), mode): reflect and wrap, hand-checked against numpy.
    let at = |b| {
        (-4..8)
            .map(|i| resolve(i, 3, b).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(at(Border::Reflect), [0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1]);
    assert_eq!(at(Border::Wrap), [2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1]);
    assert_eq!(at(Border::Edge), [0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2]);
    assert_eq!(resolve(-1, 3, Border::Constant), None);
    assert_eq!(resolve(5, 1, Border::Reflect), Some(0));
    assert_eq!(resolve(0, 0, Border::Edge), None);
}

#[test]
fn transpose_map_moves_elements() {
    let m = Remap::transpose(&[2, 3], &[1, 0]);
    let src: Vec<u8> = (0..6).collect();
    let mut dst = vec![0u8; 6];
    m.apply(&src, 1, &mut dst);
    assert_eq!(dst, [0, 3, 1, 4, 2, 5]);
    let t = m.table().unwrap();
    assert_eq!(t.len(), 2 + 7 * 2);
    assert_eq!(&t[2..9], &[3, 2, 3, 1, 0, 1, 0]);
}

#[test]
fn constant_bytes_fill_out_of_range_elements() {
    let mut m = Remap::new(&[4]);
    m.axes[0].in_dim = 2;
    m.axes[0].in_stride = 1;
    m.axes[0].start = -1;
    m.axes[0].step = 1;
    m.constant = 0xAABB;
    let src = [1u8, 0, 2, 0];
    let mut dst = vec![0u8; 8];
    m.apply(&src, 2, &mut dst);
    assert_eq!(dst, [0xBB, 0xAA, 1, 0, 2, 0, 0xBB, 0xAA]);
}

#[test]
fn sizes_past_32_bits_have_no_gpu_dispatch() {
    let r = Remap::new(&[1 << 31]);
    assert!(
        r.dispatch(4, BufRef::Input(0), BufRef::Output(0), 1, 1 << 31)
            .is_none()
    );
    // No variant moves 3-byte elements.
    assert!(
        Remap::new(&[4])
            .dispatch(3, BufRef::Input(0), BufRef::Output(0), 4, 4)
            .is_none()
    );
}
