#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant f64 DT_F64 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant f32_row DT_F32 IS_FLOAT ROW
// @variant f16_row DT_F16 IS_FLOAT ROW
// @variant f64_row DT_F64 IS_FLOAT ROW
// @variant i32_row DT_I32 ROW
// @variant i64_row DT_I64 ROW
// @variant i8 DT_I8
// @variant u8 DT_U8
// @variant i8_row DT_I8 ROW
// @variant u8_row DT_U8 ROW
#include "types.glsl"
#include "opcodes.glsl"

// The Reduce* family (ops/reduce/gpu.rs). Output o and reduced index r map to input offsets
// through the table: [nk, kept sizes, kept strides, nr, reduced sizes, reduced strides].
// Without ROW one invocation computes one output; with ROW a workgroup does, each invocation
// striding over the reduced set, then a shared-memory tree combines the partial results.
// Floats accumulate in float (also for f16), integers in int64 (wrapping like ONNX's).
// op: a RED_* code (shaders/opcodes.toml).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    Tab t;
    uint nout;
    uint nred;
    uint op;
} p;

#if defined(DT_F64)
#define ACC double
#define NEG_INF double(uintBitsToFloat(0xff800000u))
#define POS_INF double(uintBitsToFloat(0x7f800000u))
#elif defined(IS_FLOAT)
#define ACC float
#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)
#else
#define ACC int64_t
#if defined(DT_I32)
#define NEG_INF int64_t(-2147483648l)
#define POS_INF int64_t(2147483647l)
#elif defined(DT_I8)
#define NEG_INF int64_t(-128l)
#define POS_INF int64_t(127l)
#elif defined(DT_U8)
#define NEG_INF int64_t(0l)
#define POS_INF int64_t(255l)
#else
#define NEG_INF int64_t(0x8000000000000000ul)
#define POS_INF int64_t(0x7ffffffffffffffful)
#endif
#endif

const uint WG = 256;
#ifdef ROW
shared ACC red[WG];
#endif

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

ACC identity() {
    if (p.op == RED_MAX) return NEG_INF;
    if (p.op == RED_MIN) return POS_INF;
    if (p.op == RED_PROD) return ACC(1);
    return ACC(0);
}

#ifdef DT_F64
#include "f64math.glsl"
#define EXP exp_d
#define LOG log_d
#else
#define EXP exp
#define LOG log
#endif

bool nan_of(ACC v) {
#ifdef IS_FLOAT
    return isnan(v);
#else
    return false;
#endif
}

ACC combine(ACC a, ACC b) {
    if (p.op == RED_MAX || p.op == RED_MIN) {
        // GLSL's max/min leave NaN undefined: propagate it by hand.
        if (nan_of(a)) return a;
        if (nan_of(b)) return b;
        return p.op == RED_MAX ? max(a, b) : min(a, b);
    }
    if (p.op == RED_PROD) return a * b;
    return a + b;
}

ACC map_in(ACC v, ACC m) {
    if (p.op == RED_L1) return abs(v);
    if (p.op == RED_L2 || p.op == RED_SUM_SQUARE) return v * v;
#ifdef IS_FLOAT
    if (p.op == RED_LOG_SUM_EXP) return EXP(v - m);
#endif
    return v;
}

ACC load(uint base, uint roff, uint r) {
    // Through A: 8-bit values widen to 32 bits first, needing no 8-bit arithmetic.
    return ACC(TO_A(p.x.v[base + offset(r, roff)]));
}

#ifdef ROW
ACC tree(ACC v, bool as_max) {
    uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            ACC a = red[tid];
            ACC b = red[tid + s];
            if (as_max) {
                red[tid] = nan_of(a) ? a : (nan_of(b) ? b : max(a, b));
            } else {
                red[tid] = combine(a, b);
            }
        }
        barrier();
    }
    ACC r = red[0];
    barrier();
    return r;
}
#endif

void main() {
#ifdef ROW
    uint o = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so every barrier is reached by all or none.
    if (o >= p.nout) return;
    uint first = gl_LocalInvocationID.x;
    uint step = WG;
#else
    uint o = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (o >= p.nout) return;
    uint first = 0u;
    uint step = 1u;
#endif
    uint roff = 1u + 2u * p.t.v[0];
    uint base = offset(o, 0u);

    ACC m = ACC(0);
#ifdef IS_FLOAT
    if (p.op == RED_LOG_SUM_EXP) {
        m = NEG_INF;
        for (uint r = first; r < p.nred; r += step) {
            ACC v = load(base, roff, r);
            m = nan_of(m) ? m : (nan_of(v) ? v : max(m, v));
        }
#ifdef ROW
        m = tree(m, true);
#endif
    }
#endif

    ACC acc = identity();
    for (uint r = first; r < p.nred; r += step) {
        acc = combine(acc, map_in(load(base, roff, r), m));
    }
#ifdef ROW
    acc = tree(acc, false);
    if (gl_LocalInvocationID.x != 0u) return;
#endif

    ACC res = acc;
#ifdef IS_FLOAT
    if (p.op == RED_MEAN) res = acc / ACC(p.nred);
#else
    // Integer division by zero is undefined on GPUs (NVIDIA gives -1): the empty mean is 0, as
    // on the CPU.
    if (p.op == RED_MEAN) res = p.nred == 0u ? ACC(0) : acc / ACC(p.nred);
#endif
#ifdef IS_FLOAT
    if (p.op == RED_L2) res = sqrt(acc);
    if (p.op == RED_LOG_SUM) res = LOG(acc);
    if (p.op == RED_LOG_SUM_EXP) res = (isinf(m) || isnan(m)) ? m : m + LOG(acc);
#endif
    p.y.v[o] = FROM_A(A(res));
}
