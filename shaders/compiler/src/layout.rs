//! A kernel's push constants as the recorder lays them out: one 8-byte device address per
//! buffer, then the parameters, packed as a Rust `#[repr(C)]` struct would pack them. Every
//! rule here exists so that the generated `Params` and `Buffers` types can be the whole
//! description of a dispatch.

use std::fmt;

use crate::names::rust_ident;
use crate::spirv::{PushBlock, Type};

/// Vulkan's minimum `maxPushConstantsSize`, and lavapipe's actual one.
pub const MAX_PUSH_BYTES: u32 = 128;

/// A parameter's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U32,
    I32,
    F32,
    U64,
    I64,
    F64,
}

impl Scalar {
    pub fn size(self) -> u32 {
        match self {
            Scalar::U32 | Scalar::I32 | Scalar::F32 => 4,
            Scalar::U64 | Scalar::I64 | Scalar::F64 => 8,
        }
    }

    pub fn rust(self) -> &'static str {
        match self {
            Scalar::U32 => "u32",
            Scalar::I32 => "i32",
            Scalar::F32 => "f32",
            Scalar::U64 => "u64",
            Scalar::I64 => "i64",
            Scalar::F64 => "f64",
        }
    }

    fn of(ty: &Type) -> Option<Scalar> {
        Some(match ty {
            Type::Int { width: 32, signed } => [Scalar::U32, Scalar::I32][*signed as usize],
            Type::Int { width: 64, signed } => [Scalar::U64, Scalar::I64][*signed as usize],
            Type::Float {
                width: 32,
                encoding: None,
            } => Scalar::F32,
            Type::Float {
                width: 64,
                encoding: None,
            } => Scalar::F64,
            _ => return None,
        })
    }
}

/// One parameter (a non-buffer member of the block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// The GLSL name.
    pub name: String,
    /// The Rust field name (a raw identifier where the GLSL name is a keyword).
    pub ident: String,
    pub scalar: Scalar,
    /// `Some(n)` for an array `name[n]` or an n-vector, both `[T; n]` in Rust.
    pub len: Option<u32>,
    /// The GLSL declaration (`uint dims[6]`), for documentation.
    pub glsl: String,
    /// Byte offset in the block (SPIR-V's, which the Rust layout is checked against).
    pub offset: u32,
}

impl Param {
    pub fn size(&self) -> u32 {
        self.scalar.size() * self.len.unwrap_or(1)
    }

    pub fn rust_type(&self) -> String {
        match self.len {
            Some(n) => format!("[{}; {n}]", self.scalar.rust()),
            None => self.scalar.rust().to_string(),
        }
    }
}

/// A buffer-reference member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub name: String,
    pub ident: String,
    /// The buffer block's type name (`In`, `Out`), for documentation; variants may differ in
    /// what the block holds, which is not part of the layout.
    pub block: String,
}

/// The push-constant layout of a kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub buffers: Vec<Buffer>,
    pub params: Vec<Param>,
    /// Bytes the block spans: `8 * buffers` plus the parameters.
    pub size: u32,
}

impl Layout {
    /// True when `other` describes the same push constants (buffer block names aside).
    pub fn same_as(&self, other: &Layout) -> bool {
        let names = |l: &Layout| l.buffers.iter().map(|b| b.name.clone()).collect::<Vec<_>>();
        names(self) == names(other) && self.params == other.params && self.size == other.size
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.buffers.iter().map(|b| b.name.clone()).collect();
        for p in &self.params {
            parts.push(format!("{} @{}", p.glsl, p.offset));
        }
        write!(f, "{{ {} }} ({} bytes)", parts.join(", "), self.size)
    }
}

/// The layout of a reflected block, or every rule it breaks (each message says what to do).
pub fn layout(block: Option<&PushBlock>) -> Result<Layout, Vec<String>> {
    let Some(block) = block else {
        return Ok(Layout::default());
    };
    let mut errors = Vec::new();
    let mut out = Layout::default();
    let mut first_param: Option<&str> = None;
    let mut end = 0;
    for m in &block.members {
        let ident = match rust_ident(&m.name) {
            Ok(ident) => ident,
            Err(e) => {
                errors.push(format!("push constant `{}`: {e}: rename it", m.name));
                continue;
            }
        };
        if let Type::BufferRef(block) = &m.ty {
            let want = 8 * out.buffers.len() as u32;
            if let Some(param) = first_param {
                errors.push(format!(
                    "buffer reference `{}` comes after the parameter `{param}`: declare every \
                     buffer reference first (the recorder pushes 8-byte addresses, then \
                     parameters)",
                    m.name
                ));
            } else if m.offset != want {
                errors.push(format!(
                    "buffer reference `{}` is at byte {}, not {want}: declare the block \
                     `layout(push_constant, scalar)`",
                    m.name, m.offset
                ));
            }
            out.buffers.push(Buffer {
                name: m.name.clone(),
                ident,
                block: block.clone(),
            });
            end = end.max(m.offset + 8);
            continue;
        }
        first_param.get_or_insert(&m.name);
        match param(&m.name, ident, &m.ty, m.offset) {
            Ok(p) => {
                end = end.max(p.offset + p.size());
                out.params.push(p);
            }
            Err(e) => errors.push(e),
        }
    }
    out.size = end;
    if end > MAX_PUSH_BYTES {
        errors.push(format!(
            "the push constants take {end} bytes, over the {MAX_PUSH_BYTES} every Vulkan device \
             (lavapipe included) accepts: move parameters into a table buffer, or split the \
             kernel"
        ));
    }
    if errors.is_empty() {
        check_rust_layout(&out)?;
        Ok(out)
    } else {
        Err(errors)
    }
}

fn param(name: &str, ident: String, ty: &Type, offset: u32) -> Result<Param, String> {
    let bad = || {
        format!(
            "push constant `{name}` is {}: parameters must be uint, int, float (or their 64-bit \
             forms), vectors or fixed-size arrays of them; pass anything else through a buffer",
            ty.glsl()
        )
    };
    let (scalar, len) = match ty {
        Type::Array {
            elem,
            len: Some(len),
            stride,
        } => {
            let scalar = Scalar::of(elem).ok_or_else(bad)?;
            if *stride != Some(scalar.size()) {
                return Err(format!(
                    "push constant `{name}` has an array stride of {stride:?} bytes, not {}: \
                     declare the block `layout(push_constant, scalar)`",
                    scalar.size()
                ));
            }
            (scalar, Some(*len))
        }
        // Scalar layout packs a vector's components like an array's elements.
        Type::Vector(elem, n) => (Scalar::of(elem).ok_or_else(bad)?, Some(*n)),
        ty => (Scalar::of(ty).ok_or_else(bad)?, None),
    };
    Ok(Param {
        name: name.to_string(),
        ident,
        scalar,
        len,
        glsl: match ty {
            Type::Array { elem, .. } => format!("{} {name}[{}]", elem.glsl(), len.unwrap_or(0)),
            ty => format!("{} {name}", ty.glsl()),
        },
        offset,
    })
}

/// Checks that `#[repr(C)]` places every parameter where SPIR-V does, after `8 * buffers`
/// bytes, with no padding (which `bytemuck::Pod` forbids) and no bytes past the block's end.
fn check_rust_layout(l: &Layout) -> Result<(), Vec<String>> {
    let base = 8 * l.buffers.len() as u32;
    let mut at = base;
    let mut align = 1;
    let mut errors = Vec::new();
    for p in &l.params {
        let a = p.scalar.size();
        align = align.max(a);
        let rust = at.next_multiple_of(a);
        if rust != p.offset {
            errors.push(format!(
                "push constant `{}` is at byte {} in SPIR-V but would be at {rust} in Rust's \
                 layout: declare the block `layout(push_constant, scalar)`, and put 64-bit \
                 parameters at 8-byte offsets (first, or after an even number of 32-bit words)",
                p.name, p.offset
            ));
        }
        at = p.offset + p.size();
    }
    let rust_end = base + (at - base).next_multiple_of(align);
    if errors.is_empty() && rust_end != l.size {
        errors.push(format!(
            "the parameters end at byte {} but Rust's layout would pad them to {rust_end}: \
             end them with an even number of 32-bit words after the last 64-bit one",
            l.size
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
