use super::{ms, t0};
use crate::dist::Config;
use crate::dist::assembly::*;
use crate::{MAX_TENSOR_PAYLOAD, pb};

fn stripe(offset: u64, len: u64, total: u64, stripes: u32) -> pb::TensorHeader {
    pb::TensorHeader {
        run_id: 5,
        edge_id: 6,
        dtype: "uint8".into(),
        shape: vec![total],
        payload_bytes: len,
        model_id: 7,
        role: pb::TensorRole::Edge as i32,
        stripe_offset: offset,
        total_bytes: total,
        stripes,
        transfer: 1,
    }
}

fn alloc(l: &Layout) -> Result<Vec<Vec<u8>>, String> {
    Ok((0..l.stripes)
        .map(|i| Vec::with_capacity(l.len_of(i) as usize))
        .collect())
}

fn stall(ms_: u64) -> Assembler<Vec<u8>> {
    Assembler::new(Config {
        stall: ms(ms_),
        ..Config::default()
    })
}

#[test]
fn layouts_cut_into_equal_stripes_and_a_shorter_last() {
    assert_eq!(layout(10, 4), (3, 4));
    // 5 bytes in 4: stripes of 2 leave only 3 stripes, never an empty one.
    assert_eq!(layout(5, 4), (2, 3));
    assert_eq!(layout(8, 1), (8, 1));
    assert_eq!(layout(8, 0), (8, 1));
    assert_eq!(layout(0, 4), (0, 1));
}

#[test]
fn stripes_in_any_order_make_one_tensor_with_the_last() {
    let mut a = stall(1000);
    let now = t0();
    let data: Vec<u8> = (0..10).collect();
    let mut claims: Vec<_> = [0u64, 3, 6, 9]
        .iter()
        .map(|&o| {
            a.claim("p", &stripe(o, 3.min(10 - o), 10, 4), now, alloc)
                .unwrap()
        })
        .collect();
    for c in &mut claims {
        let start = c.index * 3;
        c.piece.extend_from_slice(&data[start..start + c.len]);
    }
    let mut claims: Vec<Option<Claim<Vec<u8>>>> = claims.into_iter().map(Some).collect();
    let mut whole = None;
    for (n, i) in [1, 3, 0, 2].into_iter().enumerate() {
        let r = a.complete(claims[i].take().unwrap(), now).unwrap();
        assert_eq!(r.is_some(), n == 3, "whole only with the last stripe");
        whole = whole.or(r);
    }
    let w = whole.unwrap();
    assert_eq!(w.pieces.concat(), data);
    assert_eq!(w.key.peer, "p");
    let h = w.header;
    assert_eq!(h.payload_bytes, 10);
    assert_eq!(
        (h.stripe_offset, h.total_bytes, h.stripes, h.transfer),
        (0, 0, 0, 0)
    );
    assert_eq!(a.partial(), 0);
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn a_whole_tensor_is_one_stripe() {
    let mut a = stall(1000);
    let h = pb::TensorHeader {
        payload_bytes: 4,
        dtype: "uint8".into(),
        ..Default::default()
    };
    let mut c = a.claim("p", &h, t0(), alloc).unwrap();
    assert_eq!((c.index, c.len), (0, 4));
    c.piece.extend_from_slice(&[1, 2, 3, 4]);
    let w = a.complete(c, t0()).unwrap().unwrap();
    assert_eq!(w.pieces, [vec![1, 2, 3, 4]]);
}

#[test]
fn claims_that_do_not_hold_are_refused_with_a_reason() {
    let mut a = stall(1000);
    let now = t0();
    let mut refuse = |h: pb::TensorHeader| a.claim("p", &h, now, alloc).unwrap_err().to_string();
    let big = MAX_TENSOR_PAYLOAD + 1;
    assert_eq!(
        refuse(stripe(0, 1, big, 2)),
        format!("a tensor of {big} bytes is over the {MAX_TENSOR_PAYLOAD}-byte limit")
    );
    assert_eq!(refuse(stripe(0, 1, 10, 65)), "65 stripes (at most 64)");
    assert_eq!(
        refuse(stripe(0, 2, 5, 4)),
        "5 bytes cannot be cut into 4 stripes"
    );
    assert_eq!(
        refuse(stripe(9, 3, 10, 4)),
        "a stripe of 3 bytes at offset 9 runs past the tensor's 10 bytes"
    );
    assert_eq!(
        refuse(stripe(u64::MAX, 3, 10, 4)),
        format!(
            "a stripe of 3 bytes at offset {} runs past the tensor's 10 bytes",
            u64::MAX
        )
    );
    assert_eq!(
        refuse(stripe(2, 3, 10, 4)),
        "a stripe of 3 bytes at offset 2 is not one of 4 stripes of 10 bytes"
    );
    // A stripe accepted, then one of the same transfer that disagrees, then its twin.
    let _c = a.claim("p", &stripe(0, 3, 10, 4), now, alloc).unwrap();
    let e = a.claim("p", &stripe(0, 4, 12, 3), now, alloc).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a stripe claims 12 bytes in 3 stripes (uint8 [12]), its tensor 10 bytes in 4 (uint8 [10])"
    );
    let e = a.claim("p", &stripe(0, 3, 10, 4), now, alloc).unwrap_err();
    assert_eq!(
        e,
        StripeError::Twice {
            index: 0,
            stripes: 4
        }
    );
    assert_eq!(e.to_string(), "stripe 0 of 4 arrived twice");
    // Another transfer of the same edge is another tensor.
    let mut h = stripe(0, 3, 10, 4);
    h.transfer = 2;
    assert!(a.claim("p", &h, now, alloc).is_ok());
    assert_eq!(a.partial(), 2);
}

#[test]
fn a_buffer_that_cannot_be_made_refuses_the_stripe_and_keeps_nothing() {
    let mut a = stall(1000);
    let e = a
        .claim("p", &stripe(0, 3, 10, 4), t0(), |_| {
            Err("no memory".to_string())
        })
        .unwrap_err();
    assert_eq!(e, StripeError::Alloc("no memory".into()));
    let e = a
        .claim("p", &stripe(0, 3, 10, 4), t0(), |_| Ok(vec![Vec::new()]))
        .unwrap_err();
    assert_eq!(e.to_string(), "the buffer came in 1 pieces, not 4");
    assert_eq!(a.partial(), 0);
    // Not remembered as dropped: the next try may succeed.
    assert!(a.claim("p", &stripe(0, 3, 10, 4), t0(), alloc).is_ok());
}

#[test]
fn an_abandoned_stripe_drops_its_tensor_and_refuses_the_rest_for_the_stall() {
    let mut a = stall(500);
    let now = t0();
    let c0 = a.claim("p", &stripe(0, 3, 10, 4), now, alloc).unwrap();
    let c1 = a.claim("p", &stripe(3, 3, 10, 4), now, alloc).unwrap();
    a.abandon(c0, "read: reset", now + ms(10));
    assert_eq!(
        a.poll_action(),
        Some(AssemblyAction::Dropped {
            key: c1.key.clone(),
            why: "read: reset".into(),
            done: 0,
            stripes: 4,
        })
    );
    // The other stripe finishing late learns its tensor is gone.
    assert_eq!(
        a.complete(c1, now + ms(20)).unwrap_err(),
        StripeError::DroppedMeanwhile
    );
    let late = a.claim("p", &stripe(6, 3, 10, 4), now + ms(100), alloc);
    assert_eq!(late.unwrap_err(), StripeError::AlreadyDropped);
    // Forgotten after the stall.
    assert_eq!(a.poll_timeout(), Some(now + ms(510)));
    a.handle_timeout(now + ms(509));
    assert!(
        a.claim("p", &stripe(6, 3, 10, 4), now + ms(509), alloc)
            .is_err()
    );
    a.handle_timeout(now + ms(510));
    assert!(
        a.claim("p", &stripe(6, 3, 10, 4), now + ms(510), alloc)
            .is_ok()
    );
}

#[test]
fn a_partial_tensor_is_dropped_after_the_stall_unless_a_stripe_is_being_read() {
    let mut a = stall(500);
    let now = t0();
    let mut c0 = a.claim("p", &stripe(0, 3, 10, 4), now, alloc).unwrap();
    // A stripe being read holds the tensor however long it takes (its read has a timeout
    // of its own).
    assert_eq!(a.poll_timeout(), None);
    a.handle_timeout(now + ms(5000));
    assert_eq!(a.partial(), 1);
    c0.piece.extend_from_slice(&[0, 1, 2]);
    assert!(a.complete(c0, now + ms(5000)).unwrap().is_none());
    // Progress restarts the clock.
    assert_eq!(a.poll_timeout(), Some(now + ms(5500)));
    a.handle_timeout(now + ms(5499));
    assert_eq!(a.partial(), 1);
    a.handle_timeout(now + ms(5500));
    assert_eq!(a.partial(), 0);
    match a.poll_action() {
        Some(AssemblyAction::Dropped {
            why, done, stripes, ..
        }) => {
            assert_eq!((why.as_str(), done, stripes), ("none for 500ms", 1, 4));
        }
        other => panic!("{other:?}"),
    }
    // Its late stripes are refused.
    let late = a.claim("p", &stripe(3, 3, 10, 4), now + ms(5600), alloc);
    assert_eq!(late.unwrap_err(), StripeError::AlreadyDropped);
}

#[test]
fn a_peer_going_down_drops_its_partial_tensors_only() {
    let mut a = stall(500);
    let now = t0();
    let _c = a.claim("p", &stripe(0, 3, 10, 4), now, alloc).unwrap();
    let _d = a.claim("q", &stripe(0, 3, 10, 4), now, alloc).unwrap();
    a.peer_down("p", "dead", now);
    assert_eq!(a.partial(), 1);
    match a.poll_action() {
        Some(AssemblyAction::Dropped { key, why, .. }) => {
            assert_eq!((key.peer.as_str(), why.as_str()), ("p", "p is dead"));
        }
        other => panic!("{other:?}"),
    }
    // Its late stripes are refused (a node declared dead falsely still sends some: they
    // would start a tensor that can never complete), so its send fails and says so.
    let late = a.claim("p", &stripe(3, 3, 10, 4), now, alloc);
    assert_eq!(late.unwrap_err(), StripeError::AlreadyDropped);
}
