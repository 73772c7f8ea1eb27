//! External data: offsets (aligned or not), ranges, and paths that try to leave the folder.

use super::super::{LoadError, load, tensor_from_proto};
use super::{TempDir, external_tensor, f32_bytes, model_with, write_model};
use crate::onnx::proto::GraphProto;

/// weights.bin: 3 bytes of padding, then two f32 values at offset 3, then 1 byte, then one
/// int64 at offset 12, then a trailing f32 at offset 20.
fn write_weights(dir: &TempDir) {
    let mut b = vec![0xAA, 0xBB, 0xCC];
    b.extend(f32_bytes(&[1.5, -2.0]));
    b.push(0xDD);
    b.extend((-5i64).to_le_bytes());
    b.extend(f32_bytes(&[0.25]));
    assert_eq!(b.len(), 24);
    std::fs::write(dir.join("weights.bin"), b).unwrap();
}

#[test]
fn unaligned_offsets_and_shared_mapping() {
    let dir = TempDir::new("ext");
    write_weights(&dir);
    let graph = GraphProto {
        name: "g".into(),
        initializer: vec![
            external_tensor(
                "a",
                1,
                &[2],
                &[
                    ("location", "weights.bin"),
                    ("offset", "3"),
                    ("length", "8"),
                ],
            ),
            external_tensor(
                "b",
                7,
                &[1],
                &[
                    ("location", "./weights.bin"),
                    ("offset", "12"),
                    ("length", "8"),
                ],
            ),
            // No length: to the end of the file.
            external_tensor(
                "c",
                1,
                &[1],
                &[
                    ("location", "weights.bin"),
                    ("offset", "20"),
                    ("checksum", "x"),
                ],
            ),
        ],
        ..Default::default()
    };
    let m = load(&write_model(&dir, "m.onnx", &model_with(graph))).unwrap();
    let inits = &m.graph.initializers;
    assert_eq!(inits[0].1.view::<f32>().unwrap()[..], [1.5, -2.0]);
    assert_eq!(inits[1].1.view::<i64>().unwrap()[..], [-5]);
    assert_eq!(inits[2].1.view::<f32>().unwrap()[..], [0.25]);
    // One mapping, sliced: the tensors sit exactly as far apart as their offsets.
    let p = |i: usize| inits[i].1.bytes().as_ptr() as usize;
    assert_eq!(p(1) - p(0), 9);
    assert_eq!(p(2) - p(0), 17);
}

#[test]
fn external_data_from_a_subfolder() {
    let dir = TempDir::new("extsub");
    std::fs::create_dir(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/w.bin"), f32_bytes(&[3.0])).unwrap();
    let t = external_tensor("w", 1, &[1], &[("location", "data/w.bin")]);
    let v = tensor_from_proto(&t, Some(dir.path())).unwrap();
    assert_eq!(v.view::<f32>().unwrap()[..], [3.0]);
}

fn ext_err(dir: &TempDir, entries: &[(&str, &str)]) -> LoadError {
    let t = external_tensor("w", 1, &[2], entries);
    tensor_from_proto(&t, Some(dir.path())).unwrap_err()
}

#[test]
fn paths_leaving_the_folder_are_refused() {
    let outer = TempDir::new("extescape");
    std::fs::write(outer.join("secret.bin"), f32_bytes(&[1.0, 2.0])).unwrap();
    let model = outer.join("model");
    std::fs::create_dir(&model).unwrap();
    let t = external_tensor("w", 1, &[2], &[("location", "../secret.bin")]);
    let e = tensor_from_proto(&t, Some(&model)).unwrap_err().to_string();
    assert!(
        e.contains("'..' is not allowed") && e.contains("'w'"),
        "{e}"
    );
    let t = external_tensor("w", 1, &[2], &[("location", "sub/../../secret.bin")]);
    assert!(tensor_from_proto(&t, Some(&model)).is_err());

    let abs = outer.join("secret.bin");
    let t = external_tensor("w", 1, &[2], &[("location", abs.to_str().unwrap())]);
    let e = tensor_from_proto(&t, Some(&model)).unwrap_err().to_string();
    assert!(e.contains("absolute paths are not allowed"), "{e}");

    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outer.join("secret.bin"), model.join("link.bin")).unwrap();
        let t = external_tensor("w", 1, &[2], &[("location", "link.bin")]);
        let e = tensor_from_proto(&t, Some(&model)).unwrap_err().to_string();
        assert!(
            e.contains("outside the model's folder") && e.contains("symbolic link"),
            "{e}"
        );
        // A link that stays inside the folder is fine.
        std::fs::write(model.join("real.bin"), f32_bytes(&[4.0, 5.0])).unwrap();
        std::os::unix::fs::symlink(model.join("real.bin"), model.join("inside.bin")).unwrap();
        let t = external_tensor("w", 1, &[2], &[("location", "inside.bin")]);
        let v = tensor_from_proto(&t, Some(&model)).unwrap();
        assert_eq!(v.view::<f32>().unwrap()[..], [4.0, 5.0]);
    }
}

#[test]
fn bad_ranges_and_files_name_file_offset_and_length() {
    let dir = TempDir::new("extbad");
    write_weights(&dir);

    let e = ext_err(&dir, &[("location", "missing.bin")]).to_string();
    assert!(
        e.contains("missing.bin") && e.contains("cannot open"),
        "{e}"
    );

    let e = ext_err(
        &dir,
        &[
            ("location", "weights.bin"),
            ("offset", "20"),
            ("length", "8"),
        ],
    )
    .to_string();
    assert!(
        e.contains("weights.bin")
            && e.contains("offset 20")
            && e.contains("length 8")
            && e.contains("past the end of the file (24 bytes)"),
        "{e}"
    );

    let e = ext_err(&dir, &[("location", "weights.bin"), ("offset", "30")]).to_string();
    assert!(e.contains("beyond the end"), "{e}");

    // The range exists but does not hold the tensor's 8 bytes.
    let e = ext_err(
        &dir,
        &[
            ("location", "weights.bin"),
            ("offset", "3"),
            ("length", "4"),
        ],
    )
    .to_string();
    assert!(
        e.contains("holds 4 bytes") && e.contains("needs 8 bytes"),
        "{e}"
    );
    let e = ext_err(&dir, &[("location", "weights.bin"), ("offset", "0")]).to_string();
    assert!(
        e.contains("to the end of the file") && e.contains("holds 24 bytes"),
        "{e}"
    );

    let e = ext_err(&dir, &[("location", "weights.bin"), ("offset", "-1")]).to_string();
    assert!(e.contains("'-1'"), "{e}");

    let e = ext_err(&dir, &[("offset", "0")]).to_string();
    assert!(e.contains("no 'location'"), "{e}");

    // Without the model's folder there is nothing to resolve the path against.
    let t = external_tensor("w", 1, &[2], &[("location", "weights.bin")]);
    let e = tensor_from_proto(&t, None).unwrap_err().to_string();
    assert!(e.contains("not read from a file"), "{e}");
}

/// Resolved against weights received apart from the model, with `defer`: an initializer of
/// the main graph whose bytes were not sent is deferred with its type and where its bytes
/// are; one that was sent takes them; without `defer` a missing one is an error naming it.
#[test]
fn missing_initializers_are_deferred_only_when_asked() {
    use prost::Message;
    let graph = GraphProto {
        name: "g".into(),
        initializer: vec![
            external_tensor(
                "big",
                1,
                &[2, 3],
                &[
                    ("location", "sub/w.bin"),
                    ("offset", "64"),
                    ("length", "24"),
                ],
            ),
            external_tensor(
                "small",
                1,
                &[1],
                &[("location", "sub/w.bin"), ("offset", "0"), ("length", "4")],
            ),
        ],
        ..Default::default()
    };
    let data = bytes::Bytes::from(model_with(graph).encode_to_vec());
    let sent: std::collections::BTreeMap<(String, u64), bytes::Bytes> =
        [(("sub/w.bin".to_string(), 0), f32_bytes(&[7.0]).into())].into();
    let (m, used) = super::super::load_resolved(data.clone(), sent.clone(), true).unwrap();
    assert_eq!(m.graph.initializers.len(), 1);
    assert_eq!(m.graph.initializers[0].0, "small");
    assert_eq!(m.graph.initializers[0].1.view::<f32>().unwrap()[..], [7.0]);
    assert_eq!(used, [("small".to_string(), ("sub/w.bin".to_string(), 0))]);
    let d = &m.graph.deferred;
    assert_eq!(d.len(), 1);
    assert_eq!(
        (
            d[0].name.as_str(),
            d[0].shape.as_slice(),
            d[0].location.as_str(),
            d[0].offset
        ),
        ("big", &[2usize, 3][..], "sub/w.bin", 64)
    );
    assert_eq!(d[0].dtype, crate::tensor::DType::F32);
    let e = super::super::load_resolved(data, sent, false).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("big") && e.contains("not sent"), "{e}");
}
