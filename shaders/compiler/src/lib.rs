//! Build-time support for VKML's kernels: compiles a folder of GLSL compute shaders to SPIR-V
//! with glslang, reads each kernel's push-constant block back from its SPIR-V, checks it
//! against the rules the Vulkan layer relies on, and writes Rust code with one typed module
//! per shader file. See docs/SHADERS.md for the shader conventions.
//!
//! A build script calls [`generate`]; tests and tools can call [`build`] for the compiled and
//! reflected kernels without the Rust.

#![deny(unsafe_code)]

mod compile;
mod emit;
pub mod layout;
mod names;
pub mod opcodes;
pub mod spirv;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use compile::{Defines, OPCODES_INCLUDE};
use compile::{VariantSpec, compile, list_shaders, variants};
use layout::Layout;
use opcodes::OpEnum;

/// Module names the generated code and vkml-shaders take for themselves.
const RESERVED: &[&str] = &["op", "bytemuck"];

/// The op-code table a shaders folder may have.
pub const OPCODES_TABLE: &str = "opcodes.toml";

/// One compiled variant.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The kernel name, `<stem>_<suffix>`.
    pub name: String,
    /// The `Variant` enum's name for it.
    pub variant: String,
    pub defines: Defines,
    /// Optional device features the SPIR-V declares, as `ShaderNeeds` bits.
    pub needs: u32,
    pub spirv: Vec<u32>,
}

/// The kernels of one `.comp` file, which share one push-constant layout.
#[derive(Clone, Debug)]
pub struct ShaderFile {
    pub stem: String,
    /// The Rust module name (the stem, raw where it is a keyword).
    pub ident: String,
    pub layout: Layout,
    pub kernels: Vec<Compiled>,
}

/// Everything a folder compiles to.
#[derive(Clone, Debug, Default)]
pub struct Shaders {
    pub files: Vec<ShaderFile>,
    pub opcodes: Vec<OpEnum>,
}

/// Compiles `shader_dir` and writes the Rust module to `out_rs`; `crate_path` is how the
/// generated code names the crate with `Kernel`, `KernelInfo`, `Shader` and the `bytemuck`
/// re-export (`::vkml_shaders`). Prints cargo's `rerun-if-changed` line for the folder. The
/// error lists every problem in every file, each saying what to do.
pub fn generate(shader_dir: &Path, out_rs: &Path, crate_path: &str) -> Result<(), String> {
    // A folder makes cargo rerun on any change inside it, new files included.
    println!("cargo:rerun-if-changed={}", shader_dir.display());
    let shaders = build(shader_dir)?;
    let code = emit::rust(&shaders.files, &shaders.opcodes, crate_path);
    std::fs::write(out_rs, code).map_err(|e| format!("cannot write {}: {e}", out_rs.display()))
}

/// Compiles, reflects and checks every kernel of `shader_dir`.
pub fn build(shader_dir: &Path) -> Result<Shaders, String> {
    let mut problems = Vec::new();
    let opcodes = read_opcodes(shader_dir).unwrap_or_else(|e| {
        problems.push(e);
        Vec::new()
    });
    let include = (!opcodes.is_empty()).then(|| opcodes::glsl(&opcodes));
    let list = list_shaders(shader_dir)?;

    // Every variant of every readable file, compiled together so all cores take part.
    let mut sources = Vec::new();
    for (stem, path) in list {
        let specs = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|text| variants(&stem, &text).map(|v| (text, v)));
        match specs {
            Ok((text, specs)) => sources.push((stem, path, text, specs)),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    let jobs: Vec<(usize, &VariantSpec)> = sources
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.3.iter().map(move |v| (i, v)))
        .collect();
    let mut results = compile_all(&jobs, |&(i, spec)| {
        compile_one(shader_dir, include.as_deref(), &sources[i].2, spec)
    })
    .into_iter();

    let mut files = Vec::new();
    for (stem, path, _, specs) in &sources {
        let outcomes: Vec<_> = results.by_ref().take(specs.len()).collect();
        match shader_file(stem, specs, outcomes) {
            Ok(f) => files.push(f),
            Err(errors) => {
                problems.extend(errors.into_iter().map(|e| format!("{}{e}", path.display())))
            }
        }
    }
    check_unique_names(&files, &mut problems);
    if !problems.is_empty() {
        return Err(format!(
            "{} problem(s) in the shaders of {}:\n\n{}",
            problems.len(),
            shader_dir.display(),
            problems.join("\n\n")
        ));
    }
    Ok(Shaders { files, opcodes })
}

/// The text the folder's op-code table gives `#include "opcodes.glsl"`, if it has a table: for
/// a build that compiles the folder with a glslang of its own.
pub fn opcodes_include(shader_dir: &Path) -> Result<Option<String>, String> {
    let enums = read_opcodes(shader_dir)?;
    Ok((!enums.is_empty()).then(|| opcodes::glsl(&enums)))
}

fn read_opcodes(dir: &Path) -> Result<Vec<OpEnum>, String> {
    let path = dir.join(OPCODES_TABLE);
    match std::fs::read_to_string(&path) {
        Ok(text) => opcodes::parse(&path.display().to_string(), &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// A variant's SPIR-V, `ShaderNeeds` bits and push-constant layout.
type Outcome = Result<(Vec<u32>, u32, Layout), Vec<String>>;

fn compile_one(dir: &Path, include: Option<&str>, text: &str, spec: &VariantSpec) -> Outcome {
    // glslang's compiler is a process-wide singleton that is safe to use from many threads.
    let compiler = glslang::Compiler::acquire().ok_or(vec!["glslang failed to start".into()])?;
    let words = compile(compiler, dir, include, text, &spec.defines).map_err(|e| vec![e])?;
    let reflection = spirv::reflect(&words).map_err(|e| vec![format!("SPIR-V: {e}")])?;
    let layout = layout::layout(reflection.push.as_ref())?;
    let needs = spirv::features_needed(&reflection.capabilities);
    Ok((words, needs, layout))
}

/// Runs `f` over `jobs` on every core, results in the jobs' order.
fn compile_all<J: Sync, R: Send>(jobs: &[J], f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(jobs.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break out };
                        out.push((i, f(job)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a shader compile thread panicked"))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Gathers one file's variants; errors start with what follows the file's path.
fn shader_file(
    stem: &str,
    specs: &[VariantSpec],
    outcomes: Vec<Outcome>,
) -> Result<ShaderFile, Vec<String>> {
    let mut errors = Vec::new();
    let ident = names::rust_ident(stem).map_err(|e| vec![format!(": {e}: rename the file")])?;
    if RESERVED.contains(&stem) {
        return Err(vec![format!(
            ": the module name `{stem}` is taken by the generated code: rename the file"
        )]);
    }
    let mut kernels = Vec::new();
    // Each distinct layout with the variants that have it.
    let mut layouts: Vec<(Layout, Vec<&str>)> = Vec::new();
    for (spec, outcome) in specs.iter().zip(outcomes) {
        let name = &spec.name;
        let (spirv, needs, layout) = match outcome {
            Ok(o) => o,
            Err(es) => {
                errors.extend(es.into_iter().map(|e| format!(" ({name}):\n{e}")));
                continue;
            }
        };
        match layouts.iter_mut().find(|(l, _)| l.same_as(&layout)) {
            Some((_, names)) => names.push(name),
            None => layouts.push((layout, vec![name])),
        }
        kernels.push(Compiled {
            name: name.clone(),
            variant: spec
                .suffix
                .as_deref()
                .map_or_else(|| "Main".to_string(), names::camel),
            defines: spec.defines.clone(),
            needs,
            spirv,
        });
    }
    if layouts.len() > 1 {
        let list: Vec<String> = layouts
            .iter()
            .map(|(l, names)| format!("  {}: {l}", names.join(", ")))
            .collect();
        errors.push(format!(
            ": the variants' push constants differ:\n{}\nAll variants of a file share one \
             Params and Buffers type: move the variants with another block to a file of their \
             own, sharing the body through an #include",
            list.join("\n")
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let layout = layouts
        .into_iter()
        .next()
        .map(|(l, _)| l)
        .unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for k in &kernels {
        if !seen.insert(&k.variant) {
            errors.push(format!(
                ": two variants are both `Variant::{}` in Rust: rename one suffix",
                k.variant
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ShaderFile {
        stem: stem.to_string(),
        ident,
        layout,
        kernels,
    })
}

fn check_unique_names(files: &[ShaderFile], problems: &mut Vec<String>) {
    let mut names: Vec<&str> = files
        .iter()
        .flat_map(|f| f.kernels.iter().map(|k| k.name.as_str()))
        .collect();
    names.sort_unstable();
    for pair in names.windows(2) {
        if pair[0] == pair[1] {
            problems.push(format!(
                "two kernels are both named '{}': rename a file or a variant",
                pair[0]
            ));
        }
    }
}
