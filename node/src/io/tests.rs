//! Tensor files. The numpy and onnx bytes below were written by numpy 2.4 (`np.save`,
//! `numpy.lib.format.write_array`) and onnx 1.22 (`numpy_helper.from_array`, `make_tensor`);
//! each constant's comment is the Python expression that made it.

use std::path::PathBuf;

use super::npy_header;
use super::*;
use crate::onnx::tests::TempDir;
use crate::tensor::{DType, Tensor};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// numpy pads every header here to 128 bytes: the dict, spaces, '\n'.
fn npy_v1(dict: &str, data: &str) -> String {
    let mut h = "934e554d50590100".to_string() + "7600";
    let mut text = dict.as_bytes().to_vec();
    text.resize(117, b' ');
    text.push(b'\n');
    h += &text.iter().map(|b| format!("{b:02x}")).collect::<String>();
    h + data
}

// np.array([[1.5, -2.0, 0.25], [0, 1, 2]], dtype=np.float32)
const F32_2X3: &str = "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c2033292c207d202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a0000c03f000000c00000803e000000000000803f00000040";
// np.array([True, False, True])
const BOOL_3: &str = "934e554d5059010076007b276465736372273a20277c6231272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a010001";
// np.array(-7, dtype=np.int64)
const I64_SCALAR: &str = "934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028292c207d20202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200af9ffffffffffffff";
// np.array([1.0, -2.0], dtype=np.float16)
const F16_2: &str = "934e554d5059010076007b276465736372273a20273c6632272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c292c207d2020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a003c00c0";
// np.zeros((0, 2), dtype=np.uint8)
const U8_EMPTY: &str = "934e554d5059010076007b276465736372273a20277c7531272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028302c2032292c207d202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a";
// write_array(f, np.array([3, 4], dtype=np.int16), version=(2, 0))
const I16_V2: &str = "934e554d50590200740000007b276465736372273a20273c6932272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c292c207d202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a03000400";
// write_array(f, np.array([3, 4], dtype=np.uint16), version=(3, 0))
const U16_V3: &str = "934e554d50590300740000007b276465736372273a20273c7532272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c292c207d202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a03000400";
// np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
const FORTRAN: &str = "934e554d5059010076007b276465736372273a20273c6934272c2027666f727472616e5f6f72646572273a20547275652c20277368617065273a2028322c2033292c207d20202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a000000000300000001000000040000000200000005000000";
// np.array([1, 2], dtype='>i4')
const BIG_ENDIAN: &str = "934e554d5059010076007b276465736372273a20273e6934272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c292c207d2020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a0000000100000002";
// numpy_helper.from_array(np.array([[1, -2], [3, 4]], dtype=np.int32), "input_0")
const PB_RAW: &str = "0802080210064207696e7075745f304a1001000000feffffff0300000004000000";
// helper.make_tensor("typed", TensorProto.FLOAT, [3], [0.5, -1.0, 4.0])
const PB_TYPED: &str = "08031001220c0000003f000080bf0000804042057479706564";

fn file(dir: &TempDir, name: &str, hex: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, unhex(hex)).unwrap();
    p
}

#[test]
fn npy_helper_matches_numpy_layout() {
    // The helper used by the error tests below rebuilds numpy's bytes exactly.
    let dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }";
    assert_eq!(npy_v1(dict, "003c00c0"), F16_2);
}

#[test]
fn reads_numpy_files() {
    let dir = TempDir::new("npyread");
    let t = read_npy(&file(&dir, "a.npy", F32_2X3)).unwrap();
    assert_eq!((t.dtype(), t.shape()), (DType::F32, &[2, 3][..]));
    assert_eq!(
        t.view::<f32>().unwrap()[..],
        [1.5, -2.0, 0.25, 0.0, 1.0, 2.0]
    );

    let t = read_npy(&file(&dir, "b.npy", BOOL_3)).unwrap();
    assert_eq!(t.view_bool().unwrap(), [true, false, true]);

    let t = read_npy(&file(&dir, "c.npy", I64_SCALAR)).unwrap();
    assert_eq!((t.shape(), t.to_i64_vec().unwrap()), (&[][..], vec![-7]));

    let t = read_npy(&file(&dir, "d.npy", F16_2)).unwrap();
    assert_eq!(
        (t.dtype(), t.to_f64_vec().unwrap()),
        (DType::F16, vec![1.0, -2.0])
    );

    let t = read_npy(&file(&dir, "e.npy", U8_EMPTY)).unwrap();
    assert_eq!((t.dtype(), t.shape()), (DType::U8, &[0, 2][..]));

    let t = read_npy(&file(&dir, "f.npy", I16_V2)).unwrap();
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::I16, vec![3, 4])
    );
    let t = read_npy(&file(&dir, "g.npy", U16_V3)).unwrap();
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::U16, vec![3, 4])
    );
}

#[test]
fn writes_what_numpy_writes() {
    let dir = TempDir::new("npywrite");
    let cases: [(&str, Tensor); 5] = [
        (
            F32_2X3,
            Tensor::from_vec(vec![2, 3], vec![1.5f32, -2.0, 0.25, 0.0, 1.0, 2.0]),
        ),
        (BOOL_3, Tensor::from_bools(vec![3], vec![true, false, true])),
        (I64_SCALAR, Tensor::scalar(-7i64)),
        (
            F16_2,
            Tensor::from_vec(
                vec![2],
                vec![half::f16::from_f32(1.0), half::f16::from_f32(-2.0)],
            ),
        ),
        (U8_EMPTY, Tensor::zeros(DType::U8, vec![0, 2])),
    ];
    for (i, (hex, t)) in cases.iter().enumerate() {
        let p = dir.join(&format!("{i}.npy"));
        write_npy(&p, t).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), unhex(hex), "case {i}: {t:?}");
    }
}

/// A tensor of `dtype` whose bytes are 0, 1, 2...: every byte position is distinguishable.
fn counting(dtype: DType, shape: Vec<usize>) -> Tensor {
    if dtype == DType::String {
        let n = crate::tensor::numel(&shape);
        let text: Vec<String> = (0..n).map(|i| "ab".repeat(i % 3)).collect();
        return Tensor::from_strings(shape, &text);
    }
    let n = crate::tensor::numel(&shape) * dtype.size();
    let bytes: Vec<u8> = match dtype {
        DType::Bool => (0..n).map(|i| (i % 2) as u8).collect(),
        // Values as memory holds the low-precision types (crate::lowp).
        DType::I4 | DType::U4 | DType::I2 | DType::U2 => (0..n)
            .map(|i| crate::lowp::wrap_int(dtype, (i * 7 + 1) as i64))
            .collect(),
        DType::F4E2M1 => (0..n).map(|i| ((i * 7 + 1) % 16) as u8).collect(),
        _ => (0..n).map(|i| (i * 7 + 1) as u8).collect(),
    };
    Tensor::from_bytes(dtype, shape, bytes.into()).unwrap()
}

#[test]
fn npy_and_pb_round_trip_every_dtype() {
    let dir = TempDir::new("roundtrip");
    for dtype in DType::ALL {
        for shape in [vec![], vec![3], vec![2, 0], vec![2, 3, 2]] {
            let t = counting(dtype, shape.clone());
            let p = dir.join("t.npy");
            if dtype == DType::String {
                // No .npy form (numpy pickles strings); .pb below.
                assert!(write_npy(&p, &t).is_err());
            } else {
                write_npy(&p, &t).unwrap();
            }
            // numpy has no low-precision types: the narrow integers come back as the int8 or
            // uint8 they are held in, and the one-byte floats cannot be told apart.
            match dtype {
                DType::I4 | DType::I2 | DType::U4 | DType::U2 => {
                    let back = read_npy(&p).unwrap();
                    let held = if matches!(dtype, DType::I4 | DType::I2) {
                        DType::I8
                    } else {
                        DType::U8
                    };
                    assert_eq!((back.dtype(), back.bytes()), (held, t.bytes()));
                }
                DType::String => {}
                d if d.is_low_precision() => {
                    let e = read_npy(&p).unwrap_err().to_string();
                    assert!(e.contains("does not say which type"), "{e}");
                }
                _ => {
                    assert_eq!(read_npy(&p).unwrap(), t, "npy {dtype} {shape:?}");
                    assert_eq!(read_tensor_file(&p).unwrap(), t);
                }
            }

            let p = dir.join("t.pb");
            write_pb(&p, "x_in", &t).unwrap();
            let (name, back) = read_pb(&p).unwrap();
            assert_eq!((name.as_str(), &back), ("x_in", &t), "pb {dtype} {shape:?}");
            assert_eq!(read_tensor_file(&p).unwrap(), t);
        }
    }
}

#[test]
fn long_headers_use_version_2() {
    let dir = TempDir::new("npyv2");
    // 33,000 axes of size 1: the header no longer fits version 1's 16-bit length.
    let t = Tensor::zeros(DType::F32, vec![1; 33_000]);
    let p = dir.join("long.npy");
    write_npy(&p, &t).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[6..8], &[2, 0]);
    let header_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    assert_eq!((12 + header_len) % 64, 0);
    assert_eq!(read_npy(&p).unwrap(), t);
}

#[test]
fn npy_errors_name_file_and_problem() {
    let dir = TempDir::new("npyerr");
    let err = |name: &str, bytes: Vec<u8>| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        read_npy(&p).unwrap_err().to_string()
    };

    let e = err("x.npy", b"PK\x03\x04 a zip file".to_vec());
    assert!(e.ends_with("x.npy is not a .npy file: bad magic"), "{e}");

    let mut cut = unhex(F32_2X3);
    cut.truncate(cut.len() - 4);
    let e = err("cut.npy", cut);
    assert!(
        e.ends_with("cut.npy: truncated: header says 24 bytes of data, file has 20"),
        "{e}"
    );

    let e = err("hdr.npy", unhex(F32_2X3)[..60].to_vec());
    assert!(
        e.contains("hdr.npy is not a .npy file") && e.contains("header"),
        "{e}"
    );

    let mut long = unhex(BOOL_3);
    long.push(1);
    let e = err("long.npy", long);
    assert!(
        e.contains("header says 3 bytes of data, but the file has 4"),
        "{e}"
    );

    let e = err("f.npy", unhex(FORTRAN));
    assert!(e.contains("f.npy") && e.contains("Fortran order"), "{e}");
    let e = err("be.npy", unhex(BIG_ENDIAN));
    assert!(e.contains("'>i4' is big-endian"), "{e}");

    let mut v9 = unhex(F16_2);
    v9[6] = 9;
    assert!(err("v9.npy", v9).contains("version 9.0 is not supported"));

    let bad_dtype = npy_v1(
        "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
        "0000000000000000",
    );
    assert!(err("c.npy", unhex(&bad_dtype)).contains("dtype '<c8' is not supported"));
    let structured = npy_v1(
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
        "00000000",
    );
    assert!(err("s.npy", unhex(&structured)).contains("structured dtypes"));
    let no_shape = npy_v1("{'descr': '<f4', 'fortran_order': False, }", "");
    assert!(err("n.npy", unhex(&no_shape)).contains("no 'shape'"));
    let huge = npy_v1(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
        "",
    );
    assert!(err("h.npy", unhex(&huge)).contains("too large"));
}

#[test]
fn npy_header_dialects() {
    // Python 2 numpy wrote long integers with an L suffix; quotes may be double.
    let h = npy_header::parse(
        b"{\"descr\": \"<i8\", \"shape\": (2L, 3L), \"fortran_order\": False}  \n",
    )
    .unwrap();
    assert_eq!(
        (h.descr.as_str(), h.fortran_order, h.shape),
        ("<i8", false, vec![2, 3])
    );
    assert!(npy_header::parse(b"{'descr': '<f4', 'fortran_order': Maybe, 'shape': ()}").is_err());
    assert!(
        npy_header::parse(b"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}").is_err()
    );
    assert_eq!(npy_header::dtype_of("|b1"), Ok(DType::Bool));
    assert_eq!(npy_header::dtype_of("<V2"), Ok(DType::BF16));
    assert_eq!(npy_header::dtype_of(">u1"), Ok(DType::U8));
}

#[test]
fn reads_pb_files_written_by_onnx() {
    let dir = TempDir::new("pbread");
    let (name, t) = read_pb(&file(&dir, "input_0.pb", PB_RAW)).unwrap();
    assert_eq!(
        (name.as_str(), t.dtype(), t.shape()),
        ("input_0", DType::I32, &[2, 2][..])
    );
    assert_eq!(t.to_i64_vec().unwrap(), [1, -2, 3, 4]);

    let (name, t) = read_pb(&file(&dir, "typed.pb", PB_TYPED)).unwrap();
    assert_eq!(name, "typed");
    assert_eq!(t.view::<f32>().unwrap()[..], [0.5, -1.0, 4.0]);
}

#[test]
fn pb_errors_name_the_file() {
    let dir = TempDir::new("pberr");
    let full = unhex(PB_RAW);
    let p = dir.join("cut.pb");
    std::fs::write(&p, &full[..full.len() - 3]).unwrap();
    let e = read_pb(&p).unwrap_err().to_string();
    assert!(e.contains("cut.pb is not an ONNX TensorProto file"), "{e}");

    // Decodes, but 16 bytes of raw_data cannot be a 3x2 int32 tensor: the onnx error is
    // wrapped with the file's path.
    let mut bad = full.clone();
    bad[1] = 3;
    let p = file(
        &dir,
        "bad.pb",
        &bad.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    );
    let e = read_pb(&p).unwrap_err();
    assert!(matches!(e, TensorFileError::Tensor { .. }));
    let e = e.to_string();
    assert!(
        e.contains("bad.pb: tensor 'input_0': raw_data holds 16 bytes"),
        "{e}"
    );

    let e = read_tensor_file(&dir.join("x.csv"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("x.csv: unknown tensor file type"), "{e}");
    let e = read_tensor_file(&dir.join("missing.npy"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot read") && e.contains("missing.npy"),
        "{e}"
    );
}

#[test]
fn string_outputs_are_written_as_tensor_protos() {
    let dir = TempDir::new("stringout");
    let words = Tensor::from_strings(vec![2], &["naïve", ""]);
    let nums = Tensor::from_vec(vec![1], vec![3i64]);
    let outputs = vec![
        ("w".to_string(), words.clone()),
        ("n".to_string(), nums.clone()),
    ];
    let paths = write_outputs(dir.path(), &outputs).unwrap();
    assert!(
        paths[0].ends_with("w.pb") && paths[1].ends_with("n.npy"),
        "{paths:?}"
    );
    let (name, back) = read_pb(&paths[0]).unwrap();
    assert_eq!((name.as_str(), back), ("w", words));
    assert_eq!(read_npy(&paths[1]).unwrap(), nums);
}
