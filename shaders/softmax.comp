#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// softmax over f32 rows (ops/softmax.rs): `rows` rows of `len` elements, `inner` apart; row r
// starts at (r / inner) * len * inner + r % inner. One workgroup per row (folded into y past
// 65,535 rows); each invocation strides over the row, and the maximum and the sum are reduced
// through shared memory. The maximum is subtracted before exp, so exp never overflows.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint len;
    uint inner;
    uint rows;
} p;

const uint WG = 256;
shared float red[WG];

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so the barriers below are reached by all or none.
    if (row >= p.rows) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = (row / p.inner) * p.len * p.inner + row % p.inner;

    // GLSL leaves max() with a NaN operand undefined; track NaN by hand so it propagates.
    float m = uintBitsToFloat(0xff800000u);  // -inf
    for (uint j = tid; j < p.len; j += WG) {
        float v = p.x.v[base + j * p.inner];
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

    float sum = 0.0;
    for (uint j = tid; j < p.len; j += WG) {
        sum += exp(p.x.v[base + j * p.inner] - m);
    }
    red[tid] = sum;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        barrier();
    }
    float inv = 1.0 / red[0];

    for (uint j = tid; j < p.len; j += WG) {
        uint i = base + j * p.inner;
        p.y.v[i] = exp(p.x.v[i] - m) * inv;
    }
}
