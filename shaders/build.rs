//! Compiles every `*.comp` beside this file into `$OUT_DIR/kernels.rs` (see vkml-shaderc and
//! docs/SHADERS.md). A broken shader fails the build with every problem listed.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets this")).join("kernels.rs");
    if let Err(e) = vkml_shaderc::generate(&dir, &out, "::vkml_shaders") {
        // Cargo shows a failing build script's stderr; a panic would bury it in a backtrace.
        eprintln!("{e}");
        std::process::exit(1);
    }
}
