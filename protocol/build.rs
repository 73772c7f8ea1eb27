//! Compiles proto/vkml.proto with prost; protox parses it in pure Rust (no protoc). `bytes`
//! fields become `bytes::Bytes`, so a payload decoded from a received buffer is not copied.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("proto");
    let file = dir.join("vkml.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&dir])
        .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
    prost_build::Config::new()
        .bytes(["."])
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("cannot generate code for {}: {e}", file.display()));
}
