//! The receiver's side of a tensor striped over several streams: which claims to accept,
//! when the tensor is whole, and when a partial one is given up.
//!
//! The machine decides; the driver owns the bytes. A tensor's buffer is made by a closure the
//! driver passes to [`Assembler::claim`] (called on a tensor's first stripe only) as one piece
//! per stripe; the machine hands each accepted stripe its piece, takes it back filled, and
//! returns all pieces in order when the last arrives, for the driver to join (with
//! `BytesMut::unsplit` the pieces of one allocation join without a copy).
//!
//! Memory is bounded by refusing inconsistent claims (a stripe past the total, a total over
//! [`MAX_TENSOR_PAYLOAD`], totals or layouts that disagree, a stripe sent twice) and by
//! dropping partial tensors whose sender went down or which made no progress for
//! [`Config::stall`](super::Config::stall).

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use crate::{MAX_TENSOR_PAYLOAD, pb};

use super::{Config, after};

/// The most stripes a receiver accepts for one tensor.
pub const MAX_STRIPES: u32 = 64;

/// How `total` bytes are cut into at most `wanted` stripes: (stripe length, stripe count).
/// Every stripe but the last is `stripe length` long, and none is empty; sender and receiver
/// both derive the layout from (total, count), so a stripe's claims can be checked.
pub fn layout(total: u64, wanted: u32) -> (u64, u32) {
    if total == 0 {
        return (0, 1);
    }
    let len = total.div_ceil(u64::from(wanted.max(1)));
    (len, total.div_ceil(len) as u32)
}

/// Which tensor a stripe belongs to. The transfer id keeps two sends of one edge apart.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TensorKey {
    pub peer: String,
    pub model_id: u64,
    pub run_id: u64,
    pub edge_id: u64,
    pub role: i32,
    pub transfer: u64,
}

/// The shape of a tensor's buffer, for the allocator: `stripes` pieces, each `stripe_len`
/// long but the last, `total` bytes in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub total: u64,
    pub stripe_len: u64,
    pub stripes: u32,
}

impl Layout {
    /// The length of stripe `index`.
    pub fn len_of(&self, index: u32) -> u64 {
        let offset = u64::from(index) * self.stripe_len;
        self.stripe_len.min(self.total.saturating_sub(offset))
    }
}

/// Why a stripe was refused (the text goes back to the sender in an `ErrorReply`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StripeError {
    #[error("a tensor of {0} bytes is over the {MAX_TENSOR_PAYLOAD}-byte limit")]
    TooLarge(u64),
    #[error("{0} stripes (at most {MAX_STRIPES})")]
    StripeCount(u32),
    #[error("{total} bytes cannot be cut into {stripes} stripes")]
    Layout { total: u64, stripes: u32 },
    #[error("a stripe of {len} bytes at offset {offset} runs past the tensor's {total} bytes")]
    PastEnd { len: u64, offset: u64, total: u64 },
    #[error(
        "a stripe of {len} bytes at offset {offset} is not one of {stripes} stripes of {total} bytes"
    )]
    NotAStripe {
        len: u64,
        offset: u64,
        stripes: u32,
        total: u64,
    },
    #[error("its tensor was already dropped")]
    AlreadyDropped,
    /// Boxed: the claims are large, and a refusal is rare while a `Result` of this error is
    /// returned for every stripe.
    #[error("{0}")]
    Disagrees(Box<Disagreement>),
    #[error("stripe {index} of {stripes} arrived twice")]
    Twice { index: usize, stripes: u32 },
    #[error("{0}")]
    Alloc(String),
    #[error("its tensor was dropped while the stripe arrived")]
    DroppedMeanwhile,
}

/// A stripe's claims that contradict those of its tensor's first stripe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a stripe claims {total} bytes in {stripes} stripes ({dtype} {shape:?}), its tensor {was_total} bytes in {was_stripes} ({was_dtype} {was_shape:?})"
)]
pub struct Disagreement {
    pub total: u64,
    pub stripes: u32,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub was_total: u64,
    pub was_stripes: usize,
    pub was_dtype: String,
    pub was_shape: Vec<u64>,
}

/// A stripe accepted for reading: its piece of the buffer (to fill with exactly `len` bytes),
/// and where to return it ([`Assembler::complete`] or [`Assembler::abandon`]).
#[derive(Debug)]
pub struct Claim<P> {
    pub key: TensorKey,
    /// Tells a stripe finishing late that its assembly was dropped (and maybe replaced).
    id: u64,
    pub index: usize,
    pub len: usize,
    pub piece: P,
}

/// A tensor whose last stripe arrived: the sender's header with the striping fields cleared
/// (`payload_bytes` = the whole payload), and the pieces in order.
#[derive(Debug)]
pub struct Whole<P> {
    pub key: TensorKey,
    pub header: pb::TensorHeader,
    pub pieces: Vec<P>,
}

/// What the driver should know: a partial tensor was given up (for its log; the pieces are
/// dropped with the machine's entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssemblyAction {
    Dropped {
        key: TensorKey,
        why: String,
        done: usize,
        stripes: usize,
    },
}

enum Piece<P> {
    /// Not yet claimed: capacity for the stripe, empty.
    Free(P),
    /// A stream is filling it.
    Reading,
    Done(P),
}

/// A tensor whose stripes are arriving.
struct Assembly<P> {
    id: u64,
    header: pb::TensorHeader,
    total: u64,
    pieces: Vec<Piece<P>>,
    done: usize,
    /// Stripes being read now: each is bounded by its own read timeout in the driver, so an
    /// assembly with one is never swept.
    active: usize,
    last_progress: Instant,
}

/// The partial tensors of one node, from every peer.
pub struct Assembler<P> {
    config: Config,
    next_id: u64,
    assemblies: BTreeMap<TensorKey, Assembly<P>>,
    /// Tensors dropped recently, and when: their late stripes are refused instead of starting
    /// a new buffer that could never complete.
    dropped: BTreeMap<TensorKey, Instant>,
    actions: VecDeque<AssemblyAction>,
}

/// (offset, total, stripes) a header claims, a whole tensor being one stripe.
fn claimed(h: &pb::TensorHeader) -> (u64, u64, u32) {
    if h.stripes == 0 && h.total_bytes == 0 && h.stripe_offset == 0 {
        (0, h.payload_bytes, 1)
    } else {
        (h.stripe_offset, h.total_bytes, h.stripes)
    }
}

/// The stripe's index in its tensor's layout, or why its claims do not hold.
fn check(h: &pb::TensorHeader) -> Result<(Layout, usize), StripeError> {
    let (offset, total, stripes) = claimed(h);
    if total > MAX_TENSOR_PAYLOAD {
        return Err(StripeError::TooLarge(total));
    }
    if stripes == 0 || stripes > MAX_STRIPES {
        return Err(StripeError::StripeCount(stripes));
    }
    let (len, count) = layout(total, stripes);
    if count != stripes {
        return Err(StripeError::Layout { total, stripes });
    }
    let past = StripeError::PastEnd {
        len: h.payload_bytes,
        offset,
        total,
    };
    if offset
        .checked_add(h.payload_bytes)
        .is_none_or(|end| end > total)
    {
        return Err(past);
    }
    let index = offset.checked_div(len).unwrap_or(0);
    if index * len != offset || h.payload_bytes != len.min(total - offset) {
        return Err(StripeError::NotAStripe {
            len: h.payload_bytes,
            offset,
            stripes,
            total,
        });
    }
    let l = Layout {
        total,
        stripe_len: len,
        stripes,
    };
    Ok((l, index as usize))
}

impl<P> Assembler<P> {
    pub fn new(config: Config) -> Assembler<P> {
        Assembler {
            config,
            next_id: 1,
            assemblies: BTreeMap::new(),
            dropped: BTreeMap::new(),
            actions: VecDeque::new(),
        }
    }

    /// Checks a stripe's claims and hands it its piece of the tensor's buffer. `alloc` makes
    /// the buffer on the tensor's first stripe, as `layout.stripes` pieces; it fails (rather
    /// than aborting) when memory is short.
    pub fn claim(
        &mut self,
        from: &str,
        h: &pb::TensorHeader,
        now: Instant,
        alloc: impl FnOnce(&Layout) -> Result<Vec<P>, String>,
    ) -> Result<Claim<P>, StripeError> {
        let (l, index) = check(h)?;
        let key = TensorKey {
            peer: from.to_string(),
            model_id: h.model_id,
            run_id: h.run_id,
            edge_id: h.edge_id,
            role: h.role,
            transfer: h.transfer,
        };
        if self.dropped.contains_key(&key) {
            return Err(StripeError::AlreadyDropped);
        }
        if !self.assemblies.contains_key(&key) {
            let pieces = alloc(&l).map_err(StripeError::Alloc)?;
            if pieces.len() != l.stripes as usize {
                return Err(StripeError::Alloc(format!(
                    "the buffer came in {} pieces, not {}",
                    pieces.len(),
                    l.stripes
                )));
            }
            let a = Assembly {
                id: self.next_id,
                header: h.clone(),
                total: l.total,
                pieces: pieces.into_iter().map(Piece::Free).collect(),
                done: 0,
                active: 0,
                last_progress: now,
            };
            self.next_id += 1;
            self.assemblies.insert(key.clone(), a);
        }
        let a = self.assemblies.get_mut(&key).expect("inserted above");
        if a.total != l.total
            || a.pieces.len() != l.stripes as usize
            || a.header.dtype != h.dtype
            || a.header.shape != h.shape
        {
            return Err(StripeError::Disagrees(Box::new(Disagreement {
                total: l.total,
                stripes: l.stripes,
                dtype: h.dtype.clone(),
                shape: h.shape.clone(),
                was_total: a.total,
                was_stripes: a.pieces.len(),
                was_dtype: a.header.dtype.clone(),
                was_shape: a.header.shape.clone(),
            })));
        }
        let piece = match std::mem::replace(&mut a.pieces[index], Piece::Reading) {
            Piece::Free(p) => p,
            other => {
                a.pieces[index] = other;
                return Err(StripeError::Twice {
                    index,
                    stripes: l.stripes,
                });
            }
        };
        a.active += 1;
        a.last_progress = now;
        Ok(Claim {
            key,
            id: a.id,
            index,
            len: l.len_of(index as u32) as usize,
            piece,
        })
    }

    /// Takes back a stripe's filled piece; the whole tensor when it was the last.
    pub fn complete(
        &mut self,
        claim: Claim<P>,
        now: Instant,
    ) -> Result<Option<Whole<P>>, StripeError> {
        let a = match self.assemblies.get_mut(&claim.key) {
            Some(a) if a.id == claim.id => a,
            _ => return Err(StripeError::DroppedMeanwhile),
        };
        a.pieces[claim.index] = Piece::Done(claim.piece);
        a.done += 1;
        a.active -= 1;
        a.last_progress = now;
        if a.done < a.pieces.len() {
            return Ok(None);
        }
        let a = self.assemblies.remove(&claim.key).expect("found above");
        let pieces = a
            .pieces
            .into_iter()
            .filter_map(|p| match p {
                Piece::Done(p) => Some(p),
                Piece::Free(_) | Piece::Reading => None,
            })
            .collect();
        let mut header = a.header;
        header.payload_bytes = a.total;
        header.stripe_offset = 0;
        header.total_bytes = 0;
        header.stripes = 0;
        header.transfer = 0;
        Ok(Some(Whole {
            key: claim.key,
            header,
            pieces,
        }))
    }

    /// A stripe failed (its stream broke or timed out): its tensor can no longer complete.
    /// Returns the piece, for the driver's buffer pool.
    pub fn abandon(&mut self, claim: Claim<P>, why: &str, now: Instant) -> P {
        if let Some(a) = self.assemblies.get(&claim.key)
            && a.id == claim.id
        {
            let (done, stripes) = (a.done, a.pieces.len());
            self.assemblies.remove(&claim.key);
            self.dropped.insert(claim.key.clone(), now);
            self.actions.push_back(AssemblyAction::Dropped {
                key: claim.key,
                why: why.to_string(),
                done,
                stripes,
            });
        }
        claim.piece
    }

    /// Drops the partial tensors from `peer` (it went down). Their late stripes are refused,
    /// as after a stall: a peer declared dead falsely may still send some, which would start
    /// a tensor that can never complete.
    pub fn peer_down(&mut self, peer: &str, state: &str, now: Instant) {
        let gone: Vec<TensorKey> = self
            .assemblies
            .keys()
            .filter(|k| k.peer == peer)
            .cloned()
            .collect();
        for key in gone {
            let a = self.assemblies.remove(&key).expect("listed above");
            self.dropped.insert(key.clone(), now);
            self.actions.push_back(AssemblyAction::Dropped {
                key,
                why: format!("{peer} is {state}"),
                done: a.done,
                stripes: a.pieces.len(),
            });
        }
    }

    /// When the next partial tensor stalls or the next dropped one is forgotten.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let stall = self.config.stall;
        let stalls = self
            .assemblies
            .values()
            .filter(|a| a.active == 0)
            .filter_map(|a| after(a.last_progress, stall));
        let forgets = self.dropped.values().filter_map(|&t| after(t, stall));
        stalls.chain(forgets).min()
    }

    /// Drops partial tensors that no stripe is filling and that made no progress for the
    /// stall time, and forgets tensors dropped that long ago.
    pub fn handle_timeout(&mut self, now: Instant) {
        let stall = self.config.stall;
        let old = |t: Instant| now.saturating_duration_since(t) >= stall;
        self.dropped.retain(|_, &mut at| !old(at));
        let gone: Vec<TensorKey> = self
            .assemblies
            .iter()
            .filter(|(_, a)| a.active == 0 && old(a.last_progress))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            let a = self.assemblies.remove(&key).expect("listed above");
            self.actions.push_back(AssemblyAction::Dropped {
                key: key.clone(),
                why: format!("none for {stall:?}"),
                done: a.done,
                stripes: a.pieces.len(),
            });
            self.dropped.insert(key, now);
        }
    }

    pub fn poll_action(&mut self) -> Option<AssemblyAction> {
        self.actions.pop_front()
    }

    /// Partial tensors held now.
    pub fn partial(&self) -> usize {
        self.assemblies.len()
    }
}
