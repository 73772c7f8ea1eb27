#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// The LLM row norms (ops/llm_norm/): RMSNormalization, SimplifiedLayerNormalization and
// com.microsoft's SkipLayerNormalization and SkipSimplifiedLayerNormalization. `rows` rows of
// `len` contiguous elements, one workgroup per row (folded into y). Everything in float:
//   v = x + skip[i % skip_n] + bias[j]            (skip and bias when flagged)
//   RMS:   inv = 1 / sqrt(mean(v^2) + eps),            y = v * inv * gamma[k]
//   layer: inv = 1 / sqrt(mean((v - mean)^2) + eps),   y = (v - mean) * inv * gamma[k] + beta[j]
// with k = (j / gd) % gs: a scale that covers one block of the row's axes. v is read again in
// every pass rather than kept, so rows of any length fit the shared memory.
// flags: 1 skip, 2 bias, 4 beta, 8 layer (subtract the mean), 16 write the mean (0 for RMS, as
// onnxruntime), 32 write inv, 64 write v (input_skip_bias_sum).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Stat { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In skip;
    In gamma;
    In beta;
    In bias;
    Out y;
    Stat mean;
    Stat inv;
    Out sum;
    uint rows;
    uint len;
    uint skip_n;
    uint gd;
    uint gs;
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

// Element j of the row starting at i0, with the skip and bias added.
float value(uint i0, uint j) {
    uint i = i0 + j;
    float v = float(p.x.v[i]);
    if ((p.flags & 1u) != 0u) v += float(p.skip.v[i % p.skip_n]);
    if ((p.flags & 2u) != 0u) v += float(p.bias.v[j]);
    return v;
}

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so the barriers are reached by all or none.
    if (row >= p.rows) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = row * p.len;
    bool layer = (p.flags & 8u) != 0u;
    float mean = 0.0;
    if (layer) {
        float s = 0.0;
        for (uint j = tid; j < p.len; j += WG) s += value(base, j);
        mean = total(s) / float(p.len);
    }
    float sq = 0.0;
    for (uint j = tid; j < p.len; j += WG) {
        float c = value(base, j) - mean;
        sq += c * c;
    }
    float inv = 1.0 / sqrt(total(sq) / float(p.len) + p.eps);
    for (uint j = tid; j < p.len; j += WG) {
        float v = value(base, j);
        if ((p.flags & 64u) != 0u) p.sum.v[base + j] = T(v);
        float r = (v - mean) * inv * float(p.gamma.v[(j / p.gd) % p.gs]);
        if ((p.flags & 4u) != 0u) r += float(p.beta.v[j]);
        p.y.v[base + j] = T(r);
    }
    if (tid == 0u) {
        if ((p.flags & 16u) != 0u) p.mean.v[row] = mean;
        if ((p.flags & 32u) != 0u) p.inv.v[row] = inv;
    }
}
