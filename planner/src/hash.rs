//! A stable hash of a plan (FNV-1a 64 over a canonical encoding): the same on every machine,
//! unlike std's randomly seeded hashers.

use crate::types::Plan;

struct Fnv(u64);

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= x as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
    }
}

pub fn plan_hash(plan: &Plan) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.u64(plan.snapshot_version);
    h.u64(plan.placement.len() as u64);
    for d in &plan.placement {
        h.str(&d.node);
        h.u64(d.index as u64);
    }
    h.u64(plan.chunks.len() as u64);
    for c in &plan.chunks {
        h.str(&c.device.node);
        h.u64(c.device.index as u64);
        for list in [&c.ops, &c.preds, &c.succs] {
            h.u64(list.len() as u64);
            for &x in list {
                h.u64(x as u64);
            }
        }
    }
    h.u64(plan.transfers.len() as u64);
    for t in &plan.transfers {
        for x in [
            t.value as u64,
            t.from_chunk as u64,
            t.to_chunk as u64,
            t.bytes,
            t.cross_host as u64,
        ] {
            h.u64(x);
        }
    }
    for (d, bytes) in &plan.memory {
        h.str(&d.node);
        h.u64(d.index as u64);
        h.u64(*bytes);
    }
    h.0
}
