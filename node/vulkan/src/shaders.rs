//! The SPIR-V of every `shaders/*.comp`, compiled by node/build/shaders.rs.

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// Optional device features a shader needs, as bits. The build script reads them from each
/// module's OpCapability instructions; the numbering here is the build script's.
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
    const NAMES: [&'static str; 9] = [
        "shaderFloat16",
        "shaderFloat64",
        "shaderInt16",
        "shaderInt8",
        "storageBuffer16BitAccess",
        "storageBuffer8BitAccess",
        "cooperativeMatrix",
        "cooperativeMatrix2 (NV)",
        "shaderBFloat16Type",
    ];

    pub fn union(self, o: ShaderNeeds) -> ShaderNeeds {
        ShaderNeeds(self.0 | o.0)
    }

    /// True when every feature in `self` is in `have`.
    pub fn met_by(self, have: ShaderNeeds) -> bool {
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

/// A shader's entry in the table (its static name and SPIR-V words), by name.
pub(crate) fn find(name: &str) -> Option<(&'static str, &'static [u32])> {
    SHADERS
        .binary_search_by(|(n, _, _)| (*n).cmp(name))
        .ok()
        .map(|i| (SHADERS[i].0, SHADERS[i].2))
}

/// The optional features a shader needs, or `None` when no shader has that name.
pub fn shader_needs(name: &str) -> Option<ShaderNeeds> {
    SHADERS
        .binary_search_by(|(n, _, _)| (*n).cmp(name))
        .ok()
        .map(|i| ShaderNeeds(SHADERS[i].1))
}

/// Names of all shaders in this build, sorted.
pub fn shader_names() -> impl Iterator<Item = &'static str> {
    SHADERS.iter().map(|(n, _, _)| *n)
}
