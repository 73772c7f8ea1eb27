//! Compiles every `shaders/*.comp` to SPIR-V (Vulkan 1.2, SPIR-V 1.5, or 1.3 / 1.6 for a file
//! with a `// @vulkan1.3` line) with glslang and writes
//! `$OUT_DIR/shaders.rs`, holding `pub static SHADERS: &[(&str, &[u32])]` sorted by name (the
//! file stem), which the Vulkan layer embeds. See docs/SHADERS.md for the conventions.
//!
//! A file may declare variants, one per line anywhere in it:
//!     // @variant f16 T=float16_t ACC=float F16
//! compiles the file once per variant, with those preprocessor definitions, into the shader
//! `<stem>_<suffix>` (here `binary_f16`); a file without variants compiles once as `<stem>`.
//! Each shader's table entry also carries the optional device features its SPIR-V declares
//! (read from its OpCapability instructions), so the planner can keep an op off a device that
//! lacks them.
//!
//! Every shader is compiled even after one fails, so a broken build lists every broken file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use glslang::include::{IncludeHandler, IncludeResult, IncludeType};
use glslang::{
    Compiler, CompilerOptions, ShaderInput, ShaderMessage, ShaderSource, ShaderStage,
    SourceLanguage, SpirvVersion, Target, VulkanVersion,
};

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    let dir = root.join("../../shaders");
    // A directory here makes cargo rerun on any change inside it, new files included. Paths
    // are relative to the package root, so checkouts sharing one target directory each watch
    // their own files.
    println!("cargo:rerun-if-changed=../../shaders");

    let shaders = list_shaders(&dir);
    let compiler = Compiler::acquire().expect("glslang failed to initialise");
    let mut compiled = Vec::new();
    let mut failures = Vec::new();
    for (stem, path) in &shaders {
        println!("cargo:rerun-if-changed=../../shaders/{stem}.comp");
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                failures.push(format!("{}: cannot read: {e}", path.display()));
                continue;
            }
        };
        let variants = match variants(stem, &text) {
            Ok(v) => v,
            Err(message) => {
                failures.push(format!("{}: {message}", path.display()));
                continue;
            }
        };
        for (name, defines) in variants {
            match compile(compiler, &dir, &text, &defines) {
                Ok(words) => {
                    let needs = features_needed(&words);
                    compiled.push((name, needs, words));
                }
                Err(message) => failures.push(format!("{} ({name}):\n{message}", path.display())),
            }
        }
    }
    compiled.sort_by(|a, b| a.0.cmp(&b.0));
    for pair in compiled.windows(2) {
        if pair[0].0 == pair[1].0 {
            failures.push(format!(
                "two shaders are both named '{}': rename a file or a variant",
                pair[0].0
            ));
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

type Defines = Vec<(String, Option<String>)>;

/// The shaders a file compiles to: `(name, definitions)`, from its `// @variant` lines.
fn variants(stem: &str, text: &str) -> Result<Vec<(String, Defines)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("// @variant") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let suffix = words
            .next()
            .ok_or_else(|| format!("line {}: '// @variant' needs a suffix", n + 1))?;
        if !suffix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(format!(
                "line {}: variant suffix '{suffix}' must be lowercase letters, digits and '_'",
                n + 1
            ));
        }
        let defines = words
            .map(|w| match w.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (w.to_string(), None),
            })
            .collect();
        out.push((format!("{stem}_{suffix}"), defines));
    }
    if out.is_empty() {
        out.push((stem.to_string(), Vec::new()));
    }
    Ok(out)
}

/// Optional device features a SPIR-V module declares, as the bits of
/// `vkml::device::vulkan::ShaderNeeds` (keep the two in step).
fn features_needed(words: &[u32]) -> u32 {
    const OP_CAPABILITY: u32 = 17;
    let mut needs = 0;
    let mut i = 5; // past the header
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        if count == 0 {
            break;
        }
        if words[i] & 0xffff == OP_CAPABILITY && i + 1 < words.len() {
            needs |= match words[i + 1] {
                9 => 1,                       // Float16
                10 => 1 << 1,                 // Float64
                22 => 1 << 2,                 // Int16
                39 => 1 << 3,                 // Int8
                4433..=4435 => 1 << 4,        // 16-bit storage
                4448..=4450 => 1 << 5,        // 8-bit storage
                6022 | 5357 => 1 << 6,        // cooperative matrix (KHR, NV)
                5430..=5434 | 5439 => 1 << 7, // cooperative matrix 2 (NV)
                5116..=5118 => 1 << 8,        // bfloat16 (KHR)
                _ => 0,
            };
        }
        i += count;
    }
    needs
}

fn compile(
    compiler: &Compiler,
    dir: &Path,
    text: &str,
    defines: &Defines,
) -> Result<Vec<u32>, String> {
    if text.contains('\0') {
        return Err("the file contains a NUL byte".into());
    }
    let source = ShaderSource::from(text.to_string());
    let defines: Vec<(&str, Option<&str>)> = defines
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    // Extensions that exist only for SPIR-V 1.6 (NV cooperative matrix 2) need Vulkan 1.3; a
    // file asks for it with a `// @vulkan1.3` line. The rest stay loadable on Vulkan 1.2.
    let (version, spirv_version) = if text.lines().any(|l| l.trim() == "// @vulkan1.3") {
        (VulkanVersion::Vulkan1_3, SpirvVersion::SPIRV1_6)
    } else {
        (VulkanVersion::Vulkan1_2, SpirvVersion::SPIRV1_5)
    };
    let options = CompilerOptions {
        source_language: SourceLanguage::GLSL,
        target: Target::Vulkan {
            version,
            spirv_version,
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
        Some(defines.as_slice()),
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
        println!("cargo:rerun-if-changed=../../shaders/{header_name}");
        Some(IncludeResult {
            name: header_name.to_string(),
            data,
        })
    }
}

fn generate(compiled: &[(String, u32, Vec<u32>)]) -> String {
    let mut s = String::from(
        "// Generated by node/build/shaders.rs from shaders/*.comp. Do not edit.\n\
         /// (name, optional features needed as `ShaderNeeds` bits, SPIR-V words), by name.\n\
         pub static SHADERS: &[(&str, u32, &[u32])] = &[\n",
    );
    for (name, needs, words) in compiled {
        write!(s, "    (\"{name}\", {needs:#x}, &[").unwrap();
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
