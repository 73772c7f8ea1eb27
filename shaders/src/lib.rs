//! VKML's compute kernels: the SPIR-V of every `shaders/*.comp`, compiled at build time by
//! vkml-shaderc, with a typed interface generated from each kernel's push-constant block.
//!
//! Each shader file is a module (`binary`, `gemm_splitk`, `r#where`) holding:
//! - `Variant`: one value per `// @variant` line (`Main` for a file without them), whose
//!   `kernel()` is the [`Kernel`];
//! - `Params`: the push constants after the buffer addresses, under the shader's names, a
//!   `#[repr(C)]` [`bytemuck::Pod`] struct checked at compile time against the SPIR-V offsets;
//! - `Buffers<B>`: one `B` per buffer reference, under the shader's names, in push order;
//! - the [`Shader`] impl that ties them together.
//!
//! [`op`] holds the op codes of `shaders/opcodes.toml`, the same values the shaders' `case`
//! labels see. [`all`] and [`find`] list every kernel of the build.
//!
//! A dispatch takes its kernel, buffers and parameters from one module, so mixing two does not
//! compile:
//! ```
//! use vkml_shaders::{Shader, binary, op};
//!
//! fn dispatch<S: Shader>(kernel: S, buffers: S::Buffers<usize>, params: S::Params) -> Vec<u32> {
//!     assert_eq!(S::buffer_list(buffers), [0, 1, 2]);
//!     assert_eq!(kernel.kernel().push_bytes(), 8 * S::BUFFERS as u32 + 4 * 22);
//!     S::param_words(&params)
//! }
//! let words = dispatch(
//!     binary::Variant::F32,
//!     binary::Buffers { a: 0, b: 1, y: 2 },
//!     binary::Params { mode: 0, n: 1000, op: op::Binary::Add.code(), ..Default::default() },
//! );
//! assert_eq!(words[1], 1000);
//! ```
//! ```compile_fail
//! # use vkml_shaders::{Shader, binary, unary};
//! # fn dispatch<S: Shader>(kernel: S, buffers: S::Buffers<usize>, params: S::Params) {}
//! // unary's buffers are x and y.
//! dispatch(binary::Variant::F32, unary::Buffers { x: 0, y: 1 }, binary::Params::default());
//! ```
//! ```compile_fail
//! # use vkml_shaders::binary;
//! // A parameter binary.comp does not have.
//! let p = binary::Params { count: 3, ..Default::default() };
//! ```

#![deny(unsafe_code)]

// The generated code names this crate by its path, as it would from any other crate.
extern crate self as vkml_shaders;

// The crate root holds one module per shader file: it imports nothing, so no name here can
// collide with a shader's.

pub use bytemuck;

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// What the build knows of one compiled kernel.
#[derive(Debug)]
pub struct KernelInfo {
    /// `<file stem>_<variant suffix>`, or the stem for a file without variants.
    pub name: &'static str,
    pub spirv: &'static [u32],
    /// Optional device features the SPIR-V declares, as [`ShaderNeeds`] bits.
    pub needs: u32,
    /// Bytes of push constants: `8 * buffers` of addresses, then the parameters.
    pub push_bytes: u32,
    pub buffers: u32,
}

/// A kernel of the build: a cheap handle, compared, hashed and ordered by name.
#[derive(Clone, Copy)]
pub struct Kernel(&'static KernelInfo);

impl Kernel {
    /// For generated code; users get kernels from a module's `Variant` or from [`find`].
    pub const fn new(info: &'static KernelInfo) -> Kernel {
        Kernel(info)
    }

    pub const fn info(self) -> &'static KernelInfo {
        self.0
    }

    pub const fn name(self) -> &'static str {
        self.0.name
    }

    pub const fn spirv(self) -> &'static [u32] {
        self.0.spirv
    }

    pub const fn needs(self) -> ShaderNeeds {
        ShaderNeeds(self.0.needs)
    }

    pub const fn push_bytes(self) -> u32 {
        self.0.push_bytes
    }

    pub const fn buffers(self) -> u32 {
        self.0.buffers
    }
}

impl PartialEq for Kernel {
    fn eq(&self, other: &Kernel) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Kernel {}

impl std::hash::Hash for Kernel {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl PartialOrd for Kernel {
    fn partial_cmp(&self, other: &Kernel) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kernel {
    fn cmp(&self, other: &Kernel) -> std::cmp::Ordering {
        self.0.name.cmp(other.0.name)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kernel").field(&self.0.name).finish()
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

/// A shader file's variants: the types a dispatch of one of its kernels is built from.
pub trait Shader: Copy {
    /// The push constants after the buffer addresses.
    type Params: bytemuck::Pod;
    /// One `B` per buffer the kernel reaches, named as in the shader.
    type Buffers<B>;
    const BUFFERS: usize;
    /// The buffers' names, in push order (for messages).
    const BUFFER_NAMES: &'static [&'static str];

    fn kernel(self) -> Kernel;

    /// The buffers in push order: address `i` goes to push-constant bytes `8 * i ..`.
    fn buffer_list<B>(buffers: Self::Buffers<B>) -> Vec<B>;

    /// The parameters as the 32-bit words that follow the addresses (64-bit parameters take
    /// two, in memory order).
    fn param_words(params: &Self::Params) -> Vec<u32> {
        bytemuck::bytes_of(params)
            .chunks_exact(4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    }
}

/// Bytes of one op's fault record (`Fault` in `shaders/index.glsl`): the buffer a gather or
/// scatter kernel reports an index out of range in. It must read as zeros before the run.
pub const FAULT_RECORD_BYTES: u64 = 32;

/// An index out of range that a kernel met during a run, read from its fault record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexFault {
    /// Which element of the index tensor held it.
    pub element: u64,
    /// The index, as the index tensor holds it.
    pub index: i64,
    /// The size of the axis it indexes.
    pub dim: u64,
}

impl IndexFault {
    /// The fault a record's bytes hold, or `None` when the kernel met none.
    pub fn from_record(bytes: &[u8]) -> Option<IndexFault> {
        let word = |i: usize| {
            bytes
                .get(4 * i..4 * i + 4)
                .map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        };
        (word(0) != 0).then(|| IndexFault {
            element: u64::from(word(1)),
            index: (u64::from(word(3)) << 32 | u64::from(word(2))) as i64,
            dim: u64::from(word(4)),
        })
    }
}

/// Optional device features a kernel needs, as bits: vkml-shaderc reads them from each module's
/// OpCapability instructions and numbers them; the names here follow its numbering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShaderNeeds(pub u32);

impl ShaderNeeds {
    pub const FLOAT16: ShaderNeeds = ShaderNeeds(1);
    pub const FLOAT64: ShaderNeeds = ShaderNeeds(1 << 1);
    pub const INT16: ShaderNeeds = ShaderNeeds(1 << 2);
    pub const INT8: ShaderNeeds = ShaderNeeds(1 << 3);
    pub const STORAGE16: ShaderNeeds = ShaderNeeds(1 << 4);
    pub const STORAGE8: ShaderNeeds = ShaderNeeds(1 << 5);
    pub const COOPERATIVE_MATRIX: ShaderNeeds = ShaderNeeds(1 << 6);
    pub const COOPERATIVE_MATRIX2: ShaderNeeds = ShaderNeeds(1 << 7);
    pub const BFLOAT16: ShaderNeeds = ShaderNeeds(1 << 8);
    pub const INTEGER_DOT_PRODUCT: ShaderNeeds = ShaderNeeds(1 << 9);
    const NAMES: [&'static str; 10] = [
        "shaderFloat16",
        "shaderFloat64",
        "shaderInt16",
        "shaderInt8",
        "storageBuffer16BitAccess",
        "storageBuffer8BitAccess",
        "cooperativeMatrix",
        "cooperativeMatrix2 (NV)",
        "shaderBFloat16Type",
        "shaderIntegerDotProduct",
    ];

    pub const fn union(self, o: ShaderNeeds) -> ShaderNeeds {
        ShaderNeeds(self.0 | o.0)
    }

    /// True when every feature in `self` is in `have`.
    pub const fn met_by(self, have: ShaderNeeds) -> bool {
        self.0 & !have.0 == 0
    }

    /// Vulkan's names of the features set, for messages.
    pub fn names(self) -> Vec<&'static str> {
        (0..Self::NAMES.len())
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| Self::NAMES[b])
            .collect()
    }
}

/// Workgroup counts for a 1-D launch of `n` invocations in groups of `wg`, folded into y when
/// x would pass the 65,535 limit every Vulkan device guarantees. The shaders' convention:
/// they index with
/// `gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x`.
pub fn groups_1d(n: usize, wg: u32) -> [u32; 3] {
    let groups = n.div_ceil(wg as usize).max(1) as u64;
    if groups <= 65_535 {
        [groups as u32, 1, 1]
    } else {
        let y = groups.div_ceil(65_535);
        [groups.div_ceil(y) as u32, y as u32, 1]
    }
}
