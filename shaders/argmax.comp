#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant f32_row DT_F32 IS_FLOAT ROW
// @variant f16_row DT_F16 IS_FLOAT ROW
// @variant i32_row DT_I32 ROW
// @variant i64_row DT_I64 ROW
// @variant i8 DT_I8
// @variant u8 DT_U8
// @variant i8_row DT_I8 ROW
// @variant u8_row DT_U8 ROW
#include "types.glsl"

// ArgMax / ArgMin (ops/reduce/arg.rs): one invocation per output, scanning `len` elements
// `inner` apart; with ROW (long rows) a workgroup per output, each invocation scanning every
// WG-th element, then a shared-memory tree over (value, index) pairs. `is_min` picks ArgMin,
// `last` the last of equal extremes; a NaN is the extreme, as in numpy.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
// Elements are compared as A (8-bit values widened to 32 bits).
layout(buffer_reference, scalar) writeonly buffer Out { int64_t v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    uint len;
    uint inner;
    uint is_min;
    uint last;
} p;

bool nan_of(A v) {
#ifdef IS_FLOAT
    return isnan(float(v));
#else
    return false;
#endif
}

// True when (v, j) should replace (best, at) as the extreme.
bool better(A v, uint j, A best, uint at) {
    if (nan_of(best)) {
        return nan_of(v) && (p.last != 0u ? j > at : j < at);
    }
    if (nan_of(v)) return true;
    if (v == best) return p.last != 0u ? j > at : j < at;
    return p.is_min != 0u ? v < best : v > best;
}

#ifdef ROW
const uint WG = 256;
shared A sv[WG];
shared uint si[WG];

void main() {
    uint i = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so every barrier is reached by all or none.
    if (i >= p.n) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = (i / p.inner) * p.len * p.inner + i % p.inner;
    // Every invocation starts from a real element (len >= WG on this path).
    uint at = min(tid, p.len - 1u);
    A best = TO_A(p.x.v[base + at * p.inner]);
    for (uint j = tid + WG; j < p.len; j += WG) {
        A v = TO_A(p.x.v[base + j * p.inner]);
        if (better(v, j, best, at)) {
            best = v;
            at = j;
        }
    }
    sv[tid] = best;
    si[tid] = at;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s && better(sv[tid + s], si[tid + s], sv[tid], si[tid])) {
            sv[tid] = sv[tid + s];
            si[tid] = si[tid + s];
        }
        barrier();
    }
    if (tid == 0u) p.y.v[i] = int64_t(si[0]);
}
#else
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint base = (i / p.inner) * p.len * p.inner + i % p.inner;
    A best = TO_A(p.x.v[base]);
    uint at = 0u;
    for (uint j = 1u; j < p.len; ++j) {
        A v = TO_A(p.x.v[base + j * p.inner]);
        bool take;
        if (nan_of(best)) {
            take = p.last != 0u && nan_of(v);
        } else if (nan_of(v)) {
            take = true;
        } else {
            bool strictly = p.is_min != 0u ? v < best : v > best;
            take = strictly || (p.last != 0u && v == best);
        }
        if (take) {
            best = v;
            at = j;
        }
    }
    p.y.v[i] = int64_t(at);
}
#endif
