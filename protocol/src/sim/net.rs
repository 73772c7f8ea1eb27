//! The simulated network: a seeded PRNG, the messages between nodes, fault rules, and the
//! queue of timed events every node's work goes through.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::{Message, pb};

/// splitmix64: tiny, fast, and the same sequence on every platform for a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A duration in [0, max].
    pub fn upto(&mut self, max: Duration) -> Duration {
        let n = max.as_nanos() as u64;
        if n == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next_u64() % (n + 1))
    }
}

/// What travels between simulated nodes.
#[derive(Debug, Clone)]
pub enum Wire {
    /// A fragment: the plan's chain of nodes (the simulated executable), who submitted it
    /// and the lives of the nodes.
    Fragment {
        load_id: u64,
        info: crate::dist::participant::FragmentInfo,
        order: Vec<String>,
    },
    LoadAck {
        load_id: u64,
        result: Result<(), String>,
    },
    Run {
        load_id: u64,
        run_id: u64,
        inputs: Vec<(usize, i64)>,
    },
    /// `Unload` or `RunFailed`.
    Control(Message),
    /// One stripe of a value (an edge or an output), its bytes inline; `transfer` is the
    /// sender's handle for the acknowledgement (a stream of its own, on a real node).
    Stripe {
        header: pb::TensorHeader,
        bytes: Vec<u8>,
        transfer: u64,
    },
    /// The receiver got a `Run` (its stream's data acknowledged).
    RunAck { load_id: u64, run_id: u64 },
    /// The receiver's answer to one stripe: read in full, or refused with the reason.
    StripeAck {
        transfer: u64,
        result: Result<(), String>,
    },
}

/// Message classes that fault rules select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MsgKind {
    Load,
    Run,
    Control,
    Stripe,
    Ack,
}

impl Wire {
    pub fn kind(&self) -> MsgKind {
        match self {
            Wire::Fragment { .. } | Wire::LoadAck { .. } => MsgKind::Load,
            Wire::Run { .. } => MsgKind::Run,
            Wire::Control(_) => MsgKind::Control,
            Wire::Stripe { .. } => MsgKind::Stripe,
            Wire::StripeAck { .. } | Wire::RunAck { .. } => MsgKind::Ack,
        }
    }

    /// The stripe's index in its tensor, for rules that pick one stripe.
    pub fn stripe_index(&self) -> Option<u64> {
        match self {
            Wire::Stripe { header: h, .. } if h.stripes > 0 => {
                let (len, _) = crate::dist::assembly::layout(h.total_bytes, h.stripes);
                h.stripe_offset.checked_div(len)
            }
            Wire::Stripe { .. } => Some(0),
            _ => None,
        }
    }
}

/// Random faults on every link (applied to the kinds listed; delay to all messages).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkFaults {
    /// Every message takes at least this long...
    pub delay: Duration,
    /// ...plus a uniform random part up to this, which reorders messages.
    pub jitter: Duration,
    pub drop: f64,
    pub duplicate: f64,
    pub kinds: Vec<MsgKind>,
}

impl Default for LinkFaults {
    fn default() -> LinkFaults {
        LinkFaults {
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            drop: 0.0,
            duplicate: 0.0,
            kinds: vec![
                MsgKind::Load,
                MsgKind::Run,
                MsgKind::Control,
                MsgKind::Stripe,
                MsgKind::Ack,
            ],
        }
    }
}

/// What a rule does to the messages it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Drop,
    /// Sent twice.
    Duplicate,
    /// Held this much longer.
    Delay(Duration),
}

/// A deterministic fault: messages sent in [start, end) that match all given fields.
/// A partition is a `Drop` rule (one per direction).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub from: Option<String>,
    pub to: Option<String>,
    pub kind: Option<MsgKind>,
    /// Only this stripe of each striped value.
    pub stripe: Option<u64>,
    pub start: Duration,
    pub end: Duration,
    pub effect: Effect,
}

impl Rule {
    /// Every message in the window.
    pub fn new(effect: Effect, start: Duration, end: Duration) -> Rule {
        Rule {
            from: None,
            to: None,
            kind: None,
            stripe: None,
            start,
            end,
            effect,
        }
    }

    pub fn between(mut self, from: &str, to: &str) -> Rule {
        self.from = Some(from.to_string());
        self.to = Some(to.to_string());
        self
    }

    pub fn kind(mut self, kind: MsgKind) -> Rule {
        self.kind = Some(kind);
        self
    }

    pub fn stripe(mut self, index: u64) -> Rule {
        self.kind = Some(MsgKind::Stripe);
        self.stripe = Some(index);
        self
    }

    pub fn matches(&self, from: &str, to: &str, m: &Wire, since_epoch: Duration) -> bool {
        (self.start..self.end).contains(&since_epoch)
            && self.from.as_deref().is_none_or(|f| f == from)
            && self.to.as_deref().is_none_or(|t| t == to)
            && self.kind.is_none_or(|k| k == m.kind())
            && self.stripe.is_none_or(|s| m.stripe_index() == Some(s))
    }
}

/// Something that happens at a simulated time.
#[derive(Debug)]
pub enum Ev {
    Deliver {
        from: String,
        to: String,
        /// The receiver's incarnation when it was sent: a node that restarted since never
        /// gets it (its connection is gone).
        generation: u64,
        msg: Wire,
        /// The message's id: every copy of it has the same.
        id: u64,
        /// Set on delivery: a copy the network made of a message delivered already. Nobody
        /// waits for its answer (a real node's stream data is never duplicated: copies only
        /// exercise the receiver's checks).
        copy: bool,
    },
    /// A participant's executable finished computing its value.
    ExecDone {
        node: String,
        generation: u64,
        load_id: u64,
        run_id: u64,
    },
    /// A participant finished building a fragment's executable.
    LoadDone {
        node: String,
        generation: u64,
        load_id: u64,
        submitter: String,
        info: Box<(crate::dist::participant::FragmentInfo, Vec<String>)>,
        ticket: crate::dist::participant::LoadTicket,
    },
    Submit {
        node: String,
        model: u64,
    },
    ClientRun {
        client: usize,
    },
    ClientUnload {
        node: String,
        model: u64,
    },
    /// The client connection that owns `owner`'s models is gone.
    Disconnect {
        node: String,
        owner: u64,
    },
    Die {
        node: String,
    },
    Revive {
        node: String,
    },
    /// `observer`'s membership says life `generation` of `node` is down (or up).
    Verdict {
        observer: String,
        node: String,
        generation: u64,
        down: bool,
    },
    /// `node` learns it was declared dead: it renews its life, and the others see the new
    /// one come up.
    Rejoin {
        node: String,
    },
}

pub struct Queued {
    pub at: Instant,
    pub seq: u64,
    pub ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Queued) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Queued) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Queued {
    /// Reversed: the heap's top is the earliest event, ties in the order they were queued.
    fn cmp(&self, o: &Queued) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

pub type Queue = BinaryHeap<Queued>;
