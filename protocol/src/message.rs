//! Every message that travels in a frame, as one enum, with its kind byte and its size cap.

use bytes::Bytes;
use prost::Message as _;

use crate::frame::FrameError;
use crate::pb;

const KIB: u32 = 1024;
const MIB: u32 = 1024 * KIB;

/// The kind byte of a frame. Numbers are forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Welcome = 2,
    Refused = 3,
    Inventory = 4,
    Leave = 5,
    StatusRequest = 6,
    StatusReply = 7,
    Error = 8,
    Submit = 9,
    Fragment = 10,
    LoadAck = 11,
    Run = 12,
    RunResult = 13,
    RunFailed = 14,
    Unload = 15,
    Tensor = 16,
    LoadProgress = 17,
    Loaded = 18,
    WeightsWanted = 19,
    Sequence = 20,
}

impl Kind {
    pub const ALL: [Kind; 20] = [
        Kind::Hello,
        Kind::Welcome,
        Kind::Refused,
        Kind::Inventory,
        Kind::Leave,
        Kind::StatusRequest,
        Kind::StatusReply,
        Kind::Error,
        Kind::Submit,
        Kind::Fragment,
        Kind::LoadAck,
        Kind::Run,
        Kind::RunResult,
        Kind::RunFailed,
        Kind::Unload,
        Kind::Tensor,
        Kind::LoadProgress,
        Kind::Loaded,
        Kind::WeightsWanted,
        Kind::Sequence,
    ];

    pub fn from_byte(b: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == b)
    }

    /// The largest body a frame of this kind may have. A receiver checks it against the
    /// length in the header before it allocates or reads the body, so a peer cannot make a
    /// node reserve memory by claiming a large frame. Control messages are small; a status
    /// reply lists every member with its devices.
    pub fn cap(self) -> u32 {
        match self {
            Kind::Hello
            | Kind::Welcome
            | Kind::Refused
            | Kind::Leave
            | Kind::StatusRequest
            | Kind::RunResult
            | Kind::Unload
            | Kind::LoadProgress => 4 * KIB,
            // A step of a sequence lists its bindings: two per layer of a language model.
            Kind::Error | Kind::LoadAck | Kind::RunFailed | Kind::Run | Kind::Sequence => 16 * KIB,
            Kind::Inventory => 64 * KIB,
            Kind::Tensor => 64 * KIB,
            Kind::StatusReply | Kind::Loaded | Kind::WeightsWanted => MIB,
            // One entry per external tensor: an LLM has thousands.
            Kind::Submit => 16 * MIB,
            // Every live op of a model with its attributes, and the cost graph: large models
            // have tens of thousands of ops. Weights travel apart, as tensors.
            Kind::Fragment => 64 * MIB,
        }
    }
}

/// A decoded message. `Tensor` is only the header: its payload follows the frame raw.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Hello(pb::Hello),
    Welcome(pb::Welcome),
    Refused(pb::Refused),
    Inventory(pb::Inventory),
    Leave(pb::Leave),
    StatusRequest(pb::StatusRequest),
    StatusReply(Box<pb::StatusReply>),
    Error(pb::ErrorReply),
    Submit(pb::Submit),
    Fragment(Box<pb::Fragment>),
    LoadAck(pb::LoadAck),
    Run(pb::Run),
    RunResult(pb::RunResult),
    RunFailed(pb::RunFailed),
    Unload(pb::Unload),
    Tensor(pb::TensorHeader),
    LoadProgress(pb::LoadProgress),
    Loaded(pb::Loaded),
    WeightsWanted(pb::WeightsWanted),
    Sequence(pb::SequenceOp),
}

impl Message {
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::Welcome(_) => Kind::Welcome,
            Message::Refused(_) => Kind::Refused,
            Message::Inventory(_) => Kind::Inventory,
            Message::Leave(_) => Kind::Leave,
            Message::StatusRequest(_) => Kind::StatusRequest,
            Message::StatusReply(_) => Kind::StatusReply,
            Message::Error(_) => Kind::Error,
            Message::Submit(_) => Kind::Submit,
            Message::Fragment(_) => Kind::Fragment,
            Message::LoadAck(_) => Kind::LoadAck,
            Message::Run(_) => Kind::Run,
            Message::RunResult(_) => Kind::RunResult,
            Message::RunFailed(_) => Kind::RunFailed,
            Message::Unload(_) => Kind::Unload,
            Message::Tensor(_) => Kind::Tensor,
            Message::LoadProgress(_) => Kind::LoadProgress,
            Message::Loaded(_) => Kind::Loaded,
            Message::WeightsWanted(_) => Kind::WeightsWanted,
            Message::Sequence(_) => Kind::Sequence,
        }
    }

    fn body(&self) -> Vec<u8> {
        match self {
            Message::Hello(m) => m.encode_to_vec(),
            Message::Welcome(m) => m.encode_to_vec(),
            Message::Refused(m) => m.encode_to_vec(),
            Message::Inventory(m) => m.encode_to_vec(),
            Message::Leave(m) => m.encode_to_vec(),
            Message::StatusRequest(m) => m.encode_to_vec(),
            Message::StatusReply(m) => m.encode_to_vec(),
            Message::Error(m) => m.encode_to_vec(),
            Message::Submit(m) => m.encode_to_vec(),
            Message::Fragment(m) => m.encode_to_vec(),
            Message::LoadAck(m) => m.encode_to_vec(),
            Message::Run(m) => m.encode_to_vec(),
            Message::RunResult(m) => m.encode_to_vec(),
            Message::RunFailed(m) => m.encode_to_vec(),
            Message::Unload(m) => m.encode_to_vec(),
            Message::Tensor(m) => m.encode_to_vec(),
            Message::LoadProgress(m) => m.encode_to_vec(),
            Message::Loaded(m) => m.encode_to_vec(),
            Message::WeightsWanted(m) => m.encode_to_vec(),
            Message::Sequence(m) => m.encode_to_vec(),
        }
    }

    /// The whole frame: header and body. Fails when the body is over its kind's cap (the
    /// receiver would refuse it anyway; better to say so at the sender).
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let body = self.body();
        let kind = self.kind();
        if body.len() as u64 > u64::from(kind.cap()) {
            return Err(FrameError::TooLarge {
                kind: kind as u8,
                len: body.len() as u64,
                cap: kind.cap(),
            });
        }
        let mut out = Vec::with_capacity(crate::HEADER_LEN + body.len());
        out.push(kind as u8);
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// A body of the given kind.
    pub fn decode(kind: Kind, body: Bytes) -> Result<Message, FrameError> {
        let bad = |e: prost::DecodeError| FrameError::Decode {
            kind: kind as u8,
            reason: e.to_string(),
        };
        Ok(match kind {
            Kind::Hello => Message::Hello(pb::Hello::decode(body).map_err(bad)?),
            Kind::Welcome => Message::Welcome(pb::Welcome::decode(body).map_err(bad)?),
            Kind::Refused => Message::Refused(pb::Refused::decode(body).map_err(bad)?),
            Kind::Inventory => Message::Inventory(pb::Inventory::decode(body).map_err(bad)?),
            Kind::Leave => Message::Leave(pb::Leave::decode(body).map_err(bad)?),
            Kind::StatusRequest => {
                Message::StatusRequest(pb::StatusRequest::decode(body).map_err(bad)?)
            }
            Kind::StatusReply => {
                Message::StatusReply(Box::new(pb::StatusReply::decode(body).map_err(bad)?))
            }
            Kind::Error => Message::Error(pb::ErrorReply::decode(body).map_err(bad)?),
            Kind::Submit => Message::Submit(pb::Submit::decode(body).map_err(bad)?),
            Kind::Fragment => Message::Fragment(Box::new(pb::Fragment::decode(body).map_err(bad)?)),
            Kind::LoadAck => Message::LoadAck(pb::LoadAck::decode(body).map_err(bad)?),
            Kind::Run => Message::Run(pb::Run::decode(body).map_err(bad)?),
            Kind::RunResult => Message::RunResult(pb::RunResult::decode(body).map_err(bad)?),
            Kind::RunFailed => Message::RunFailed(pb::RunFailed::decode(body).map_err(bad)?),
            Kind::Unload => Message::Unload(pb::Unload::decode(body).map_err(bad)?),
            Kind::LoadProgress => {
                Message::LoadProgress(pb::LoadProgress::decode(body).map_err(bad)?)
            }
            Kind::Loaded => Message::Loaded(pb::Loaded::decode(body).map_err(bad)?),
            Kind::WeightsWanted => {
                Message::WeightsWanted(pb::WeightsWanted::decode(body).map_err(bad)?)
            }
            Kind::Sequence => Message::Sequence(pb::SequenceOp::decode(body).map_err(bad)?),
            Kind::Tensor => {
                let h = pb::TensorHeader::decode(body).map_err(bad)?;
                if h.payload_bytes > crate::MAX_TENSOR_PAYLOAD {
                    return Err(FrameError::TooLarge {
                        kind: kind as u8,
                        len: h.payload_bytes,
                        cap: u32::MAX,
                    });
                }
                Message::Tensor(h)
            }
        })
    }
}
