//! Compiles the probe kernels (probes/*.comp: tiny shaders the tests and timing benches of this
//! crate dispatch) with the generator the shipped kernels use, into `$OUT_DIR/probes.rs`. Only
//! the tests and benches include it: the library itself ships no probe.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets this"))
        .join("probes");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets this")).join("probes.rs");
    if let Err(e) = vkml_shaderc::generate(&dir, &out, "::vkml_shaders") {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
