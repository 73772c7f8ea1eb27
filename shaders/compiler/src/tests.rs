//! Reflection, checks and generation on tiny shaders compiled here.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::layout::Scalar;
use crate::spirv::{self, Type};
use crate::{build, generate};

const HEAD: &str = "#version 460\n\
    #extension GL_EXT_buffer_reference : require\n\
    #extension GL_EXT_scalar_block_layout : require\n\
    #extension GL_EXT_shader_explicit_arithmetic_types : require\n\
    #extension GL_GOOGLE_include_directive : require\n\
    layout(local_size_x = 64) in;\n\
    layout(buffer_reference, scalar) buffer Buf { float v[]; };\n";

const MAIN: &str = "void main() { p.y.v[0] = float(p.n); }\n";

/// A fresh folder holding `files`; removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(files: &[(&str, &str)]) -> Folder {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("vkml-shaderc-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        Folder(dir)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn shader(block: &str) -> String {
    format!("{HEAD}layout(push_constant, scalar) uniform P {{ {block} }} p;\n{MAIN}")
}

fn build_one(block: &str) -> Result<crate::Shaders, String> {
    let dir = Folder::new(&[("k.comp", &shader(block))]);
    build(&dir.0)
}

#[test]
fn reflects_buffers_scalars_and_arrays() {
    let src = shader(
        "Buf x; Buf y; uint n; int d; float alpha; uint dims[3]; uint64_t big; double w; \
         vec3 v; float z;",
    );
    let dir = Folder::new(&[("k.comp", &src)]);
    let f = &build(&dir.0).unwrap().files[0];
    let words = &f.kernels[0].spirv;
    let block = spirv::reflect(words).unwrap().push.unwrap();
    assert_eq!(block.name, "P");
    let members: Vec<_> = block
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.offset))
        .collect();
    let want = [
        ("x", 0),
        ("y", 8),
        ("n", 16),
        ("d", 20),
        ("alpha", 24),
        ("dims", 28),
        ("big", 40),
        ("w", 48),
        ("v", 56),
        ("z", 68),
    ];
    assert_eq!(members, want);
    assert_eq!(block.members[0].ty, Type::BufferRef("Buf".into()));
    assert_eq!(
        block.members[5].ty,
        Type::Array {
            elem: Box::new(Type::Int {
                width: 32,
                signed: false
            }),
            len: Some(3),
            stride: Some(4),
        }
    );
    let l = &f.layout;
    assert_eq!(l.size, 72);
    let buffers: Vec<_> = l.buffers.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(buffers, ["x", "y"]);
    let params: Vec<_> = l.params.iter().map(|p| (p.scalar, p.len)).collect();
    use Scalar::*;
    let want = [
        (U32, None),
        (I32, None),
        (F32, None),
        (U32, Some(3)),
        (U64, None),
        (F64, None),
        (F32, Some(3)),
        (F32, None),
    ];
    assert_eq!(params, want);
    // Float64 and Int64 are not features the planner tracks apart from Float64.
    assert_eq!(f.kernels[0].needs, 1 << 1);
}

#[test]
fn reads_bfloat16_modules() {
    let src = format!(
        "{HEAD}#extension GL_EXT_bfloat16 : require\n\
         layout(buffer_reference, scalar) buffer BF {{ bfloat16_t v[]; }};\n\
         layout(push_constant, scalar) uniform P {{ BF a; Buf y; uint n; }} p;\n\
         void main() {{ p.y.v[0] = float(p.a.v[p.n]); }}\n"
    );
    let dir = Folder::new(&[("k.comp", &src)]);
    let f = &build(&dir.0).unwrap().files[0];
    assert_ne!(f.kernels[0].needs & (1 << 8), 0, "bfloat16 needs");
    assert_eq!(f.layout.buffers[0].block, "BF");
    assert_eq!(f.layout.size, 20);
}

#[test]
fn a_kernel_without_push_constants_has_an_empty_layout() {
    let src = format!("{HEAD}shared float s[4];\nvoid main() {{ s[0] = 1.0; }}\n");
    let dir = Folder::new(&[("k.comp", &src)]);
    let f = &build(&dir.0).unwrap().files[0];
    assert!(f.layout.buffers.is_empty() && f.layout.params.is_empty());
    assert_eq!(f.layout.size, 0);
}

#[test]
fn refuses_blocks_over_128_bytes() {
    let e = build_one("Buf y; uint n; uint w[30];").unwrap_err();
    assert!(e.contains("k.comp (k):") && e.contains("132 bytes"), "{e}");
    assert!(build_one("Buf y; uint n; uint w[28];").is_ok());
}

#[test]
fn refuses_a_buffer_after_a_parameter() {
    let e = build_one("uint n; Buf y;").unwrap_err();
    assert!(
        e.contains("buffer reference `y` comes after the parameter `n`"),
        "{e}"
    );
}

#[test]
fn refuses_other_parameter_types() {
    for (block, what) in [
        ("Buf y; uint n; uint16_t h;", "uint16_t"),
        ("Buf y; uint n; mat2 m;", "2 columns of vec2"),
        ("Buf y; uint n; i16vec2 v;", "int16_t vec2"),
        ("Buf y; uint n; float16_t h;", "float16_t"),
    ] {
        let e = build_one(block).unwrap_err();
        assert!(e.contains(&format!("is {what}: parameters must be")), "{e}");
    }
}

#[test]
fn refuses_64_bit_parameters_rust_would_pad() {
    // Scalar layout aligns a 64-bit scalar to 8 bytes, as repr(C) does.
    let s = build_one("Buf y; uint n; uint64_t big; uint m; uint k;").unwrap();
    let offsets: Vec<_> = s.files[0].layout.params.iter().map(|p| p.offset).collect();
    assert_eq!(offsets, [8, 16, 24, 28]);
    // But it does not round the block's end up, which repr(C) would.
    let e = build_one("Buf y; uint64_t big; uint n;").unwrap_err();
    assert!(e.contains("pad them to 24"), "{e}");
}

#[test]
fn refuses_non_scalar_layouts() {
    let src = format!(
        "{HEAD}layout(push_constant, std430) uniform P {{ Buf y; uint n; uint w[2]; }} p;\n{MAIN}"
    );
    // std430 gives the same offsets here; the array stride is what scalar layout guarantees.
    let dir = Folder::new(&[("k.comp", &src)]);
    assert!(build(&dir.0).is_ok());
    let src = src.replace("std430", "std140");
    let dir = Folder::new(&[("k.comp", &src)]);
    let e = build(&dir.0).unwrap_err();
    assert!(e.contains("array stride of Some(16) bytes"), "{e}");
}

#[test]
fn variants_must_share_one_layout() {
    let src = format!(
        "{HEAD}// @variant one\n// @variant two TWO\n\
         layout(push_constant, scalar) uniform P {{ Buf y;\n#ifdef TWO\nBuf z;\n#endif\n\
         uint n; }} p;\n{MAIN}"
    );
    let dir = Folder::new(&[("k.comp", &src)]);
    let e = build(&dir.0).unwrap_err();
    assert!(e.contains("the variants' push constants differ"), "{e}");
    assert!(e.contains("k_one: { y, uint n @8 } (12 bytes)"), "{e}");
    assert!(e.contains("k_two: { y, z, uint n @16 } (20 bytes)"), "{e}");
}

#[test]
fn every_failure_is_listed() {
    let good = shader("Buf y; uint n;");
    let dir = Folder::new(&[
        ("a.comp", "#version 460\nvoid main() { nonsense; }\n"),
        ("b.comp", &good),
        ("c.comp", &shader("uint n; Buf y;")),
        (
            "d.comp",
            &format!("{HEAD}// @variant x\n// @variant x\n{MAIN}"),
        ),
    ]);
    let e = build(&dir.0).unwrap_err();
    assert!(e.starts_with("3 problem(s)"), "{e}");
    assert!(e.contains("a.comp (a):") && e.contains("nonsense"), "{e}");
    assert!(e.contains("c.comp (c):"), "{e}");
    assert!(
        e.contains("d.comp: line 9: variant 'x' is declared twice"),
        "{e}"
    );
}

#[test]
fn includes_come_from_the_folder_and_the_opcode_table() {
    let table = "[Op]\ndoc = \"ops\"\nprefix = \"OP\"\n[Op.codes]\nAdd = 0\nMul = 3\n";
    let src = format!(
        "{HEAD}#include \"opcodes.glsl\"\n#include \"body.glsl\"\n\
         layout(push_constant, scalar) uniform P {{ Buf y; uint n; uint op; }} p;\n\
         void main() {{ switch (p.op) {{ case OP_MUL: p.y.v[0] = twice(p.n); break; \
         default: break; }} }}\n"
    );
    let dir = Folder::new(&[
        ("k.comp", &src),
        (
            "body.glsl",
            "float twice(uint n) { return float(2u * n); }\n",
        ),
        ("opcodes.toml", table),
    ]);
    let s = build(&dir.0).unwrap();
    assert_eq!(s.opcodes[0].codes[1].glsl, "OP_MUL");

    let outside = src.replace("body.glsl", "../body.glsl");
    let dir = Folder::new(&[("k.comp", &outside), ("opcodes.toml", table)]);
    assert!(build(&dir.0).is_err());
    let dir = Folder::new(&[("k.comp", &src), ("body.glsl", ""), ("opcodes.glsl", "")]);
    let e = build(&dir.0).unwrap_err();
    assert!(e.contains("reserved for the include generated"), "{e}");
}

#[test]
fn the_vulkan_1_3_marker_selects_spirv_1_6() {
    let plain = shader("Buf y; uint n;");
    let dir = Folder::new(&[
        ("a.comp", &plain),
        ("b.comp", &format!("// @vulkan1.3\n{plain}")),
    ]);
    let s = build(&dir.0).unwrap();
    assert_eq!(s.files[0].kernels[0].spirv[1], 0x0001_0500);
    assert_eq!(s.files[1].kernels[0].spirv[1], 0x0001_0600);
}

#[test]
fn generates_typed_modules() {
    let binary = format!(
        "{HEAD}// @variant f32 DT_F32\n// @variant cmp_f32 DT_F32 CMP\n\
         layout(push_constant, scalar) uniform P {{ Buf a; Buf y; uint n; float alpha; \
         uint dims[2]; }} p;\n{MAIN}"
    );
    let keyword = shader("Buf y; uint n; uint type;");
    let bare = format!("{HEAD}// @variant f32_1\n// @variant f32_2\nvoid main() {{}}\n");
    let dir = Folder::new(&[
        ("binary.comp", &binary),
        ("where.comp", &keyword),
        ("bare.comp", &bare),
    ]);
    let out = dir.0.join("out.rs");
    generate(&dir.0, &out, "::kit").unwrap();
    let code = std::fs::read_to_string(&out).unwrap();
    for want in [
        "pub mod binary {",
        "pub mod r#where {",
        "        F32,\n        /// `binary_cmp_f32`: `DT_F32 CMP`\n        CmpF32,\n",
        "        Main,\n",
        "pub struct Params {\n        /// `uint n`, push-constant byte 16.\n        pub n: u32,\n",
        "        pub alpha: f32,\n",
        "        pub dims: [u32; 2],\n",
        "        pub r#type: u32,\n",
        "pub struct Buffers<B> {\n        /// `Buf a`.\n        pub a: B,\n",
        "const BUFFERS: usize = 2;",
        "vec![b.a, b.y]",
        "assert!(16 + ::core::mem::offset_of!(Params, alpha) == 20);",
        "assert!(16 + ::core::mem::size_of::<Params>() == 32);",
        "#[derive(Clone, Copy, Debug, Default, PartialEq, ::kit::bytemuck::Pod,",
        "#[bytemuck(crate = \"::kit::bytemuck\")]",
        "    ::kit::Kernel::new(&binary::KERNELS[1]),\n    ::kit::Kernel::new(&binary::KERNELS[0]),",
        "name: \"where\",",
        "pub fn find(name: &str) -> Option<::kit::Kernel>",
        "    #[allow(non_camel_case_types)]\n    pub enum Variant {\n        /// `bare_f32_1`\n        \
         F32_1,",
        "pub struct Params {\n    }",
        "pub type Buffers<B> = [B; 0];",
        "assert!(0 + ::core::mem::size_of::<Params>() == 0);",
        "Vec::from(b)",
    ] {
        assert!(code.contains(want), "missing {want:?} in:\n{code}");
    }
}

#[test]
fn module_names_of_the_generated_code_are_refused() {
    let dir = Folder::new(&[("op.comp", &shader("Buf y; uint n;"))]);
    let e = build(&dir.0).unwrap_err();
    assert!(e.contains("op.comp: the module name `op` is taken"), "{e}");
}

#[test]
fn the_opcode_include_is_there_for_other_builds() {
    let table = "[Op]\ndoc = \"ops\"\nprefix = \"OP\"\n[Op.codes]\nAdd = 0\n";
    let dir = Folder::new(&[("opcodes.toml", table)]);
    let text = crate::opcodes_include(&dir.0).unwrap().unwrap();
    assert!(text.contains("#define OP_ADD 0u\n"), "{text}");
    let empty = Folder::new(&[]);
    assert_eq!(crate::opcodes_include(&empty.0), Ok(None));
}
