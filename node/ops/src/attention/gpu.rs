//! The GPU dispatches of a [`Plan`]: its packs (attention_pack.comp), the fused attention
//! (attention.comp) and, when the key range is split, the merge (attention_combine.comp).

use super::core::QkMode;
use super::core::{Buf, MaskKind, Offset, Pack, Plan};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{attention, attention_combine, attention_pack, attention_qk};

/// attention.comp's shared memory, in floats: query rows, key tile, value tile.
const QS: usize = 2048;
const KV: usize = 2560;
/// Largest head size: attention.comp keeps 16 accumulators per thread, 16 or more threads
/// per row.
pub const MAX_HEAD: usize = 256;
/// Fewer workgroups than this leave a large GPU idle: split the keys.
const FILL: usize = 256;

fn buf(b: Buf) -> BufRef {
    match b {
        Buf::Input(i) => BufRef::Input(i),
        Buf::Output(i) => BufRef::Output(i),
        Buf::Scratch(i) => BufRef::Scratch(i),
    }
}

fn u(x: usize) -> Option<u32> {
    u32::try_from(x).ok()
}

/// Rows per workgroup and keys per tile for a plan.
pub fn tiles(p: &Plan) -> (usize, usize) {
    let rows = p.group() * p.q_len;
    let mut bq = rows.next_power_of_two().clamp(1, 16);
    while bq * p.head_dim > QS {
        bq /= 2;
    }
    // Key rows are head_dim + 1 apart in shared memory (no bank conflicts).
    let bk = (256 / bq)
        .min(KV / (p.head_dim + 1).max(p.v_head_dim).max(1))
        .min(64);
    // A few rows over a short cache (a decode step early in a sequence): shorter tiles, so
    // that the keys cut into enough slices to fill the GPU (`splits` keeps a slice at least a
    // tile long). At 192 keys a Llama-1B step had 8 workgroups of 4 rows, 3 slices of 64.
    let wgs = p.batch * p.kv_heads * rows.div_ceil(bq);
    let bk = bk.min((p.kv_len * wgs / FILL).max(MIN_SPLIT_TILE));
    (bq, bk)
}

/// The shortest key tile a decode step's slices are cut to.
const MIN_SPLIT_TILE: usize = 16;

/// How many slices the key range is cut into (flash-decoding), from the shapes only: enough
/// workgroups to fill a large GPU, each slice at least one tile long. A decode step's few
/// workgroups (one per KV head) walk their tiles one after the other, each tile a chain of
/// loads and barriers: with slices of four tiles, a Llama-1B step at 128 tokens of context ran
/// 8 workgroups of 5 tiles each.
pub fn splits(workgroups: usize, kv_len: usize, bk: usize) -> usize {
    if workgroups >= FILL / 2 {
        return 1;
    }
    FILL.div_ceil(workgroups.max(1))
        .min(kv_len / bk)
        .clamp(1, 64)
}

/// The kernel of `p`, or `None` when it needs what the shaders lack (then the op runs on the
/// CPU). `force_splits` overrides [`splits`] (tests of the merge on small shapes).
pub fn kernel(p: &Plan, force_splits: Option<usize>) -> Option<GpuKernel> {
    let variant = by_dtype!(p.dtype, attention::Variant, [F32, F16])?;
    if p.head_dim > MAX_HEAD || p.v_head_dim > MAX_HEAD || p.masks.len() > 1 {
        return None;
    }
    let esize = p.dtype.size() as u64;
    let mut scratch: Vec<u64> = p.scratch.iter().map(|&n| n as u64 * esize).collect();
    let mut dispatches = Vec::new();
    for pack in &p.packs {
        dispatches.push(pack_dispatch(p, pack)?);
    }
    let (bq, bk) = tiles(p);
    let rows = p.group() * p.q_len;
    let blocks = rows.div_ceil(bq);
    let wgs = p.batch * p.kv_heads * blocks;
    let n = force_splits
        .unwrap_or_else(|| splits(wgs, p.kv_len, bk))
        .max(1);
    let split_len = p.kv_len.div_ceil(n).div_ceil(bk).max(1) * bk;
    let nsplit = p.kv_len.div_ceil(split_len).max(1);
    let total_rows = p.batch * p.q_heads * p.q_len;
    let y_len = total_rows * p.v_head_dim;
    if y_len == 0 {
        if p.qk.is_some() && p.kv_len > 0 && total_rows > 0 {
            return None;
        }
        return Some(GpuKernel {
            scratch,
            dispatches,
        });
    }
    let acc_at = 2 * total_rows * nsplit;
    u(acc_at + total_rows * nsplit * p.v_head_dim)?;
    let table = attend_table(p, (bq, bk), nsplit, split_len, acc_at)?;
    let part = if nsplit > 1 {
        scratch.push(4 * (acc_at + total_rows * nsplit * p.v_head_dim) as u64);
        BufRef::Scratch(scratch.len() - 1)
    } else {
        buf(p.y.buf)
    };
    let gx = u(blocks * nsplit).filter(|&g| g <= 65_535)?;
    let gz = u(p.batch).filter(|&g| g <= 65_535)?;
    let stand_in = buf(p.q.buf);
    dispatches.push(Dispatch::new(
        variant,
        attention::Buffers {
            q: buf(p.q.buf),
            k: buf(p.k.buf),
            v: buf(p.v.buf),
            mask: p
                .masks
                .first()
                .map_or(stand_in.clone(), |m| BufRef::Input(m.input)),
            lens: p.lens.map_or(stand_in.clone(), |l| BufRef::Input(l.input)),
            t: BufRef::Table(table.clone()),
            y: buf(p.y.buf),
            part: part.clone(),
        },
        attention::Params {
            nsplit: nsplit as u32,
        },
        [gx, u(p.kv_heads)?, gz],
    ));
    if let Some(qk) = p.qk {
        dispatches.push(qk_dispatch(p, qk, &table)?);
    }
    if nsplit > 1 {
        let combine = by_dtype!(p.dtype, attention_combine::Variant, [F32, F16])?;
        dispatches.push(Dispatch::new(
            combine,
            attention_combine::Buffers {
                part,
                t: BufRef::Table(table),
                y: buf(p.y.buf),
            },
            attention_combine::Params {
                n: u(y_len)?,
                nsplit: nsplit as u32,
            },
            groups_1d(y_len, 256),
        ));
    }
    Some(GpuKernel {
        scratch,
        dispatches,
    })
}

/// The qk output (attention_qk.comp): one workgroup per query row.
fn qk_dispatch(p: &Plan, (out, mode): (usize, QkMode), table: &[u32]) -> Option<Dispatch> {
    let variant = by_dtype!(p.dtype, attention_qk::Variant, [F32, F16])?;
    let stand_in = buf(p.q.buf);
    let grid = |n: usize| u(n).filter(|&g| g <= 65_535);
    Some(Dispatch::new(
        variant,
        attention_qk::Buffers {
            q: buf(p.q.buf),
            k: buf(p.k.buf),
            mask: p
                .masks
                .first()
                .map_or(stand_in.clone(), |m| BufRef::Input(m.input)),
            lens: p.lens.map_or(stand_in, |l| BufRef::Input(l.input)),
            t: BufRef::Table(table.to_vec()),
            qk: BufRef::Output(out),
        },
        attention_qk::Params {
            mode: match mode {
                QkMode::Raw => 0,
                QkMode::Softcapped => 1,
                QkMode::Biased => 2,
                QkMode::Probs => 3,
            },
        },
        [grid(p.q_len)?, grid(p.q_heads)?, grid(p.batch)?],
    ))
}

/// attention.comp's table (the words its header lists).
fn attend_table(
    p: &Plan,
    (bq, bk): (usize, usize),
    nsplit: usize,
    split_len: usize,
    acc_at: usize,
) -> Option<Vec<u32>> {
    let mask = p.masks.first();
    let mut flags = u32::from(p.causal)
        | u32::from(p.window.is_some()) << 1
        | u32::from(mask.is_some()) << 2
        | u32::from(p.lens.is_some()) << 3
        | u32::from(p.lens.is_some_and(|l| l.exclude)) << 4
        | u32::from(p.offset == Offset::FromLens) << 5
        | u32::from(p.softcap > 0.0) << 6;
    flags |= match mask.map(|m| m.kind) {
        Some(MaskKind::Bool) => 1 << 8,
        Some(MaskKind::Keep) => 2 << 8,
        _ => 0,
    };
    let fixed = match p.offset {
        Offset::Fixed(o) => o,
        Offset::FromLens => 0,
    };
    let ms = mask.map_or([0; 4], |m| m.strides);
    let words = [
        p.q_len,
        p.kv_len,
        p.head_dim,
        p.v_head_dim,
        p.group(),
        p.q_heads,
        p.q.off,
        p.q.sb,
        p.q.sh,
        p.q.ss,
        p.k.off,
        p.k.sb,
        p.k.sh,
        p.k.ss,
        p.v.off,
        p.v.sb,
        p.v.sh,
        p.v.ss,
        p.y.sb,
        p.y.sh,
        p.y.ss,
    ];
    let mut t: Vec<u32> = words.iter().map(|&w| u(w)).collect::<Option<_>>()?;
    t.extend([
        p.scale.to_bits(),
        p.softcap.to_bits(),
        p.filter.to_bits(),
        flags,
    ]);
    t.push(u(p.window.unwrap_or(0))?);
    t.push(u(fixed)?);
    t.push(i32::try_from(p.lens.map_or(0, |l| l.plus)).ok()? as u32);
    for w in ms.into_iter().chain([
        mask.map_or(0, |m| m.cols),
        bq,
        bk,
        nsplit,
        split_len,
        p.group() * p.q_len,
    ]) {
        t.push(u(w)?);
    }
    t.push(if p.lens.is_some_and(|l| l.int64) {
        2
    } else {
        1
    });
    t.push(u(acc_at)?);
    Some(t)
}

fn pack_dispatch(p: &Plan, k: &Pack) -> Option<Dispatch> {
    let variant = by_dtype!(p.dtype, attention_pack::Variant, [F32, F16])?;
    let n = p.batch * k.heads * k.len * k.dim;
    let rot = k.rotary;
    let flags = u32::from(k.past.is_some())
        | u32::from(k.into_past) << 1
        | u32::from(k.bias.is_some()) << 2
        | u32::from(rot.is_some()) << 3
        | u32::from(rot.is_some_and(|r| r.interleaved)) << 4
        | u32::from(p.offset == Offset::FromLens) << 5;
    let fixed = match p.offset {
        Offset::Fixed(o) => o,
        Offset::FromLens => 0,
    };
    let words = [
        p.batch,
        k.heads,
        k.len,
        k.dim,
        k.rows,
        k.past_len,
        flags as usize,
        rot.map_or(0, |r| r.half),
        k.src.off,
        k.src.sb,
        k.src.sh,
        k.src.ss,
        k.bias.map_or(0, |b| b.1),
        fixed,
        if p.lens.is_some_and(|l| l.int64) {
            2
        } else {
            1
        },
    ];
    let mut table: Vec<u32> = words.iter().map(|&w| u(w)).collect::<Option<_>>()?;
    table.push(i32::try_from(p.lens.map_or(0, |l| l.plus)).ok()? as u32);
    table.push(u(rot.map_or(1, |r| r.positions.max(1)))?);
    let src = buf(k.src.buf);
    let input = |i: Option<usize>| i.map_or(src.clone(), BufRef::Input);
    Some(Dispatch::new(
        variant,
        attention_pack::Buffers {
            src: src.clone(),
            past: input(k.past),
            bias: input(k.bias.map(|b| b.0)),
            cosc: input(rot.map(|r| r.cos)),
            sinc: input(rot.map(|r| r.sin)),
            lens: input(p.lens.map(|l| l.input)),
            t: BufRef::Table(table),
            dst: buf(k.dst),
        },
        attention_pack::Params {
            n: u(n)?,
            fresh: u(p.batch * k.heads * k.rows * k.dim)?,
        },
        groups_1d(n, 256),
    ))
}
