//! Values between simulated nodes, as `Cluster::send_tensor` moves them: each value striped,
//! every stripe acknowledged by its receiver (or refused, with the reason), and the sender's
//! send failing when a stripe is refused, when no acknowledgement comes within
//! `SimConfig::ack_timeout` (a connection that went quiet: QUIC's idle timeout), or when the
//! receiver is seen down meanwhile. A failed send is the participant machine's to report.
//! Run starts are acknowledged the same way (`Link::start_remote` waits for its stream's
//! data to be acknowledged): one that is not fails its start.

use std::time::Instant;

use super::World;
use super::net::Wire;
use super::node::SimNode;
use crate::dist::after;
use crate::dist::assembly::{Layout, TensorKey};
use crate::dist::participant::{Arrival, RunTicket};
use crate::pb;

/// A value sent and not yet acknowledged in full.
pub(crate) struct Pending {
    ticket: RunTicket,
    to: String,
    /// "output 0", "value 3", for the report.
    what: String,
    left: u32,
    since: Instant,
}

impl SimNode {
    /// A value out, as `cfg.stripes` stripes of 8 bytes (each the value).
    pub(crate) fn send_value(
        &mut self,
        w: &mut World,
        t: &RunTicket,
        role: pb::TensorRole,
        edge: u64,
        value: i64,
        to: &str,
    ) {
        if to == self.name {
            // In process, as the node's link does for itself.
            return self.route(w, to, role, t.model, t.run, edge, value);
        }
        let what = match role {
            pb::TensorRole::Output => format!("output {edge}"),
            _ => format!("value {edge}"),
        };
        if !self.believes_alive(to) {
            let why = format!("{to} is not a live member");
            return self.send_failed(w, t, to, &what, &why);
        }
        let stripes = w.cfg.stripes.max(1);
        let total = 8 * u64::from(stripes);
        let transfer = self.next_transfer;
        self.next_transfer += 1;
        for i in 0..stripes {
            let mut h = pb::TensorHeader {
                run_id: t.run,
                edge_id: edge,
                dtype: "int64".into(),
                shape: vec![u64::from(stripes)],
                payload_bytes: 8,
                model_id: t.model,
                role: role as i32,
                ..Default::default()
            };
            if stripes > 1 {
                h.stripe_offset = 8 * u64::from(i);
                h.total_bytes = total;
                h.stripes = stripes;
                h.transfer = transfer;
            }
            let bytes = value.to_le_bytes().to_vec();
            let m = Wire::Stripe {
                header: h,
                bytes,
                transfer,
            };
            w.send(&self.name, to, m);
        }
        let p = Pending {
            ticket: t.clone(),
            to: to.to_string(),
            what,
            left: stripes,
            since: w.now,
        };
        self.sends.insert(transfer, p);
    }

    fn send_failed(&mut self, w: &mut World, t: &RunTicket, to: &str, what: &str, why: &str) {
        w.note(&self.name, format!("cannot send {what} to {to}: {why}"));
        self.participant.value_send_failed(t, to, what, why, w.now);
    }

    /// The receiver's answer to one stripe of `transfer`.
    pub(crate) fn acked(&mut self, w: &mut World, transfer: u64, result: Result<(), String>) {
        let Some(p) = self.sends.get_mut(&transfer) else {
            return;
        };
        match result {
            Ok(()) => {
                p.left -= 1;
                if p.left == 0 {
                    self.sends.remove(&transfer);
                }
            }
            Err(why) => {
                let p = self.sends.remove(&transfer).expect("found above");
                self.send_failed(w, &p.ticket, &p.to, &p.what, &format!("refused: {why}"));
            }
        }
    }

    /// A run's start out to `node`, awaiting its acknowledgement.
    pub(crate) fn start_remote(&mut self, w: &mut World, node: &str, m: Wire) {
        if let Wire::Run {
            load_id, run_id, ..
        } = &m
        {
            self.starts
                .insert((*load_id, *run_id, node.to_string()), w.now);
        }
        w.send(&self.name, node, m);
    }

    /// `node` acknowledged a run's start.
    pub(crate) fn run_acked(&mut self, node: &str, load_id: u64, run_id: u64) {
        self.starts.remove(&(load_id, run_id, node.to_string()));
    }

    /// Sends to `node` fail: it is down (the tensor did not arrive).
    pub(crate) fn peer_down(&mut self, w: &mut World, node: &str) {
        let starts: Vec<(u64, u64, String)> = self
            .starts
            .keys()
            .filter(|(_, _, n)| n == node)
            .cloned()
            .collect();
        for k in starts {
            self.starts.remove(&k);
            let why = format!("{node} is dead");
            self.submitter.start_failed(k.0, k.1, node, &why, w.now);
        }
        let gone: Vec<u64> = self
            .sends
            .iter()
            .filter(|(_, p)| p.to == node)
            .map(|(&t, _)| t)
            .collect();
        for t in gone {
            let p = self.sends.remove(&t).expect("listed above");
            let why = format!("{node} is dead: the tensor did not arrive");
            self.send_failed(w, &p.ticket, &p.to, &p.what, &why);
        }
    }

    pub(crate) fn sends_timeout(&self) -> Option<Instant> {
        let limit = self.ack_timeout;
        let sends = self.sends.values().map(|p| p.since);
        sends
            .chain(self.starts.values().copied())
            .filter_map(|t| after(t, limit))
            .min()
    }

    pub(crate) fn sends_handle_timeout(&mut self, w: &mut World) {
        let limit = self.ack_timeout;
        let late: Vec<u64> = self
            .sends
            .iter()
            .filter(|(_, p)| after(p.since, limit).is_some_and(|t| t <= w.now))
            .map(|(&t, _)| t)
            .collect();
        let why = format!("no acknowledgement within {limit:?}");
        for t in late {
            let p = self.sends.remove(&t).expect("listed above");
            self.send_failed(w, &p.ticket, &p.to, &p.what, &why);
        }
        let late: Vec<(u64, u64, String)> = self
            .starts
            .iter()
            .filter(|&(_, &t)| after(t, limit).is_some_and(|t| t <= w.now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in late {
            self.starts.remove(&k);
            w.note(
                &self.name,
                format!("cannot start run {} on {}: {why}", k.1, k.2),
            );
            self.submitter.start_failed(k.0, k.1, &k.2, &why, w.now);
        }
    }

    /// One stripe arrived: refused (and the sender told why), or accepted and acknowledged;
    /// the whole value is routed when its last stripe is in. `answer`: the sender's transfer
    /// to answer (none for a copy the network made).
    pub(crate) fn stripe(
        &mut self,
        w: &mut World,
        from: &str,
        h: &pb::TensorHeader,
        bytes: &[u8],
        answer: Option<u64>,
    ) {
        let now = w.now;
        let alloc = |l: &Layout| {
            Ok((0..l.stripes)
                .map(|i| Vec::with_capacity(l.len_of(i) as usize))
                .collect())
        };
        let reply = |w: &mut World, me: &str, result: Result<(), String>| {
            if let Err(why) = &result {
                w.stats.refused.push(why.clone());
            }
            if let Some(transfer) = answer {
                w.send(me, from, Wire::StripeAck { transfer, result });
            }
        };
        let mut claim = match self.assembler.claim(from, h, now, alloc) {
            Ok(c) => c,
            Err(e) => {
                w.note(&self.name, format!("refuses a stripe from {from}: {e}"));
                reply(w, &self.name, Err(e.to_string()));
                return;
            }
        };
        if bytes.len() != claim.len {
            self.assembler.abandon(claim, "the stream ended early", now);
            reply(w, &self.name, Err("the stream ended early".into()));
            return;
        }
        claim.piece.extend_from_slice(bytes);
        let whole = match self.assembler.complete(claim, now) {
            Ok(w) => w,
            Err(e) => {
                reply(w, &self.name, Err(e.to_string()));
                return;
            }
        };
        reply(w, &self.name, Ok(()));
        let Some(whole) = whole else { return };
        let data = whole.pieces.concat();
        let copies: Vec<&[u8]> = data.chunks(8).collect();
        let Some(first) = copies.first().filter(|c| c.len() == 8) else {
            return;
        };
        assert!(
            copies.iter().all(|c| c == first),
            "a value reassembled wrong"
        );
        let value = i64::from_le_bytes((*first).try_into().expect("8 bytes"));
        let h = &whole.header;
        self.route(w, from, h.role(), h.model_id, h.run_id, h.edge_id, value);
    }

    /// A whole value arrived: an edge for a run here, or an output of a run submitted here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn route(
        &mut self,
        w: &mut World,
        from: &str,
        role: pb::TensorRole,
        model: u64,
        run: u64,
        edge: u64,
        value: i64,
    ) {
        match role {
            pb::TensorRole::Edge => match self.participant.arrive(model, run, edge, value, w.now) {
                Arrival::Delivered => {}
                Arrival::Early => w.stats.early += 1,
                Arrival::Aborted => {
                    w.stats.stragglers += 1;
                    w.note(
                        &self.name,
                        format!("drops a straggler of run {run} from {from}"),
                    );
                }
                Arrival::UnknownModel => w.stats.unknown_model += 1,
            },
            pb::TensorRole::Output => self.submitter.output(model, run, edge as usize, value),
            _ => {}
        }
    }

    /// A partial value was given up: whoever waited for it is told.
    pub(crate) fn value_lost(&mut self, w: &mut World, key: &TensorKey, why: &str) {
        let now = w.now;
        match pb::TensorRole::try_from(key.role) {
            Ok(pb::TensorRole::Edge) => {
                self.participant
                    .value_lost(key.model_id, key.run_id, &key.peer, why, now);
            }
            Ok(pb::TensorRole::Output) => {
                let index = key.edge_id as usize;
                self.submitter
                    .output_lost(key.model_id, key.run_id, index, &key.peer, why, now);
            }
            _ => {}
        }
    }
}
