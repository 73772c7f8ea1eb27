#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// Layer, instance and group normalisation (ops/norm/): `rows` rows of `len` contiguous
// elements, one workgroup per row (folded into y). Mean, then variance around it (two passes,
// so a large mean costs no precision), in float; then
// y = (x - mean) * inv * scale[k] + bias[k], k = (row % pp) * q + (j / d) % s.
// flags: 1 bias present, 2 write the mean, 4 write 1/sqrt(var + eps), per row, as float.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Stat { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In scale;
    In bias;
    Out y;
    Stat mean;
    Stat inv;
    uint rows;
    uint len;
    uint pp;
    uint q;
    uint d;
    uint s;
    float eps;
    uint flags;
} p;

const uint WG = 256;
shared float red[WG];

float total(float v) {
    uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so the barriers are reached by all or none.
    if (row >= p.rows) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = row * p.len;
    float sum = 0.0;
    for (uint j = tid; j < p.len; j += WG) sum += float(p.x.v[base + j]);
    float mean = total(sum) / float(p.len);
    float sq = 0.0;
    for (uint j = tid; j < p.len; j += WG) {
        float c = float(p.x.v[base + j]) - mean;
        sq += c * c;
    }
    float inv = 1.0 / sqrt(total(sq) / float(p.len) + p.eps);
    for (uint j = tid; j < p.len; j += WG) {
        uint k = (row % p.pp) * p.q + (j / p.d) % p.s;
        float b = (p.flags & 1u) != 0u ? float(p.bias.v[k]) : 0.0;
        p.y.v[base + j] = T((float(p.x.v[base + j]) - mean) * inv * float(p.scale.v[k]) + b);
    }
    if (tid == 0u) {
        if ((p.flags & 2u) != 0u) p.mean.v[row] = mean;
        if ((p.flags & 4u) != 0u) p.inv.v[row] = inv;
    }
}
