//! Writes every kernel of a shaders folder as `<name>.spv`, for spirv-dis, spirv-val or a
//! byte-for-byte comparison of two builds:
//!     cargo run -p vkml-shaderc --example dump -- shaders /tmp/spv
//! and prints each file's push-constant layout and each kernel's `ShaderNeeds` bits.

use std::path::PathBuf;

fn main() {
    if let Err(e) = run() {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, out] = args.as_slice() else {
        return Err("usage: dump <shaders folder> <output folder>".into());
    };
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let started = std::time::Instant::now();
    let shaders = vkml_shaderc::build(dir.as_ref())?;
    let took = started.elapsed();
    let mut count = 0;
    for f in &shaders.files {
        println!("{}: {}", f.stem, f.layout);
        for k in &f.kernels {
            println!("  {} needs {:#x}", k.name, k.needs);
            let bytes: Vec<u8> = k.spirv.iter().flat_map(|w| w.to_le_bytes()).collect();
            let path = out.join(format!("{}.spv", k.name));
            std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            count += 1;
        }
    }
    eprintln!(
        "{count} kernels from {} files in {took:.2?}",
        shaders.files.len()
    );
    Ok(())
}
