//! Compiles every `shaders/*.comp` to SPIR-V (Vulkan 1.2, SPIR-V 1.5) with glslang and writes
//! `$OUT_DIR/shaders.rs`, holding `pub static SHADERS: &[(&str, &[u32])]` sorted by name (the
//! file stem), which the Vulkan layer embeds. See docs/SHADERS.md for the conventions.
//!
//! Every shader is compiled even after one fails, so a broken build lists every broken file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use glslang::include::{IncludeHandler, IncludeResult, IncludeType};
use glslang::{
    Compiler, CompilerOptions, ShaderInput, ShaderMessage, ShaderSource, ShaderStage,
    SourceLanguage, SpirvVersion, Target, VulkanVersion,
};

pub fn build() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    let dir = root.join("shaders");
    // A directory here makes cargo rerun on any change inside it, new files included. Paths
    // are relative to the package root, so checkouts sharing one target directory each watch
    // their own files.
    println!("cargo:rerun-if-changed=shaders");

    let shaders = list_shaders(&dir);
    let compiler = Compiler::acquire().expect("glslang failed to initialise");
    let mut compiled = Vec::new();
    let mut failures = Vec::new();
    for (name, path) in &shaders {
        println!("cargo:rerun-if-changed=shaders/{name}.comp");
        match compile(compiler, &dir, path) {
            Ok(words) => compiled.push((name.as_str(), words)),
            Err(message) => failures.push(format!("{}:\n{message}", path.display())),
        }
    }
    if !failures.is_empty() {
        panic!(
            "{} shader(s) failed to compile:\n\n{}",
            failures.len(),
            failures.join("\n\n")
        );
    }

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets this")).join("shaders.rs");
    std::fs::write(&out, generate(&compiled))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}

/// `(stem, path)` of each `*.comp`, sorted by stem so the generated table can be searched.
fn list_shaders(dir: &Path) -> Vec<(String, PathBuf)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // No shaders yet is a valid (if useless) build.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("cannot read {}: {e}", dir.display()),
    };
    let mut shaders = Vec::new();
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .path();
        if path.extension().and_then(|e| e.to_str()) != Some("comp") {
            continue;
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        // The stem becomes a Rust string literal and a `Dispatch::shader` name: keep it plain.
        let plain = !stem.is_empty()
            && stem
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            panic!(
                "{}: shader names must be lowercase letters, digits and '_'",
                path.display()
            );
        }
        shaders.push((stem.to_string(), path));
    }
    shaders.sort();
    shaders
}

fn compile(compiler: &Compiler, dir: &Path, path: &Path) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    if text.contains('\0') {
        return Err("the file contains a NUL byte".into());
    }
    let source = ShaderSource::from(text);
    let options = CompilerOptions {
        source_language: SourceLanguage::GLSL,
        target: Target::Vulkan {
            version: VulkanVersion::Vulkan1_2,
            spirv_version: SpirvVersion::SPIRV1_5,
        },
        version_profile: None,
        messages: ShaderMessage::DEFAULT
            | ShaderMessage::VULKAN_RULES
            | ShaderMessage::SPV_RULES
            | ShaderMessage::ENHANCED
            | ShaderMessage::DISPLAY_ERROR_COLUMN,
    };
    let mut includes = Includes { dir };
    let input = ShaderInput::new(
        &source,
        ShaderStage::Compute,
        &options,
        None::<&[(&str, Option<&str>)]>,
        Some(&mut includes),
    )
    .map_err(message)?;
    let shader = compiler.create_shader(input).map_err(message)?;
    let words = shader.compile().map_err(message)?;
    // A SPIR-V module starts with its magic number; anything else means glslang failed quietly.
    if words.first() != Some(&0x0723_0203) {
        return Err("glslang produced no SPIR-V".into());
    }
    Ok(words)
}

/// glslang's own log where there is one, without the crate's empty decorations.
fn message(e: glslang::error::GlslangError) -> String {
    use glslang::error::GlslangError as E;
    match e {
        E::PreprocessError(l) | E::ParseError(l) | E::MapIoError(l) | E::LinkError(l) => {
            format!("{}{}", l.log.trim_end(), l.debug_log.trim_end())
        }
        e => e.to_string(),
    }
}

/// Resolves `#include "name.glsl"` (with `GL_GOOGLE_include_directive`) against `shaders/`.
struct Includes<'a> {
    dir: &'a Path,
}

impl IncludeHandler for Includes<'_> {
    fn include(
        &mut self,
        _ty: IncludeType,
        header_name: &str,
        _includer_name: &str,
        _include_depth: usize,
    ) -> Option<IncludeResult> {
        // Only plain file names: an include must not reach outside the shaders folder.
        if header_name.contains(['/', '\\']) || header_name.starts_with('.') {
            return None;
        }
        let path = self.dir.join(header_name);
        let data = std::fs::read_to_string(&path).ok()?;
        println!("cargo:rerun-if-changed=shaders/{header_name}");
        Some(IncludeResult {
            name: header_name.to_string(),
            data,
        })
    }
}

fn generate(compiled: &[(&str, Vec<u32>)]) -> String {
    let mut s = String::from(
        "// Generated by node/build/shaders.rs from shaders/*.comp. Do not edit.\n\
         pub static SHADERS: &[(&str, &[u32])] = &[\n",
    );
    for (name, words) in compiled {
        write!(s, "    (\"{name}\", &[").unwrap();
        for (i, w) in words.iter().enumerate() {
            if i % 8 == 0 {
                s.push_str("\n        ");
            }
            write!(s, "{w:#010x}, ").unwrap();
        }
        s.push_str("\n    ]),\n");
    }
    s.push_str("];\n");
    s
}
