#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#extension GL_EXT_shader_8bit_storage : require

// Fused attention (ops/attention/): y = softmax(softcap(scale * q k^T) + bias) v for every
// (batch, query head, query row), with the score matrix never in memory. One workgroup
// takes `bq` rows of one (batch, kv head): the rows of all the query heads sharing that kv
// head (GQA), row r being query head kvh * group + r / rows and query row r % rows, so the
// kv tiles it stages in shared memory serve the whole group. It walks `bk`-key tiles with an
// online softmax (running maximum and sum per row, in float), skipping tiles that the causal
// limit, the local window or the valid length mask out entirely. A workgroup of split `sp`
// only walks its `split_len` keys and writes its partial (maximum, sum, accumulator) to
// `part`; attention_combine.comp then merges the splits (flash-decoding: one query row over a
// long cache still fills the GPU).
// Which keys a row sees: pos = s + offset_b (offset: the past length, fixed or from the
// lengths input); j < valid_b (from the lengths, when they exclude), j <= pos (causal),
// j > pos - window (local window). The bias adds the mask (float; bool false = -inf;
// int 0 = filter value) and `filter` past the length when the lengths do not exclude. A row
// with no key left is zero.
// Table words: see ops/attention/gpu.rs (`attend_table`).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Ints { int v[]; };
layout(buffer_reference, scalar) readonly buffer MaskT { T v[]; };
layout(buffer_reference, scalar) readonly buffer MaskB { uint8_t v[]; };
layout(buffer_reference, scalar) writeonly buffer Part { float v[]; };
layout(push_constant, scalar) uniform P {
    In q;
    In k;
    In v;
    Words mask;
    Ints lens;
    Words t;
    Out y;
    Part part;
    uint nsplit;
} p;

const uint WG = 256u;
const uint QS = 2048u;
const uint KS = 2560u;
const uint VS = 2560u;
const uint ACC = 16u;
shared float qs[QS];
shared float ks[KS];
shared float vs[VS];
shared float ps[WG];

const float NEG_INF = uintBitsToFloat(0xff800000u);

// Flags of table word 24.
const uint F_CAUSAL = 1u;
const uint F_WINDOW = 2u;
const uint F_MASK = 4u;
const uint F_LENS = 8u;
const uint F_EXCLUDE = 16u;
const uint F_OFFSET_LENS = 32u;
const uint F_SOFTCAP = 64u;
// Mask kind, bits 8-9: 0 float, 1 bool, 2 int keep (0 adds the filter value).

float safe_tanh(float x) {
    float e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

uint tw(uint i) { return p.t.v[i]; }

float mask_at(uint idx, uint kind) {
    if (kind == 0u) return float(MaskT(p.mask).v[idx]);
    if (kind == 1u) return MaskB(p.mask).v[idx] != uint8_t(0) ? 0.0 : NEG_INF;
    return Ints(p.mask).v[idx] != 0 ? 0.0 : uintBitsToFloat(tw(23u));
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint S = tw(0u), T_ = tw(1u), D = tw(2u), DV = tw(3u), G = tw(4u);
    uint flags = tw(24u);
    uint BQ = tw(33u), BK = tw(34u), split_len = tw(36u), R = tw(37u);
    uint kvh = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint rb = gl_WorkGroupID.x / p.nsplit;
    uint sp = gl_WorkGroupID.x % p.nsplit;
    uint row0 = rb * BQ;
    // Uniform over the workgroup, so every barrier below is reached by all or none.
    if (row0 >= R) return;
    uint row_end = min(row0 + BQ, R);

    int offset = int(tw(26u));
    int valid = int(T_);
    int len_b = int(T_);
    if ((flags & F_LENS) != 0u) {
        len_b = p.lens.v[b * tw(38u)] + int(tw(27u));
        if ((flags & F_EXCLUDE) != 0u) valid = clamp(len_b, 0, int(T_));
        if ((flags & F_OFFSET_LENS) != 0u) offset = len_b - int(S);
    }
    // Keys any row of the block may see.
    bool wraps = (row_end - 1u) / S != row0 / S;
    int smin = wraps ? 0 : int(row0 % S);
    int smax = wraps ? int(S) - 1 : int((row_end - 1u) % S);
    int hi = valid;
    if ((flags & F_CAUSAL) != 0u) hi = min(hi, smax + offset + 1);
    int lo = 0;
    if ((flags & F_WINDOW) != 0u) lo = max(0, smin + offset + 1 - int(tw(25u)));
    lo = max(lo, int(sp * split_len));
    hi = min(hi, int((sp + 1u) * split_len));

    float scale = uintBitsToFloat(tw(21u));
    float softcap = uintBitsToFloat(tw(22u));
    uint kind = (flags >> 8u) & 3u;

    // Query rows, scaled, into shared memory.
    for (uint i = tid; i < BQ * D; i += WG) {
        uint r = row0 + i / D;
        float x = 0.0;
        if (r < R) {
            uint hq = kvh * G + r / S;
            uint at = tw(6u) + b * tw(7u) + hq * tw(8u) + (r % S) * tw(9u) + i % D;
            x = float(p.q.v[at]) * scale;
        }
        qs[i] = x;
    }

    // This thread's row for the softmax and the accumulator: tpr threads per row, each
    // holding the dims c, c + tpr, ...
    uint tpr = WG / BQ;
    uint rl = tid / tpr;
    uint c = tid % tpr;
    float m = NEG_INF;
    float l = 0.0;
    float acc[ACC];
    for (uint i = 0u; i < ACC; ++i) acc[i] = 0.0;

    uint kbase = tw(10u) + b * tw(11u) + kvh * tw(12u);
    uint vbase = tw(14u) + b * tw(15u) + kvh * tw(16u);
    for (int j0 = lo; j0 < hi; j0 += int(BK)) {
        uint nk = uint(min(int(BK), hi - j0));
        barrier();
        // Key rows D + 1 apart in shared memory: the score threads of a warp read one
        // element of consecutive keys, which D apart would all fall in one bank.
        for (uint i = tid; i < nk * D; i += WG) {
            ks[(i / D) * (D + 1u) + i % D] = float(p.k.v[kbase + (uint(j0) + i / D) * tw(13u) + i % D]);
        }
        for (uint i = tid; i < nk * DV; i += WG) {
            vs[i] = float(p.v.v[vbase + (uint(j0) + i / DV) * tw(17u) + i % DV]);
        }
        barrier();
        // Scores: one thread per (row, key) of the tile.
        if (tid < BQ * BK) {
            uint srl = tid / BK;
            uint jl = tid % BK;
            uint r = row0 + srl;
            int j = j0 + int(jl);
            float sc = NEG_INF;
            if (r < R && jl < nk) {
                uint s = r % S;
                int pos = int(s) + offset;
                bool seen = j < valid;
                if ((flags & F_CAUSAL) != 0u) seen = seen && j <= pos;
                if ((flags & F_WINDOW) != 0u) seen = seen && j > pos - int(tw(25u));
                if (seen) {
                    float dot = 0.0;
                    for (uint d = 0u; d < D; ++d) dot += qs[srl * D + d] * ks[jl * (D + 1u) + d];
                    if ((flags & F_SOFTCAP) != 0u) dot = softcap * safe_tanh(dot / softcap);
                    if ((flags & F_LENS) != 0u && (flags & F_EXCLUDE) == 0u && j >= len_b) {
                        dot += uintBitsToFloat(tw(23u));
                    }
                    if ((flags & F_MASK) != 0u) {
                        uint hq = kvh * G + r / S;
                        if (uint(j) < tw(32u)) {
                            uint at = b * tw(28u) + hq * tw(29u) + s * tw(30u) + uint(j) * tw(31u);
                            dot += mask_at(at, kind);
                        } else {
                            dot = NEG_INF;
                        }
                    }
                    sc = dot;
                }
            }
            ps[srl * BK + jl] = sc;
        }
        barrier();
        // Online softmax: every thread of a row repeats the row's tile maximum and sum (the
        // same float operations, so the same values), then updates its own dims.
        float mt = NEG_INF;
        for (uint jl = 0u; jl < nk; ++jl) mt = max(mt, ps[rl * BK + jl]);
        if (mt > NEG_INF) {
            float mn = max(m, mt);
            float alpha = exp(m - mn);
            l *= alpha;
            for (uint i = 0u; i < ACC; ++i) acc[i] *= alpha;
            for (uint jl = 0u; jl < nk; ++jl) {
                float pj = exp(ps[rl * BK + jl] - mn);
                l += pj;
                for (uint i = 0u; i < ACC; ++i) {
                    uint d = c + i * tpr;
                    if (d < DV) acc[i] += pj * vs[jl * DV + d];
                }
            }
            m = mn;
        }
    }

    uint r = row0 + rl;
    if (r >= R) return;
    if (p.nsplit == 1u) {
        uint hq = kvh * G + r / S;
        uint at = b * tw(18u) + hq * tw(19u) + (r % S) * tw(20u);
        float inv = l > 0.0 ? 1.0 / l : 0.0;
        for (uint i = 0u; i < ACC; ++i) {
            uint d = c + i * tpr;
            if (d < DV) p.y.v[at + d] = T(acc[i] * inv);
        }
    } else {
        uint prow = (b * (gl_NumWorkGroups.y) + kvh) * R + r;
        uint slot = prow * p.nsplit + sp;
        if (c == 0u) {
            p.part.v[2u * slot] = m;
            p.part.v[2u * slot + 1u] = l;
        }
        uint accs = tw(39u);
        for (uint i = 0u; i < ACC; ++i) {
            uint d = c + i * tpr;
            if (d < DV) p.part.v[accs + slot * DV + d] = acc[i];
        }
    }
}
