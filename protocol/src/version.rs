//! Version negotiation: the opener says which range it speaks, the acceptor picks the highest
//! version both speak or refuses with a reason a person can act on.

use crate::pb;

/// The versions this build speaks. Version 1: membership, inventory, status, tensor headers.
pub const MIN_VERSION: u32 = 1;
pub const MAX_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "peer '{name}' speaks protocol versions {min}..={max}, this node speaks {MIN_VERSION}..={MAX_VERSION}: upgrade the older one"
    )]
    NoOverlap { name: String, min: u32, max: u32 },
    #[error("peer '{name}' sent an empty version range {min}..={max}")]
    BadRange { name: String, min: u32, max: u32 },
}

/// The Hello this build sends.
pub fn hello(name: &str, role: pb::Role, generation: u64) -> pb::Hello {
    pb::Hello {
        min_version: MIN_VERSION,
        max_version: MAX_VERSION,
        name: name.to_string(),
        role: role as i32,
        generation,
    }
}

/// The version to speak with the sender of `hello`.
pub fn negotiate(hello: &pb::Hello) -> Result<u32, VersionError> {
    let (min, max) = (hello.min_version, hello.max_version);
    let name = hello.name.clone();
    if min > max {
        return Err(VersionError::BadRange { name, min, max });
    }
    let top = max.min(MAX_VERSION);
    if top < min.max(MIN_VERSION) {
        return Err(VersionError::NoOverlap { name, min, max });
    }
    Ok(top)
}
