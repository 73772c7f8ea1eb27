//! The SPIR-V of every `shaders/*.comp`, compiled by node/build/shaders.rs.

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// A shader's entry in the table (its static name and SPIR-V words), by name.
pub(crate) fn find(name: &str) -> Option<(&'static str, &'static [u32])> {
    SHADERS
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| SHADERS[i])
}

/// Names of all shaders in this build, sorted.
pub fn shader_names() -> impl Iterator<Item = &'static str> {
    SHADERS.iter().map(|(n, _)| *n)
}
