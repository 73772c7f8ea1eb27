//! Tensors on streams: a `Tensor` frame (the header) followed by the raw payload, and the
//! conversions between our tensors and the wire's names for element types.

use bytes::{Bytes, BytesMut};
use quinn::{RecvStream, SendStream};
use vkml_protocol::{MAX_TENSOR_PAYLOAD, Message, pb};

use super::DistError;
use crate::cluster::transport;
use crate::tensor::{DType, Tensor};

/// The wire name of an element type (ONNX's: "float", "int64"...).
pub fn dtype_name(d: DType) -> &'static str {
    d.onnx_name()
}

pub fn dtype_from_name(name: &str) -> Result<DType, DistError> {
    DType::ALL
        .into_iter()
        .find(|d| d.onnx_name() == name)
        .ok_or_else(|| DistError::Protocol(format!("unknown element type '{name}'")))
}

pub fn header(
    t: &Tensor,
    role: pb::TensorRole,
    model: u64,
    run: u64,
    edge: u64,
) -> pb::TensorHeader {
    pb::TensorHeader {
        run_id: run,
        edge_id: edge,
        dtype: dtype_name(t.dtype()).to_string(),
        shape: t.shape().iter().map(|&d| d as u64).collect(),
        payload_bytes: t.bytes().len() as u64,
        model_id: model,
        role: role as i32,
        // Whole, not striped: the transport fills in striping when it splits a tensor.
        ..Default::default()
    }
}

/// The tensor a header and its payload describe, checked (the payload must be exactly the
/// shape's size).
/// A weight's tensor: its type as the fragment says, its bytes as received or found.
pub fn tensor_of(t: &pb::ValueType, payload: Bytes) -> Result<Tensor, DistError> {
    let dtype = dtype_from_name(&t.dtype)?;
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    Tensor::from_bytes(dtype, shape, payload)
        .map_err(|e| DistError::Protocol(format!("a weight does not match its type: {e}")))
}

pub fn tensor(h: &pb::TensorHeader, payload: Bytes) -> Result<Tensor, DistError> {
    let dtype = dtype_from_name(&h.dtype)?;
    let shape: Vec<usize> = h.shape.iter().map(|&d| d as usize).collect();
    Tensor::from_bytes(dtype, shape, payload)
        .map_err(|e| DistError::Protocol(format!("tensor on the wire: {e}")))
}

/// Writes one tensor: its header frame and payload in one write (see [`write_with_tensors`]),
/// for a sender that counts what it sent tensor by tensor.
pub async fn write_tensor(
    send: &mut SendStream,
    h: pb::TensorHeader,
    payload: &Bytes,
) -> Result<(), DistError> {
    write_chunks(send, vec![frame(&Message::Tensor(h))?, payload.clone()]).await
}

/// Writes `first` and then each tensor (its header frame, then its payload) in one write:
/// the connection's driver wakes once and packs them into as few packets as their sizes allow
/// (one for a small run's message and inputs), where a write per frame could send each in a
/// packet of its own, and the payloads go out without a copy into the stream's buffer.
pub async fn write_with_tensors<'a>(
    send: &mut SendStream,
    first: &Message,
    tensors: impl IntoIterator<Item = (pb::TensorHeader, &'a Bytes)>,
) -> Result<(), DistError> {
    let mut chunks = vec![frame(first)?];
    for (h, payload) in tensors {
        chunks.push(frame(&Message::Tensor(h))?);
        chunks.push(payload.clone());
    }
    write_chunks(send, chunks).await
}

fn frame(m: &Message) -> Result<Bytes, DistError> {
    m.encode()
        .map(Bytes::from)
        .map_err(|e| DistError::Protocol(e.to_string()))
}

async fn write_chunks(send: &mut SendStream, mut chunks: Vec<Bytes>) -> Result<(), DistError> {
    send.write_all_chunks(&mut chunks)
        .await
        .map_err(|e| DistError::Peer(format!("write: {e}")))
}

/// The payload that follows a tensor header on `recv`.
pub async fn read_payload(recv: &mut RecvStream, h: &pb::TensorHeader) -> Result<Bytes, DistError> {
    read_announced(recv, h.payload_bytes, "tensor payload").await
}

/// Bytes a peer announced before sending them, capped at [`MAX_TENSOR_PAYLOAD`]. The buffer
/// grows with the bytes that actually arrive, never from the announced length alone: a header
/// claiming 200 GB costs nothing until 200 GB come.
pub async fn read_announced(recv: &mut RecvStream, n: u64, what: &str) -> Result<Bytes, DistError> {
    // What is allocated ahead of the bytes; past it the buffer at most doubles as bytes come.
    const AHEAD: usize = 1 << 20;
    if n > MAX_TENSOR_PAYLOAD {
        return Err(DistError::Protocol(format!(
            "a {what} of {n} bytes is over the {MAX_TENSOR_PAYLOAD}-byte limit"
        )));
    }
    let n = usize::try_from(n).map_err(|_| {
        DistError::Protocol(format!(
            "a {what} of {n} bytes is too large for this machine"
        ))
    })?;
    let mut buf = BytesMut::with_capacity(n.min(AHEAD));
    while buf.len() < n {
        let want = (n - buf.len()).min(buf.len().max(AHEAD));
        let start = buf.len();
        buf.resize(start + want, 0);
        recv.read_exact(&mut buf[start..])
            .await
            .map_err(|e| DistError::Peer(format!("{what}: {e}")))?;
    }
    Ok(buf.freeze())
}

/// The next frame, which must be a tensor header, and its payload.
pub async fn read_tensor(recv: &mut RecvStream) -> Result<(pb::TensorHeader, Bytes), DistError> {
    match transport::read_message(recv).await? {
        Some(Message::Tensor(h)) => {
            let payload = read_payload(recv, &h).await?;
            Ok((h, payload))
        }
        Some(other) => Err(DistError::Protocol(format!(
            "expected a tensor, got {:?}",
            other.kind()
        ))),
        None => Err(DistError::Protocol(
            "the stream ended before a tensor".into(),
        )),
    }
}

/// Reads the next message; an end of stream or an error reply is an error.
pub async fn expect_message(recv: &mut RecvStream) -> Result<Message, DistError> {
    match transport::read_message(recv).await? {
        Some(Message::Error(e)) => Err(DistError::Remote(e.message)),
        Some(m) => Ok(m),
        None => Err(DistError::Peer(
            "the peer closed the stream without answering".into(),
        )),
    }
}

/// Streams `weights` (slices of file mappings, typically) in order. The bytes are read on a
/// heavy thread, a few pieces ahead, and the pages read handed back: a page fault on a cold
/// file then never stalls the runtime that answers the peers' probes, and sending a model
/// costs the sender no memory. `count` hears of every piece sent.
pub async fn send_weights(
    send: &mut quinn::SendStream,
    weights: Vec<Bytes>,
    mut count: impl FnMut(u64),
) -> Result<(), DistError> {
    const PIECE: usize = 4 << 20;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let reader = crate::priority::blocking(move || {
        for w in weights {
            for piece in w.chunks(PIECE) {
                let copy = Bytes::copy_from_slice(piece);
                crate::onnx::release_pages(piece);
                if tx.blocking_send(copy).is_err() {
                    return;
                }
            }
        }
    });
    while let Some(chunk) = rx.recv().await {
        let n = chunk.len() as u64;
        send.write_chunk(chunk)
            .await
            .map_err(|e| DistError::Peer(format!("sending weights: {e}")))?;
        count(n);
    }
    reader.await.map_err(super::join_err)
}

/// A sequence's bindings (graph output, graph input) as the wire lists them.
pub fn bindings(pairs: &[(usize, usize)]) -> Vec<pb::Binding> {
    pairs
        .iter()
        .map(|&(o, i)| pb::Binding {
            output: o as u32,
            input: i as u32,
        })
        .collect()
}

/// The (graph output, graph input) pairs of wire bindings.
pub fn pairs(bindings: &[pb::Binding]) -> Vec<(usize, usize)> {
    bindings
        .iter()
        .map(|b| (b.output as usize, b.input as usize))
        .collect()
}
