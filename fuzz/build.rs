//! The ONNX schema as plain prost types, for building and mutating models. The node's own
//! copy of these types is private to it; the fuzzer needs them mutable and owned.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("../node/proto");
    let file = dir.join("onnx.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&dir])
        .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
    prost_build::Config::new()
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("cannot generate code for {}: {e}", file.display()));
}
