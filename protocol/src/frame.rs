//! Frames: `[kind: u8][len: u32 big-endian][body: len bytes]`. The header alone says whether
//! the frame is acceptable (known kind, length under the kind's cap), so a reader never
//! allocates a length a peer merely claims.

use bytes::{Buf, BytesMut};

use crate::message::{Kind, Message};

pub const HEADER_LEN: usize = 5;

/// The largest tensor payload a header may announce (64 GiB): a bound on claims, not a
/// promise of memory; the receiver still checks the bytes against its budget.
pub const MAX_TENSOR_PAYLOAD: u64 = 64 << 30;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame of kind {kind} claims {len} bytes, over its cap of {cap}")]
    TooLarge { kind: u8, len: u64, cap: u32 },
    #[error("frame of kind {kind} does not decode: {reason}")]
    Decode { kind: u8, reason: String },
    #[error("the stream ended inside a frame")]
    Truncated,
}

/// A parsed and checked frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: Kind,
    pub len: u32,
}

impl FrameHeader {
    /// Checks kind and cap. Anything that passes is safe to allocate.
    pub fn parse(bytes: [u8; HEADER_LEN]) -> Result<FrameHeader, FrameError> {
        let kind = Kind::from_byte(bytes[0]).ok_or(FrameError::UnknownKind(bytes[0]))?;
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        if len > kind.cap() {
            return Err(FrameError::TooLarge {
                kind: bytes[0],
                len: u64::from(len),
                cap: kind.cap(),
            });
        }
        Ok(FrameHeader { kind, len })
    }
}

/// A sans-I/O decoder: push bytes as they arrive, pop whole messages. After an error the
/// stream is poisoned (a frame boundary can no longer be trusted) and every later call
/// returns the same error.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: BytesMut,
    failed: Option<FrameError>,
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    pub fn push(&mut self, data: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(data);
        }
    }

    /// The next whole message, `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.try_next() {
            Err(e) => {
                self.failed = Some(e.clone());
                self.buf.clear();
                Err(e)
            }
            ok => ok,
        }
    }

    /// Bytes held that do not yet form a whole frame. At the end of a stream, anything left
    /// is a truncated frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Call at the end of the stream: a partial frame left over is an error.
    pub fn finish(&self) -> Result<(), FrameError> {
        match (&self.failed, self.buf.is_empty()) {
            (Some(e), _) => Err(e.clone()),
            (None, true) => Ok(()),
            (None, false) => Err(FrameError::Truncated),
        }
    }

    fn try_next(&mut self) -> Result<Option<Message>, FrameError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&self.buf[..HEADER_LEN]);
        let header = FrameHeader::parse(h)?;
        let total = HEADER_LEN + header.len as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        let body = self.buf.split_to(header.len as usize).freeze();
        Message::decode(header.kind, body).map(Some)
    }
}
