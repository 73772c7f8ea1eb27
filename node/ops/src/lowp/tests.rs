//! Values from the formats' definitions (ONNX's Cast documentation, the OCP 8-bit and MX
//! specifications) and from ml_dtypes 0.6, which ONNX's reference implementation uses.

use super::*;

#[test]
fn decoding_gives_the_formats_landmarks() {
    let cases: [(Float, u8, f32); 16] = [
        (Float::E4M3FN, 0x7e, 448.0),
        (Float::E4M3FN, 0x01, 2f32.powi(-9)),
        (Float::E4M3FN, 0x38, 1.0),
        (Float::E4M3FN, 0xc0, -2.0),
        (Float::E4M3FNUZ, 0x7f, 240.0),
        (Float::E4M3FNUZ, 0x01, 2f32.powi(-10)),
        (Float::E5M2, 0x7b, 57344.0),
        (Float::E5M2, 0x7c, f32::INFINITY),
        (Float::E5M2, 0xfc, f32::NEG_INFINITY),
        (Float::E5M2, 0x01, 2f32.powi(-16)),
        (Float::E5M2FNUZ, 0x7f, 57344.0),
        (Float::E5M2FNUZ, 0x01, 2f32.powi(-17)),
        (Float::E2M1, 0x7, 6.0),
        (Float::E2M1, 0x1, 0.5),
        (Float::E2M1, 0xd, -3.0),
        (Float::E8M0, 0, 2f32.powi(-127)),
    ];
    for (f, b, want) in cases {
        assert_eq!(f.decode(b), want, "{f:?} {b:#x}");
    }
    for (f, b) in [
        (Float::E4M3FN, 0x7f),
        (Float::E4M3FN, 0xff),
        (Float::E4M3FNUZ, 0x80),
        (Float::E5M2, 0x7d),
        (Float::E5M2FNUZ, 0x80),
        (Float::E8M0, 0xff),
    ] {
        assert!(f.decode(b).is_nan(), "{f:?} {b:#x}");
    }
    assert_eq!(Float::E8M0.decode(130), 8.0);
}

#[test]
fn every_value_encodes_to_its_own_bits() {
    for f in [
        Float::E4M3FN,
        Float::E4M3FNUZ,
        Float::E5M2,
        Float::E5M2FNUZ,
        Float::E2M1,
    ] {
        let count = if f == Float::E2M1 { 16 } else { 256 };
        for b in 0..count {
            let b = b as u8;
            let v = f.decode(b);
            if v.is_nan()
                || (v == 0.0
                    && b != 0
                    && f != Float::E2M1
                    && f != Float::E4M3FN
                    && f != Float::E5M2)
            {
                continue;
            }
            assert_eq!(f.encode(f64::from(v), false), b, "{f:?} {b:#x} = {v}");
        }
    }
}

/// ml_dtypes 0.6's `np.float32(x).astype(...)` bits for the inputs of ONNX's Cast tests.
#[test]
fn encoding_matches_ml_dtypes() {
    let x = [
        0.48f32,
        0.25,
        1.05,
        -3.5,
        -8.0,
        9.0,
        1e6,
        1e-7,
        f32::NAN,
        f32::INFINITY,
        -f32::NAN,
        f32::NEG_INFINITY,
        -4.0,
        0.01,
        -0.0,
        0.75,
        1.25,
        2.5,
        5.0,
        -0.25,
    ];
    // Without saturation, as astype does.
    let want: [(Float, [u8; 20]); 5] = [
        (
            Float::E2M1,
            [
                1, 0, 2, 14, 15, 7, 7, 0, 8, 7, 0, 15, 14, 0, 8, 2, 2, 4, 6, 8,
            ],
        ),
        (
            Float::E4M3FN,
            [
                47, 40, 56, 198, 208, 81, 127, 0, 127, 127, 255, 255, 200, 5, 128, 52, 58, 66, 74,
                168,
            ],
        ),
        (
            Float::E4M3FNUZ,
            [
                55, 48, 64, 206, 216, 89, 128, 0, 128, 128, 128, 128, 208, 10, 0, 60, 66, 74, 82,
                176,
            ],
        ),
        (
            Float::E5M2,
            [
                56, 52, 60, 195, 200, 72, 124, 0, 126, 124, 254, 252, 196, 33, 128, 58, 61, 65, 69,
                180,
            ],
        ),
        (
            Float::E5M2FNUZ,
            [
                60, 56, 64, 199, 204, 76, 128, 0, 128, 128, 128, 128, 200, 37, 0, 62, 65, 69, 73,
                184,
            ],
        ),
    ];
    for (f, bits) in want {
        let got: Vec<u8> = x.iter().map(|&v| f.encode(f64::from(v), false)).collect();
        assert_eq!(got, bits, "{f:?}");
    }
    // Saturated: the largest finite value for what overflows, infinities included.
    assert_eq!(Float::E4M3FN.encode(1e6, true), 0x7e);
    assert_eq!(Float::E4M3FN.encode(f64::NEG_INFINITY, true), 0xfe);
    assert_eq!(Float::E5M2.encode(f64::INFINITY, true), 0x7b);
    assert_eq!(Float::E5M2FNUZ.encode(-1e6, true), 0xff);
    // 464 lies halfway between 448 (even) and 480, which e4m3fn cannot hold: 448.
    assert_eq!(Float::E4M3FN.encode(464.0, false), 0x7e);
    assert_eq!(Float::E4M3FN.encode(465.0, false), 0x7f);
}

/// ONNX's test_cast_e8m0_FLOAT_to_FLOAT8E8M0 (round "up") and the other modes by hand.
#[test]
fn e8m0_rounds_by_its_mode() {
    let x = [0.0f32, 0.124, 0.25, 0.5, 1.1, 2.0, 4.0, 8.0];
    let up: Vec<u8> = x.iter().map(|&v| encode_e8m0(v, true, Round::Up)).collect();
    assert_eq!(up, [0, 124, 125, 126, 128, 128, 129, 130]);
    assert_eq!(encode_e8m0(3.0, true, Round::Down), 128);
    assert_eq!(encode_e8m0(3.0, true, Round::Nearest), 129);
    assert_eq!(encode_e8m0(2.9, true, Round::Nearest), 128);
    assert_eq!(encode_e8m0(f32::MAX, true, Round::Up), 0xfe);
    assert_eq!(encode_e8m0(f32::MAX, false, Round::Up), 0xff);
    assert_eq!(encode_e8m0(f32::NAN, true, Round::Up), 0xff);
}

#[test]
fn narrow_integers_wrap_and_pack_low_element_first() {
    assert_eq!(wrap_int(DType::I4, 9), (-7i8) as u8);
    assert_eq!(wrap_int(DType::I4, -8), (-8i8) as u8);
    assert_eq!(wrap_int(DType::U4, -2), 14);
    assert_eq!(wrap_int(DType::I2, 2), (-2i8) as u8);
    assert_eq!(wrap_int(DType::U2, -1), 3);
    // onnx.helper.make_tensor's int32_data for INT4 [1, -2, 3, -4, 5] and UINT2 [1, 2, 3, 0, 1, 2].
    let i4: Vec<u8> = [1i8, -2, 3, -4, 5].iter().map(|&v| v as u8).collect();
    assert_eq!(pack(DType::I4, &i4), [225, 195, 5]);
    assert_eq!(unpack(DType::I4, &[225, 195, 5], 5).unwrap(), i4);
    assert_eq!(pack(DType::U2, &[1, 2, 3, 0, 1, 2]), [57, 9]);
    assert_eq!(unpack(DType::U2, &[57, 9], 6).unwrap(), [1, 2, 3, 0, 1, 2]);
    assert_eq!(unpack(DType::U2, &[57], 6), None);
}
