#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant f32_final DT_F32 IS_FLOAT FINAL
// @variant f16_final DT_F16 IS_FLOAT FINAL
// @variant i32_final DT_I32 FINAL
// @variant i64_final DT_I64 FINAL
#include "types.glsl"
#include "opcodes.glsl"

// Long reductions with few outputs (ops/reduce/gpu.rs), in two dispatches, so that more than
// one workgroup works on each output. Table and `op` codes as in reduce.comp.
// Pass 1 (workgroup (c, o)): reduces chunk c (`chunk` positions) of output o's set into
// part[o * chunks + c]; for LogSumExp the chunk's maximum goes to pmax and the part holds
// sum exp(x - that maximum). Pass 2 (FINAL, workgroup o): combines output o's parts and
// applies the finishing step (mean, sqrt, log).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };
#ifdef IS_FLOAT
#define ACC float
#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)
#else
#define ACC int64_t
#if defined(DT_I32)
#define NEG_INF int64_t(-2147483648l)
#define POS_INF int64_t(2147483647l)
#else
#define NEG_INF int64_t(0x8000000000000000ul)
#define POS_INF int64_t(0x7ffffffffffffffful)
#endif
#endif
layout(buffer_reference, scalar) buffer Part { ACC v[]; };
layout(buffer_reference, scalar) buffer PMax { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Part part;
    PMax pmax;
    Out y;
    Tab t;
    uint nout;
    uint nred;
    uint op;
    uint chunks;
    uint chunk;
} p;

const uint WG = 256;
shared ACC red[WG];

bool nan_of(ACC v) {
#ifdef IS_FLOAT
    return isnan(v);
#else
    return false;
#endif
}

ACC identity() {
    if (p.op == RED_MAX) return NEG_INF;
    if (p.op == RED_MIN) return POS_INF;
    if (p.op == RED_PROD) return ACC(1);
    return ACC(0);
}

ACC max_nan(ACC a, ACC b) {
    return nan_of(a) ? a : (nan_of(b) ? b : max(a, b));
}

ACC combine(ACC a, ACC b) {
    if (p.op == RED_MAX) return max_nan(a, b);
    if (p.op == RED_MIN) return nan_of(a) ? a : (nan_of(b) ? b : min(a, b));
    if (p.op == RED_PROD) return a * b;
    return a + b;
}

ACC tree(ACC v, bool as_max) {
    uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) red[tid] = as_max ? max_nan(red[tid], red[tid + s]) : combine(red[tid], red[tid + s]);
        barrier();
    }
    ACC r = red[0];
    barrier();
    return r;
}

uint offset(uint idx, uint at) {
    uint n = p.t.v[at];
    uint off = 0u;
    for (int k = int(n) - 1; k >= 0; --k) {
        uint size = p.t.v[at + 1u + uint(k)];
        uint stride = p.t.v[at + 1u + n + uint(k)];
        off += (idx % size) * stride;
        idx /= size;
    }
    return off;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
#ifndef FINAL
    uint c = gl_WorkGroupID.x;
    uint o = gl_WorkGroupID.y;
    uint base = offset(o, 0u);
    uint roff = 1u + 2u * p.t.v[0];
    uint lo = c * p.chunk;
    uint hi = min(lo + p.chunk, p.nred);
    ACC m = ACC(0);
#ifdef IS_FLOAT
    if (p.op == RED_LOG_SUM_EXP) {
        m = NEG_INF;
        for (uint r = lo + tid; r < hi; r += WG) m = max_nan(m, ACC(p.x.v[base + offset(r, roff)]));
        m = tree(m, true);
    }
#endif
    ACC acc = identity();
    for (uint r = lo + tid; r < hi; r += WG) {
        ACC v = ACC(TO_A(p.x.v[base + offset(r, roff)]));
        if (p.op == RED_L1) v = abs(v);
        if (p.op == RED_L2 || p.op == RED_SUM_SQUARE) v = v * v;
#ifdef IS_FLOAT
        if (p.op == RED_LOG_SUM_EXP) v = isinf(m) ? ACC(0) : exp(v - m);
#endif
        acc = combine(acc, v);
    }
    acc = tree(acc, false);
    if (tid == 0u) {
        p.part.v[o * p.chunks + c] = acc;
        p.pmax.v[o * p.chunks + c] = float(m);
    }
#else
    uint o = gl_WorkGroupID.x;
    uint at = o * p.chunks;
    float m = 0.0;
    if (p.op == RED_LOG_SUM_EXP) {
        float mm = uintBitsToFloat(0xff800000u);
        for (uint c = tid; c < p.chunks; c += WG) {
            float v = p.pmax.v[at + c];
            mm = isnan(mm) ? mm : (isnan(v) ? v : max(mm, v));
        }
        m = float(tree(ACC(mm), true));
    }
    ACC acc = identity();
    for (uint c = tid; c < p.chunks; c += WG) {
        ACC v = p.part.v[at + c];
#ifdef IS_FLOAT
        if (p.op == RED_LOG_SUM_EXP) {
            float cm = p.pmax.v[at + c];
            // A chunk whose maximum is -inf adds nothing; an infinite or NaN overall maximum
            // is the result by itself (below).
            v = (isinf(cm) && cm < 0.0) || isinf(m) || isnan(m) ? 0.0 : v * exp(cm - m);
        }
#endif
        acc = combine(acc, v);
    }
    acc = tree(acc, false);
    if (tid != 0u) return;
    ACC res = acc;
    if (p.op == RED_MEAN) res = acc / ACC(p.nred);
#ifdef IS_FLOAT
    if (p.op == RED_L2) res = sqrt(acc);
    if (p.op == RED_LOG_SUM) res = log(acc);
    if (p.op == RED_LOG_SUM_EXP) res = (isinf(m) || isnan(m)) ? m : m + log(acc);
#endif
    p.y.v[o] = FROM_A(A(res));
#endif
}
