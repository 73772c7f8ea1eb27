//! Talking to the target node: connections that hold the key, streams written with any bytes
//! and ended any way, replies read for a while and named; and the frames a case sends.

use std::net::SocketAddr;
use std::time::Duration;

use arbitrary::{Result, Unstructured};
use quinn::{Connection, Endpoint};
use vkml::cluster::{Secret, tls::NodeTls, transport};
use vkml_protocol::{FrameDecoder, Kind, Message, pb};

use crate::{edge, protowire};

/// A connection to the target, as a client or as a member.
#[derive(Clone)]
pub struct Conn {
    _endpoint: Endpoint,
    conn: Connection,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The stream finished: the node sees the end of what was sent.
    Finish,
    /// The stream reset: the node's reads fail.
    Reset,
    /// Left open while the reply is awaited, then reset.
    Open,
}

/// What came back on a stream: its first message, and a name for the corpus.
pub struct Reply {
    pub first: Option<Message>,
    pub class: String,
}

impl Conn {
    pub async fn open(secret: &Secret, addr: SocketAddr, member: bool) -> Result<Conn, String> {
        let name = if member { "fuzzer" } else { "vkml-client" };
        let tls = NodeTls::new(secret, name).map_err(|e| e.to_string())?;
        let endpoint = transport::endpoint(&tls, "127.0.0.1:0".parse().expect("an address"), false)
            .map_err(|e| e.to_string())?;
        let role = if member {
            pb::Role::Member
        } else {
            pb::Role::Client
        };
        let hello = vkml_protocol::hello(name, role, 1);
        let (conn, _) = transport::connect(&endpoint, addr, hello)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            _endpoint: endpoint,
            conn,
        })
    }

    pub fn is_open(&self) -> bool {
        self.conn.close_reason().is_none()
    }

    /// One request on a stream of its own; the first message of the answer.
    pub async fn ask(&self, m: Message) -> Result<Option<Message>, String> {
        let reply = self
            .exchange(frame(&m), End::Finish, Duration::from_secs(5))
            .await;
        Ok(reply.first)
    }

    /// Writes `bytes` on a new bidirectional stream, ends it as told, and reads the answer
    /// until the node finishes it or `wait` passes.
    pub async fn exchange(&self, bytes: Vec<u8>, end: End, wait: Duration) -> Reply {
        let work = async {
            let (mut send, mut recv) = self.conn.open_bi().await.map_err(|e| e.to_string())?;
            send.write_all(&bytes).await.map_err(|e| e.to_string())?;
            match end {
                End::Finish => {
                    let _ = send.finish();
                }
                End::Reset => {
                    let _ = send.reset(0u32.into());
                }
                End::Open => {}
            }
            let mut got = Vec::new();
            let read = tokio::time::timeout(wait, async {
                let mut buf = [0u8; 16 << 10];
                while got.len() < 1 << 20 {
                    match recv.read(&mut buf).await {
                        Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
            })
            .await;
            let _ = send.reset(0u32.into());
            let _ = recv.stop(0u32.into());
            Ok::<_, String>((got, read.is_err()))
        };
        match tokio::time::timeout(wait + Duration::from_secs(5), work).await {
            Ok(Ok((got, timed_out))) => name_reply(&got, timed_out),
            Ok(Err(e)) => Reply {
                first: None,
                class: format!("stream: {}", crate::exec::class(&e)),
            },
            Err(_) => Reply {
                first: None,
                class: "stream: blocked".into(),
            },
        }
    }

    /// Writes `bytes` on a new unidirectional stream and finishes it.
    pub async fn send_uni(&self, bytes: Vec<u8>) -> Reply {
        let work = async {
            let mut send = self.conn.open_uni().await.map_err(|e| e.to_string())?;
            send.write_all(&bytes).await.map_err(|e| e.to_string())?;
            let _ = send.finish();
            Ok::<_, String>(())
        };
        let class = match tokio::time::timeout(Duration::from_secs(5), work).await {
            Ok(Ok(())) => "uni sent".into(),
            Ok(Err(e)) => format!("uni: {}", crate::exec::class(&e)),
            Err(_) => "uni: blocked".into(),
        };
        Reply { first: None, class }
    }
}

fn name_reply(got: &[u8], timed_out: bool) -> Reply {
    let mut d = FrameDecoder::new();
    d.push(got);
    // Progress reports come before the answer proper.
    let mut first = None;
    while let Ok(Some(m)) = d.next_message() {
        if !matches!(m, Message::LoadProgress(_)) {
            first = Some(m);
            break;
        }
    }
    let class = match &first {
        None if got.is_empty() && timed_out => "silent".into(),
        None if got.is_empty() => "closed".into(),
        None => "undecodable reply".into(),
        Some(Message::Error(e)) => format!("error: {}", crate::exec::class(&e.message)),
        Some(Message::LoadAck(a)) if !a.ok => format!("refused: {}", crate::exec::class(&a.reason)),
        Some(m) => format!("{:?}", m.kind()),
    };
    Reply { first, class }
}

/// A message's frame. Messages over their kind's cap are sent anyway, header and all: the
/// node must refuse them.
pub fn frame(m: &Message) -> Vec<u8> {
    m.encode()
        .unwrap_or_else(|_| vec![m.kind() as u8, 0xff, 0xff, 0xff, 0xff])
}

/// A header for `body` under `kind`; its length sometimes a lie.
fn raw_frame(u: &mut Unstructured, kind: u8, body: &[u8]) -> Result<Vec<u8>> {
    let len = if u.ratio(7, 8)? {
        body.len() as u32
    } else {
        edge::int(u)? as u32
    };
    let mut out = vec![kind];
    out.extend(len.to_be_bytes());
    out.extend(body);
    Ok(out)
}

/// Submit and the model's bytes: the model sometimes damaged, the declared size sometimes not
/// the size sent.
pub fn submit(u: &mut Unstructured, model: &mut Vec<u8>) -> Result<Vec<u8>> {
    if u.ratio(1, 4)? {
        *model = protowire::mutate(u, model, 3)?;
    }
    let declared = if u.ratio(7, 8)? {
        model.len() as u64
    } else {
        edge::int(u)? as u64
    };
    let name = if u.ratio(3, 4)? {
        "fuzz.onnx".into()
    } else {
        edge::name(u, &[])?
    };
    // External weights offered: the node asks for those it lacks, and the frame holds none of
    // their bytes (or claims any length).
    let mut weights = Vec::new();
    if u.ratio(1, 4)? {
        for _ in 0..u.int_in_range(1..=3)? {
            let hash_len = if u.ratio(7, 8)? { 32 } else { 5 };
            weights.push(pb::WeightRange {
                location: edge::name(u, &[])?,
                offset: edge::int(u)? as u64,
                length: edge::int(u)? as u64,
                hash: u.bytes(hash_len)?.to_vec().into(),
            });
        }
    }
    let mut out = frame(&Message::Submit(pb::Submit {
        name,
        model_bytes: declared,
        weights,
        // A client that serves nothing: every weight is asked for up front.
        source: 0,
    }));
    out.extend_from_slice(model);
    Ok(out)
}

/// Run and its input tensors: headers and payloads that fit one of the models' inputs
/// (frames::models), or any.
pub fn run(u: &mut Unstructured, model_id: u64) -> Result<Vec<u8>> {
    let count = if u.ratio(7, 8)? {
        1
    } else {
        u.int_in_range(0..=3)?
    };
    let mut out = frame(&Message::Run(pb::Run {
        model_id: if u.ratio(7, 8)? {
            model_id
        } else {
            edge::int(u)? as u64
        },
        run_id: 0,
        tensors: count,
        // Now and then a step of a sequence, with a binding that may not fit the model.
        sequence: if u.ratio(1, 4)? {
            edge::int(u)? as u64
        } else {
            0
        },
        bind: if u.ratio(1, 2)? {
            vec![pb::Binding {
                output: u.int_in_range(0..=3)?,
                input: u.int_in_range(0..=3)?,
            }]
        } else {
            Vec::new()
        },
        ..Default::default()
    }));
    let (dtype, shape) = if u.ratio(1, 4)? {
        (crate::values::dtype(u)?, crate::values::shape(u)?)
    } else {
        use vkml::DType::{F32, I64};
        let fits: [(vkml::DType, &[usize]); 3] = [(F32, &[1, 4]), (I64, &[3]), (F32, &[2, 3])];
        let (d, s) = *u.choose(&fits)?;
        (d, s.to_vec())
    };
    for i in 0..count {
        out.extend(tensor(
            u,
            dtype,
            &shape,
            model_id,
            u64::from(i),
            pb::TensorRole::Input,
        )?);
    }
    Ok(out)
}

/// A tensor frame and its payload; the header sometimes mutated, the payload sometimes short.
pub fn tensor(
    u: &mut Unstructured,
    dtype: vkml::DType,
    shape: &[usize],
    model_id: u64,
    edge_id: u64,
    role: pb::TensorRole,
) -> Result<Vec<u8>> {
    let n: usize = shape.iter().product();
    let payload = crate::values::elements(u, dtype, n)?;
    let h = pb::TensorHeader {
        edge_id,
        dtype: vkml::distributed::wire::dtype_name(dtype).into(),
        shape: shape.iter().map(|&d| d as u64).collect(),
        payload_bytes: payload.len() as u64,
        model_id,
        role: role as i32,
        ..Default::default()
    };
    let mut out = if u.ratio(1, 4)? {
        let body = protowire::mutate(u, &prost::Message::encode_to_vec(&h), 1)?;
        raw_frame(u, Kind::Tensor as u8, &body)?
    } else {
        frame(&Message::Tensor(h))
    };
    let keep = if u.ratio(7, 8)? {
        payload.len()
    } else {
        u.int_in_range(0..=payload.len())?
    };
    out.extend_from_slice(&payload[..keep]);
    Ok(out)
}

/// Frames of any kind, valid or mutated, with stray bytes between.
pub fn soup(u: &mut Unstructured, models: &[Vec<u8>]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(1..=4)? {
        match u.int_in_range(0..=5u8)? {
            0 => {
                let kind = u.arbitrary::<u8>()?;
                let body: Vec<u8> = (0..u.int_in_range(0..=32)?)
                    .map(|_| u.arbitrary())
                    .collect::<Result<_>>()?;
                out.extend(raw_frame(u, kind, &body)?);
            }
            1 => {
                let n = u.int_in_range(1..=64)?;
                for _ in 0..n {
                    out.push(u.arbitrary()?);
                }
            }
            2 => {
                let mut model = u.choose(models)?.clone();
                out.extend(submit(u, &mut model)?);
            }
            _ => {
                let m = template(u)?;
                let body = frame(&m)[vkml_protocol::HEADER_LEN..].to_vec();
                let body = if u.ratio(3, 4)? {
                    protowire::mutate(u, &body, 2)?
                } else {
                    body
                };
                out.extend(raw_frame(u, m.kind() as u8, &body)?);
            }
        }
    }
    Ok(out)
}

/// A message of any kind with plausible fields, for the mutator to start from.
fn template(u: &mut Unstructured) -> Result<Message> {
    let id = if u.ratio(1, 2)? {
        u.int_in_range(0..=3)?
    } else {
        edge::int(u)? as u64
    };
    let name = edge::name(u, &["target".into(), "fuzzer".into()])?;
    let device = pb::Device {
        name: "cpu".into(),
        vendor: "fuzz".into(),
        memory_budget: edge::int(u)? as u64,
        flops_per_us: edge::int(u)? as u64,
        ..Default::default()
    };
    Ok(match u.int_in_range(0..=12u8)? {
        0 => Message::Hello(vkml_protocol::hello(&name, pb::Role::Member, id)),
        1 => Message::Inventory(pb::Inventory {
            node: name,
            generation: id,
            version: id,
            data_addr: "127.0.0.1:1".into(),
            devices: vec![device],
        }),
        2 => Message::Leave(pb::Leave {
            node: name,
            generation: id,
        }),
        3 => Message::StatusRequest(pb::StatusRequest {}),
        4 => Message::Run(pb::Run {
            model_id: id,
            run_id: id,
            tensors: u.int_in_range(0..=2)?,
            ..Default::default()
        }),
        5 => Message::RunResult(pb::RunResult {
            run_id: id,
            ..Default::default()
        }),
        6 => Message::RunFailed(pb::RunFailed {
            model_id: id,
            run_id: id,
            reason: name,
            ..Default::default()
        }),
        7 => Message::Unload(pb::Unload {
            model_id: id,
            // From what was drawn already: a recorded case's bytes must still make the
            // frames they made before this field existed (tests/findings).
            keep_weights: id % 2 == 1,
            reason: name,
        }),
        8 => Message::LoadAck(pb::LoadAck {
            model_id: id,
            ok: u.arbitrary()?,
            reason: name,
            ..Default::default()
        }),
        9 => Message::Tensor(pb::TensorHeader {
            model_id: id,
            run_id: id,
            dtype: "float".into(),
            shape: vec![edge::int(u)? as u64],
            payload_bytes: edge::int(u)? as u64,
            ..Default::default()
        }),
        10 => Message::Error(pb::ErrorReply {
            code: u.arbitrary()?,
            message: name,
        }),
        11 => Message::Fragment(Box::default()),
        _ => Message::Loaded(pb::Loaded {
            model_id: id,
            ..Default::default()
        }),
    })
}
