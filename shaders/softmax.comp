#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "opcodes.glsl"

// Softmax, LogSoftmax and Hardmax (ops/softmax.rs): `rows` rows of `len` elements, `inner`
// apart; row r starts at (r / inner) * len * inner + r % inner. One workgroup per row (folded
// into y past 65,535 rows); each invocation strides over the row, and the maximum and the sum
// are reduced through shared memory, in float for every element type. The maximum is
// subtracted before exp, so exp never overflows.
// mode: SOFTMAX_SOFTMAX, SOFTMAX_LOG_SOFTMAX or SOFTMAX_HARDMAX (1 at the first maximum of
// the row).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint len;
    uint inner;
    uint rows;
    uint mode;
} p;

const uint WG = 256;
shared float red[WG];
shared uint first[WG];

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so the barriers below are reached by all or none.
    if (row >= p.rows) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = (row / p.inner) * p.len * p.inner + row % p.inner;

    // GLSL leaves max() with a NaN operand undefined; track NaN by hand so it propagates.
    float m = uintBitsToFloat(0xff800000u);  // -inf
    for (uint j = tid; j < p.len; j += WG) {
        float v = float(p.x.v[base + j * p.inner]);
        if (!isnan(m) && (isnan(v) || v > m)) m = v;
    }
    red[tid] = m;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            float o = red[tid + s];
            float a = red[tid];
            if (!isnan(a) && (isnan(o) || o > a)) red[tid] = o;
        }
        barrier();
    }
    m = red[0];
    barrier();

    if (p.mode == SOFTMAX_HARDMAX) {
        uint at = 0xffffffffu;
        for (uint j = tid; j < p.len; j += WG) {
            float v = float(p.x.v[base + j * p.inner]);
            // A NaN maximum means the first NaN, as numpy's argmax picks it.
            if (isnan(m) ? isnan(v) : v == m) {
                at = j;
                break;
            }
        }
        first[tid] = at;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1u) {
            if (tid < s) first[tid] = min(first[tid], first[tid + s]);
            barrier();
        }
        at = first[0];
        for (uint j = tid; j < p.len; j += WG) {
            p.y.v[base + j * p.inner] = T(j == at ? 1.0 : 0.0);
        }
        return;
    }

    float sum = 0.0;
    for (uint j = tid; j < p.len; j += WG) {
        sum += exp(float(p.x.v[base + j * p.inner]) - m);
    }
    red[tid] = sum;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        barrier();
    }
    float total = red[0];

    for (uint j = tid; j < p.len; j += WG) {
        uint i = base + j * p.inner;
        float d = float(p.x.v[i]) - m;
        p.y.v[i] = T(p.mode == SOFTMAX_LOG_SOFTMAX ? d - log(total) : exp(d) / total);
    }
}
