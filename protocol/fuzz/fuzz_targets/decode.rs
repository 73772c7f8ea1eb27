//! `cargo +nightly fuzz run decode` (from protocol/): arbitrary bytes through the frame
//! decoder, fed in two pieces split where the first byte says, must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkml_protocol::{FrameDecoder, datagram};

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |b| *b as usize).min(data.len());
    let mut d = FrameDecoder::new();
    for part in [&data[..split], &data[split..]] {
        d.push(part);
        while let Ok(Some(m)) = d.next_message() {
            let _ = m.encode();
        }
    }
    let _ = d.finish();
    let _ = datagram::decode(data);
});
