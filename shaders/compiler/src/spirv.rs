//! Just enough of a SPIR-V reader to see a module's push-constant block and its capabilities.
//! Why not a crate: see Cargo.toml. Every opcode this reader does not need is skipped by its
//! word count, so no new extension can break the build.

use std::collections::HashMap;

const MAGIC: u32 = 0x0723_0203;

const OP_NAME: u32 = 5;
const OP_MEMBER_NAME: u32 = 6;
const OP_CAPABILITY: u32 = 17;
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_MATRIX: u32 = 24;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;

const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_OFFSET: u32 = 35;

const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_PHYSICAL_STORAGE_BUFFER: u32 = 5349;

/// A type as far as a push-constant block can use one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Bool,
    Int {
        width: u32,
        signed: bool,
    },
    /// `encoding` is SPIR-V's floating-point encoding operand (0 = bfloat16), absent for IEEE.
    Float {
        width: u32,
        encoding: Option<u32>,
    },
    Vector(Box<Type>, u32),
    Matrix(Box<Type>, u32),
    /// `len` is `None` when the length is not a plain constant (a specialisation constant).
    Array {
        elem: Box<Type>,
        len: Option<u32>,
        stride: Option<u32>,
    },
    RuntimeArray(Box<Type>),
    Struct(String),
    /// A `buffer_reference` member: a pointer into physical storage, named by its block.
    BufferRef(String),
    Pointer(u32),
    /// Anything else, by opcode.
    Other(u32),
}

impl Type {
    /// How GLSL would spell the type, for messages.
    pub fn glsl(&self) -> String {
        match self {
            Type::Bool => "bool".into(),
            Type::Int { width: 32, signed } => if *signed { "int" } else { "uint" }.into(),
            Type::Int { width, signed } => {
                format!("{}int{width}_t", if *signed { "" } else { "u" })
            }
            Type::Float {
                width,
                encoding: Some(_),
            } => format!("bfloat{width}_t"),
            Type::Float { width: 32, .. } => "float".into(),
            Type::Float { width: 64, .. } => "double".into(),
            Type::Float { width, .. } => format!("float{width}_t"),
            Type::Vector(e, n) => {
                let prefix = match e.glsl().as_str() {
                    "float" => String::new(),
                    "int" => "i".into(),
                    "uint" => "u".into(),
                    "double" => "d".into(),
                    "bool" => "b".into(),
                    other => format!("{other} "),
                };
                format!("{prefix}vec{n}")
            }
            Type::Matrix(c, n) => format!("{n} columns of {}", c.glsl()),
            Type::Array { elem, len, .. } => match len {
                Some(n) => format!("{}[{n}]", elem.glsl()),
                None => format!("{}[specialisation constant]", elem.glsl()),
            },
            Type::RuntimeArray(e) => format!("{}[]", e.glsl()),
            Type::Struct(name) => format!("struct {name}"),
            Type::BufferRef(name) => format!("buffer reference {name}"),
            Type::Pointer(class) => format!("pointer (storage class {class})"),
            Type::Other(op) => format!("a type of opcode {op}"),
        }
    }
}

/// One member of the push-constant block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub offset: u32,
    pub ty: Type,
}

/// The push-constant block of a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushBlock {
    /// The block's type name (`P` in `uniform P { ... } p;`).
    pub name: String,
    pub members: Vec<Member>,
}

/// What the build needs to know about one module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reflection {
    pub capabilities: Vec<u32>,
    /// `None` for a kernel without push constants.
    pub push: Option<PushBlock>,
}

/// A type declaration as it appears in the module, before its operands are resolved.
enum Decl {
    Bool,
    Int(u32, bool),
    Float(u32, Option<u32>),
    Vector(u32, u32),
    Matrix(u32, u32),
    Array(u32, u32),
    RuntimeArray(u32),
    Struct(Vec<u32>),
    Pointer(u32, u32),
}

#[derive(Default)]
struct Module {
    capabilities: Vec<u32>,
    names: HashMap<u32, String>,
    member_names: HashMap<(u32, u32), String>,
    offsets: HashMap<(u32, u32), u32>,
    strides: HashMap<u32, u32>,
    types: HashMap<u32, Decl>,
    /// Scalar constants' low words (all an array length needs).
    constants: HashMap<u32, u32>,
    /// Pointer type ids of the PushConstant variables.
    push_vars: Vec<u32>,
}

/// Reads a module's capabilities and push-constant block.
pub fn reflect(words: &[u32]) -> Result<Reflection, String> {
    let m = parse(words)?;
    let push = match m.push_vars.as_slice() {
        [] => None,
        [ptr] => Some(m.push_block(*ptr)?),
        _ => return Err("the module has more than one push-constant variable".into()),
    };
    Ok(Reflection {
        capabilities: m.capabilities,
        push,
    })
}

fn parse(words: &[u32]) -> Result<Module, String> {
    if words.len() < 5 || words[0] != MAGIC {
        return Err("not a SPIR-V module (bad magic number or too short)".into());
    }
    let mut m = Module::default();
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            return Err(format!("malformed instruction at word {i}"));
        }
        m.record(op, &words[i + 1..i + count])?;
        i += count;
    }
    Ok(m)
}

impl Module {
    fn record(&mut self, op: u32, a: &[u32]) -> Result<(), String> {
        let need = |n: usize| {
            if a.len() < n {
                Err(format!(
                    "opcode {op} has {} operands, expected {n}",
                    a.len()
                ))
            } else {
                Ok(())
            }
        };
        match op {
            OP_CAPABILITY => {
                need(1)?;
                self.capabilities.push(a[0]);
            }
            OP_NAME => {
                need(2)?;
                self.names.insert(a[0], string(&a[1..])?);
            }
            OP_MEMBER_NAME => {
                need(3)?;
                self.member_names.insert((a[0], a[1]), string(&a[2..])?);
            }
            OP_DECORATE if a.len() >= 3 && a[1] == DECORATION_ARRAY_STRIDE => {
                self.strides.insert(a[0], a[2]);
            }
            OP_MEMBER_DECORATE if a.len() >= 4 && a[2] == DECORATION_OFFSET => {
                self.offsets.insert((a[0], a[1]), a[3]);
            }
            OP_TYPE_BOOL => self.declare(a, 1, |_| Decl::Bool)?,
            OP_TYPE_INT => self.declare(a, 3, |a| Decl::Int(a[1], a[2] != 0))?,
            OP_TYPE_FLOAT => self.declare(a, 2, |a| Decl::Float(a[1], a.get(2).copied()))?,
            OP_TYPE_VECTOR => self.declare(a, 3, |a| Decl::Vector(a[1], a[2]))?,
            OP_TYPE_MATRIX => self.declare(a, 3, |a| Decl::Matrix(a[1], a[2]))?,
            OP_TYPE_ARRAY => self.declare(a, 3, |a| Decl::Array(a[1], a[2]))?,
            OP_TYPE_RUNTIME_ARRAY => self.declare(a, 2, |a| Decl::RuntimeArray(a[1]))?,
            OP_TYPE_STRUCT => self.declare(a, 1, |a| Decl::Struct(a[1..].to_vec()))?,
            OP_TYPE_POINTER => self.declare(a, 3, |a| Decl::Pointer(a[1], a[2]))?,
            OP_CONSTANT => {
                need(3)?;
                self.constants.insert(a[1], a[2]);
            }
            OP_VARIABLE => {
                need(3)?;
                if a[2] == STORAGE_PUSH_CONSTANT {
                    self.push_vars.push(a[0]);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn declare(&mut self, a: &[u32], n: usize, f: impl Fn(&[u32]) -> Decl) -> Result<(), String> {
        if a.len() < n {
            return Err(format!(
                "a type declaration has {} operands, expected {n}",
                a.len()
            ));
        }
        self.types.insert(a[0], f(a));
        Ok(())
    }

    fn name(&self, id: u32) -> String {
        self.names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("%{id}"))
    }

    fn push_block(&self, ptr: u32) -> Result<PushBlock, String> {
        let Some(Decl::Pointer(_, block)) = self.types.get(&ptr) else {
            return Err("the push-constant variable's type is not a pointer".into());
        };
        let Some(Decl::Struct(members)) = self.types.get(block) else {
            return Err("the push-constant variable is not a block".into());
        };
        let mut out = Vec::with_capacity(members.len());
        for (k, &ty) in members.iter().enumerate() {
            let k = k as u32;
            let name = self
                .member_names
                .get(&(*block, k))
                .cloned()
                .ok_or_else(|| format!("push-constant member {k} has no name"))?;
            let offset = *self
                .offsets
                .get(&(*block, k))
                .ok_or_else(|| format!("push-constant member `{name}` has no offset"))?;
            out.push(Member {
                name,
                offset,
                ty: self.resolve(ty, 0)?,
            });
        }
        Ok(PushBlock {
            name: self.name(*block),
            members: out,
        })
    }

    /// The type `id` declares; a buffer reference stops the descent, as its block (unlike the
    /// push-constant block's own types) is not part of the layout.
    fn resolve(&self, id: u32, depth: u32) -> Result<Type, String> {
        if depth > 16 {
            return Err("push-constant types nest too deep".into());
        }
        let inner = |id| self.resolve(id, depth + 1).map(Box::new);
        let decl = self
            .types
            .get(&id)
            .ok_or_else(|| format!("type %{id} is used but not declared"))?;
        Ok(match decl {
            Decl::Bool => Type::Bool,
            Decl::Int(width, signed) => Type::Int {
                width: *width,
                signed: *signed,
            },
            Decl::Float(width, encoding) => Type::Float {
                width: *width,
                encoding: *encoding,
            },
            Decl::Vector(e, n) => Type::Vector(inner(*e)?, *n),
            Decl::Matrix(c, n) => Type::Matrix(inner(*c)?, *n),
            Decl::Array(e, len) => Type::Array {
                elem: inner(*e)?,
                len: self.constants.get(len).copied(),
                stride: self.strides.get(&id).copied(),
            },
            Decl::RuntimeArray(e) => Type::RuntimeArray(inner(*e)?),
            Decl::Struct(_) => Type::Struct(self.name(id)),
            Decl::Pointer(STORAGE_PHYSICAL_STORAGE_BUFFER, pointee) => {
                Type::BufferRef(self.name(*pointee))
            }
            Decl::Pointer(class, _) => Type::Pointer(*class),
        })
    }
}

/// A SPIR-V literal string: UTF-8, NUL-terminated, packed little-endian into words.
fn string(words: &[u32]) -> Result<String, String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .ok_or("a literal string has no terminating NUL")?;
    String::from_utf8(bytes[..end].to_vec()).map_err(|_| "a literal string is not UTF-8".into())
}

/// Optional device features a module's capabilities declare, as `ShaderNeeds` bits (the
/// numbering is this crate's; vkml-shaders names the bits).
pub fn features_needed(capabilities: &[u32]) -> u32 {
    capabilities
        .iter()
        .map(|c| match c {
            9 => 1,                       // Float16
            10 => 1 << 1,                 // Float64
            22 => 1 << 2,                 // Int16
            39 => 1 << 3,                 // Int8
            4433..=4435 => 1 << 4,        // 16-bit storage
            4448..=4450 => 1 << 5,        // 8-bit storage
            6022 | 5357 => 1 << 6,        // cooperative matrix (KHR, NV)
            5430..=5434 | 5439 => 1 << 7, // cooperative matrix 2 (NV)
            5116..=5118 => 1 << 8,        // bfloat16 (KHR)
            6016..=6019 => 1 << 9,        // integer dot product
            _ => 0,
        })
        .fold(0, |a, b| a | b)
}
