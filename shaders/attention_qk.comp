#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#extension GL_EXT_shader_8bit_storage : require

// The qk output of an attention (ops/attention/gpu.rs), which the fused attention.comp never
// forms: for every (batch, query head, query row), the T scores scale * q.k_j (mode 0), after
// the softcap (1), after the softcap, the causal/window/length limits and the mask, unseen keys
// -inf (2), or their softmax (3; a row that sees no key is zero). One workgroup per row; the
// caller asked for the S x T matrix, so it is written; the softmax reads back only the
// exponentials, each by the thread that wrote it. Table words: attention.comp's (`attend_table`).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Ints { int v[]; };
layout(buffer_reference, scalar) readonly buffer MaskT { T v[]; };
layout(buffer_reference, scalar) readonly buffer MaskB { uint8_t v[]; };
layout(push_constant, scalar) uniform P {
    In q;
    In k;
    Words mask;
    Ints lens;
    Words t;
    Out qk;
    uint mode;
} p;

const uint WG = 256u;
shared float red[WG];

const float NEG_INF = uintBitsToFloat(0xff800000u);

const uint F_CAUSAL = 1u;
const uint F_WINDOW = 2u;
const uint F_MASK = 4u;
const uint F_LENS = 8u;
const uint F_EXCLUDE = 16u;
const uint F_OFFSET_LENS = 32u;
const uint F_SOFTCAP = 64u;

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

// Whole-workgroup reduction of `x` (max when `is_max`, else sum); every thread gets it.
float reduce(float x, bool is_max) {
    uint tid = gl_LocalInvocationID.x;
    barrier();
    red[tid] = x;
    barrier();
    for (uint h = WG / 2u; h > 0u; h /= 2u) {
        if (tid < h) red[tid] = is_max ? max(red[tid], red[tid + h]) : red[tid] + red[tid + h];
        barrier();
    }
    return red[0];
}

// Per-row values main sets for `score`.
uint flags, kind, qat, kbase, D;
int pos, valid, len_b;
float scale, softcap;

float score(uint j) {
    float dot = 0.0;
    for (uint d = 0u; d < D; ++d) dot += float(p.q.v[qat + d]) * float(p.k.v[kbase + j * tw(13u) + d]);
    float sc = dot * scale;
    if (p.mode >= 1u && (flags & F_SOFTCAP) != 0u) sc = softcap * safe_tanh(sc / softcap);
    if (p.mode < 2u) return sc;
    bool seen = int(j) < valid;
    if ((flags & F_CAUSAL) != 0u) seen = seen && int(j) <= pos;
    if ((flags & F_WINDOW) != 0u) seen = seen && int(j) > pos - int(tw(25u));
    if (!seen) return NEG_INF;
    if ((flags & F_LENS) != 0u && (flags & F_EXCLUDE) == 0u && int(j) >= len_b) {
        sc += uintBitsToFloat(tw(23u));
    }
    if ((flags & F_MASK) != 0u) {
        if (j >= tw(32u)) return NEG_INF;
        uint s = gl_WorkGroupID.x, hq = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
        sc += mask_at(b * tw(28u) + hq * tw(29u) + s * tw(30u) + j * tw(31u), kind);
    }
    return sc;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint S = tw(0u), T_ = tw(1u), G = tw(4u), HQ = tw(5u);
    D = tw(2u);
    flags = tw(24u);
    uint s = gl_WorkGroupID.x, hq = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    uint kvh = hq / G;

    int offset = int(tw(26u));
    valid = int(T_);
    len_b = int(T_);
    if ((flags & F_LENS) != 0u) {
        len_b = p.lens.v[b * tw(38u)] + int(tw(27u));
        if ((flags & F_EXCLUDE) != 0u) valid = clamp(len_b, 0, int(T_));
        if ((flags & F_OFFSET_LENS) != 0u) offset = len_b - int(S);
    }
    pos = int(s) + offset;
    scale = uintBitsToFloat(tw(21u));
    softcap = uintBitsToFloat(tw(22u));
    kind = (flags >> 8u) & 3u;
    qat = tw(6u) + b * tw(7u) + hq * tw(8u) + s * tw(9u);
    kbase = tw(10u) + b * tw(11u) + kvh * tw(12u);
    uint row = ((b * HQ + hq) * S + s) * T_;

    float mx = NEG_INF;
    for (uint j = tid; j < T_; j += WG) {
        float sc = score(j);
        mx = max(mx, sc);
        if (p.mode < 3u) p.qk.v[row + j] = T(sc);
    }
    if (p.mode < 3u) return;
    // The softmax: scores computed again rather than read back, so that f16 ones are not
    // rounded before the exponential.
    mx = reduce(mx, true);
    float sum = 0.0;
    for (uint j = tid; j < T_; j += WG) {
        float e = mx > NEG_INF ? exp(score(j) - mx) : 0.0;
        sum += e;
        p.qk.v[row + j] = T(e);
    }
    sum = reduce(sum, false);
    float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (uint j = tid; j < T_; j += WG) p.qk.v[row + j] = T(float(p.qk.v[row + j]) * inv);
}
