//! Frames round-trip; bad frames are refused with the right error; arbitrary bytes never
//! panic.

use crate::*;

fn inventory() -> Message {
    Message::Inventory(pb::Inventory {
        node: "a".into(),
        generation: 7,
        version: 2,
        data_addr: "127.0.0.1:7000".into(),
        devices: vec![pb::Device {
            name: "vulkan:0".into(),
            kind: pb::DeviceKind::Gpu as i32,
            vendor: "NVIDIA".into(),
            memory_budget: 80 << 30,
            flops_per_us: 20_000_000,
            op_overhead_ns: 1500,
            features: 3,
            reserved: 0,
            bytes_per_us: 7,
        }],
    })
}

#[test]
fn frames_round_trip_even_byte_by_byte() {
    let msgs = vec![
        Message::Hello(hello("n1", pb::Role::Member, 42)),
        inventory(),
        Message::StatusRequest(pb::StatusRequest {}),
        Message::Tensor(pb::TensorHeader {
            run_id: 1,
            edge_id: 2,
            dtype: "float32".into(),
            shape: vec![2, 3],
            payload_bytes: 24,
            ..Default::default()
        }),
    ];
    let mut wire = Vec::new();
    for m in &msgs {
        wire.extend(m.encode().unwrap());
    }
    let mut d = FrameDecoder::new();
    let mut got = Vec::new();
    for b in &wire {
        d.push(std::slice::from_ref(b));
        while let Some(m) = d.next_message().unwrap() {
            got.push(m);
        }
    }
    assert_eq!(got, msgs);
    d.finish().unwrap();
}

#[test]
fn header_layout_is_kind_then_big_endian_length() {
    let f = Message::StatusRequest(pb::StatusRequest {})
        .encode()
        .unwrap();
    assert_eq!(f, vec![6, 0, 0, 0, 0]);
    let f = Message::Leave(pb::Leave {
        node: "ab".into(),
        generation: 0,
    })
    .encode()
    .unwrap();
    // field 1, wire type 2 (0x0a), length 2, "ab"
    assert_eq!(f, vec![5, 0, 0, 0, 4, 0x0a, 2, b'a', b'b']);
}

#[test]
fn oversized_frame_is_refused_from_its_header_alone() {
    let mut d = FrameDecoder::new();
    // A Hello claiming 4 GiB: refused with 5 bytes pushed, nothing allocated.
    d.push(&[1, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        d.next_message(),
        Err(FrameError::TooLarge {
            kind: 1,
            len: u64::from(u32::MAX),
            cap: 4096
        })
    );
    // Poisoned: the same error again, and later bytes are ignored.
    d.push(&[6, 0, 0, 0, 0]);
    assert!(d.next_message().is_err());
    assert_eq!(d.pending(), 0);
}

#[test]
fn unknown_kind_and_garbage_body_are_errors() {
    let mut d = FrameDecoder::new();
    d.push(&[200, 0, 0, 0, 0]);
    assert_eq!(d.next_message(), Err(FrameError::UnknownKind(200)));

    let mut d = FrameDecoder::new();
    // A Hello whose body is a truncated varint.
    d.push(&[1, 0, 0, 0, 2, 0x08, 0xff]);
    assert!(matches!(
        d.next_message(),
        Err(FrameError::Decode { kind: 1, .. })
    ));
}

#[test]
fn truncated_stream_is_reported_at_finish() {
    let f = inventory().encode().unwrap();
    let mut d = FrameDecoder::new();
    d.push(&f[..f.len() - 1]);
    assert_eq!(d.next_message(), Ok(None));
    assert_eq!(d.finish(), Err(FrameError::Truncated));
}

#[test]
fn encoder_refuses_a_body_over_its_cap() {
    let m = Message::Refused(pb::Refused {
        reason: "x".repeat(5000),
        ..Default::default()
    });
    assert!(matches!(
        m.encode(),
        Err(FrameError::TooLarge { kind: 3, .. })
    ));
}

#[test]
fn tensor_header_claiming_too_much_payload_is_refused() {
    let m = Message::Tensor(pb::TensorHeader {
        payload_bytes: MAX_TENSOR_PAYLOAD + 1,
        ..Default::default()
    });
    let f = m.encode().unwrap();
    let mut d = FrameDecoder::new();
    d.push(&f);
    assert!(matches!(
        d.next_message(),
        Err(FrameError::TooLarge { kind: 16, .. })
    ));
}

#[test]
fn versions_negotiate_or_refuse_with_a_reason() {
    assert_eq!(negotiate(&hello("a", pb::Role::Member, 1)), Ok(MAX_VERSION));
    let future = pb::Hello {
        min_version: MAX_VERSION + 1,
        max_version: MAX_VERSION + 5,
        name: "new".into(),
        ..Default::default()
    };
    let e = negotiate(&future).unwrap_err();
    assert!(
        e.to_string()
            .contains("peer 'new' speaks protocol versions")
    );
    let wide = pb::Hello {
        min_version: 0,
        max_version: MAX_VERSION + 5,
        ..Default::default()
    };
    assert_eq!(negotiate(&wide), Ok(MAX_VERSION));
    let inverted = pb::Hello {
        min_version: 3,
        max_version: 1,
        ..Default::default()
    };
    assert!(matches!(
        negotiate(&inverted),
        Err(VersionError::BadRange { .. })
    ));
}

/// xorshift64*: a tiny seeded generator, so the test needs no dependency and is repeatable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Feeds the decoder in random splits; it must return (ok or error), never panic, and never
/// hold more than one capped frame's worth of bytes past an error.
fn decode_all(data: &[u8], rng: &mut Rng) {
    let mut d = FrameDecoder::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len().min(64));
        d.push(&rest[..n]);
        rest = &rest[n..];
        while let Ok(Some(m)) = d.next_message() {
            // Whatever decodes must encode again (within caps).
            let _ = m.encode();
        }
    }
    let _ = d.finish();
    let _ = datagram::decode(data);
}

#[test]
fn random_and_mutated_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Pure noise, biased toward known kind bytes so bodies get parsed too.
    for _ in 0..20_000 {
        let len = rng.below(300);
        let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if !v.is_empty() && rng.below(2) == 0 {
            v[0] = Kind::ALL[rng.below(Kind::ALL.len())] as u8;
            if v.len() >= 5 {
                let body = (v.len() - 5) as u32;
                v[1..5].copy_from_slice(&body.to_be_bytes());
            }
        }
        decode_all(&v, &mut rng);
    }
    // Mutations of valid frames: flipped bits, inserted and deleted bytes, changed lengths.
    let seeds: Vec<Vec<u8>> = vec![
        inventory().encode().unwrap(),
        Message::Hello(hello("node-1", pb::Role::Client, 9))
            .encode()
            .unwrap(),
        Message::StatusReply(Box::new(pb::StatusReply {
            node: "a".into(),
            members: vec![pb::MemberStatus {
                name: "b".into(),
                state: 2,
                addr: "x".into(),
                generation: 1,
                devices: vec![],
            }],
            ..Default::default()
        }))
        .encode()
        .unwrap(),
    ];
    for _ in 0..20_000 {
        let mut v = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(4) {
                0 => {
                    let i = rng.below(v.len());
                    v[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(v.len() + 1);
                    v.insert(i, rng.next() as u8);
                }
                2 if v.len() > 1 => {
                    let i = rng.below(v.len());
                    v.remove(i);
                }
                _ => {
                    let i = rng.below(v.len());
                    v[i] = rng.next() as u8;
                }
            }
        }
        decode_all(&v, &mut rng);
    }
}
