//! VKML's wire protocol, with no sockets and no Vulkan: the messages (one .proto, compiled by
//! prost), the frames that carry them (a kind byte, a length, a body, with a size cap per
//! kind), the datagram envelope for gossip, and version negotiation.
//!
//! Like quinn-proto, this crate is pure: everything here is testable (and fuzzed) on bytes.
//! [`dist`] holds distributed execution's decisions as state machines driven by events and
//! the time passed in; `sim` (tests, or the `sim` feature) runs them over a simulated
//! network of several nodes.

#![deny(unsafe_code)]

pub mod dist;
mod frame;
mod message;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
mod version;

pub use frame::{FrameDecoder, FrameError, FrameHeader, HEADER_LEN, MAX_TENSOR_PAYLOAD};
pub use message::{Kind, Message};
pub use version::{MAX_VERSION, MIN_VERSION, VersionError, hello, negotiate};

/// The generated protobuf types.
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/vkml.v1.rs"));
}

/// ALPN protocol id: a peer that does not speak any VKML QUIC protocol fails the handshake
/// before any frame is exchanged.
pub const ALPN: &[u8] = b"vkml";

/// Application error codes for closing streams and connections (QUIC varints).
pub mod error_code {
    /// Clean close (a node leaving, a client done).
    pub const OK: u32 = 0;
    /// A frame broke the rules: unknown kind, over its cap, undecodable body.
    pub const BAD_FRAME: u32 = 1;
    /// The peer's protocol versions do not overlap ours.
    pub const VERSION: u32 = 2;
    /// The first message on a connection was not a Hello.
    pub const NO_HELLO: u32 = 3;
    /// The request is valid but this node does not serve it.
    pub const UNSUPPORTED: u32 = 4;
    /// The request was understood and failed (a model that does not load, a run that fails).
    pub const FAILED: u32 = 5;
}

/// Datagrams carry gossip. One tag byte first, so that other datagram uses can come later
/// without confusing an older node (it drops unknown tags).
pub mod datagram {
    pub const GOSSIP: u8 = 1;

    /// `tag` followed by `payload`.
    pub fn encode(tag: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(payload.len() + 1);
        v.push(tag);
        v.extend_from_slice(payload);
        v
    }

    /// The tag and payload of a datagram, or None for an empty one.
    pub fn decode(data: &[u8]) -> Option<(u8, &[u8])> {
        let (&tag, rest) = data.split_first()?;
        Some((tag, rest))
    }
}

#[cfg(test)]
mod tests;
