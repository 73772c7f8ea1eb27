//! Compiles node/proto/onnx.proto into Rust types with prost. protox parses the schema in pure
//! Rust, so building needs no protoc. `bytes` fields become `bytes::Bytes`, so a model decoded
//! from a `Bytes` over its memory mapping keeps its weights in the mapping (no copy).

use std::path::PathBuf;

pub fn build() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("node/proto");
    let file = dir.join("onnx.proto");
    println!("cargo:rerun-if-changed={}", file.display());

    let descriptors = protox::compile([&file], [&dir])
        .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
    prost_build::Config::new()
        .bytes(["."])
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("cannot generate code for {}: {e}", file.display()));
}
