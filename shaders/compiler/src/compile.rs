//! GLSL to SPIR-V with glslang, by the conventions of docs/SHADERS.md: Vulkan 1.2 / SPIR-V 1.5,
//! or 1.3 / 1.6 for a file with a `// @vulkan1.3` line; one module per `// @variant` line;
//! includes only from the shaders folder (plus the generated `opcodes.glsl`).

use std::path::{Path, PathBuf};

use glslang::include::{IncludeHandler, IncludeResult, IncludeType};
use glslang::{
    Compiler, CompilerOptions, ShaderInput, ShaderMessage, ShaderSource, ShaderStage,
    SourceLanguage, SpirvVersion, Target, VulkanVersion,
};

/// The include the op-code table becomes; no file of this name may exist in the folder.
pub const OPCODES_INCLUDE: &str = "opcodes.glsl";

pub type Defines = Vec<(String, Option<String>)>;

/// One module a file compiles to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariantSpec {
    /// The `// @variant` suffix; `None` for a file without variant lines.
    pub suffix: Option<String>,
    /// The kernel's name: `<stem>_<suffix>`, or `<stem>`.
    pub name: String,
    pub defines: Defines,
}

/// `(stem, path)` of each `*.comp` in `dir`, sorted by stem.
pub fn list_shaders(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // No shaders yet is a valid (if useless) build.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut shaders = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if path.file_name().and_then(|n| n.to_str()) == Some(OPCODES_INCLUDE) {
            return Err(format!(
                "{}: this name is reserved for the include generated from opcodes.toml: \
                 rename the file",
                path.display()
            ));
        }
        if path.extension().and_then(|e| e.to_str()) != Some("comp") {
            continue;
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        // The stem names a Rust module and starts every kernel name: keep it plain.
        if !is_plain(stem) || stem.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "{}: shader file names must be lowercase letters, digits and '_', \
                 starting with a letter",
                path.display()
            ));
        }
        shaders.push((stem.to_string(), path));
    }
    shaders.sort();
    Ok(shaders)
}

fn is_plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The modules a file compiles to, from its `// @variant` lines.
pub fn variants(stem: &str, text: &str) -> Result<Vec<VariantSpec>, String> {
    let mut out: Vec<VariantSpec> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("// @variant") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let suffix = words
            .next()
            .ok_or_else(|| format!("line {}: '// @variant' needs a suffix", n + 1))?;
        if !is_plain(suffix) || suffix.starts_with('_') || suffix.ends_with('_') {
            return Err(format!(
                "line {}: variant suffix '{suffix}' must be lowercase letters, digits and '_' \
                 (not at either end)",
                n + 1
            ));
        }
        if out.iter().any(|v| v.suffix.as_deref() == Some(suffix)) {
            return Err(format!(
                "line {}: variant '{suffix}' is declared twice",
                n + 1
            ));
        }
        let defines = words
            .map(|w| match w.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (w.to_string(), None),
            })
            .collect();
        out.push(VariantSpec {
            suffix: Some(suffix.to_string()),
            name: format!("{stem}_{suffix}"),
            defines,
        });
    }
    if out.is_empty() {
        out.push(VariantSpec {
            suffix: None,
            name: stem.to_string(),
            defines: Vec::new(),
        });
    }
    Ok(out)
}

/// Compiles one variant of a file's text. `opcodes` is the generated include's text, if the
/// folder has an op-code table.
pub fn compile(
    compiler: &Compiler,
    dir: &Path,
    opcodes: Option<&str>,
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
    let mut includes = Includes { dir, opcodes };
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

/// Resolves `#include "name.glsl"` (with `GL_GOOGLE_include_directive`) against the folder.
struct Includes<'a> {
    dir: &'a Path,
    opcodes: Option<&'a str>,
}

impl IncludeHandler for Includes<'_> {
    fn include(
        &mut self,
        _ty: IncludeType,
        header_name: &str,
        _includer_name: &str,
        _include_depth: usize,
    ) -> Option<IncludeResult> {
        if header_name == OPCODES_INCLUDE {
            return self.opcodes.map(|text| IncludeResult {
                name: header_name.to_string(),
                data: text.to_string(),
            });
        }
        // Only plain file names: an include must not reach outside the shaders folder.
        if header_name.contains(['/', '\\']) || header_name.starts_with('.') {
            return None;
        }
        let data = std::fs::read_to_string(self.dir.join(header_name)).ok()?;
        Some(IncludeResult {
            name: header_name.to_string(),
            data,
        })
    }
}
