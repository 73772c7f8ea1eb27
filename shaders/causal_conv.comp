#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// CausalConvWithState (ops/causal_conv.rs) over [B, C, L] with a [C, 1, k] kernel. One
// invocation per element of the output (the first n_out) or of the new state (the rest), both
// read from the padded sequence: the k - 1 state positions (zeros without a past state), then
// the input. Accumulates in float whatever T is, as the CPU kernel does.

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In w;
    In bias;
    In past;
    Out y;
    Out state;
    uint n_out;    // B * C * L
    uint total;    // n_out + B * C * (k - 1)
    uint channels;
    uint len;
    uint k;
    uint has_bias;
    uint has_past;
    uint silu;
} p;

// Position pos of the padded sequence of row bc (batch * channels + channel).
float padded(uint bc, uint pos) {
    uint s = p.k - 1u;
    if (pos < s) return p.has_past != 0u ? float(p.past.v[bc * s + pos]) : 0.0;
    return float(p.x.v[bc * p.len + pos - s]);
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.total) return;
    if (i >= p.n_out) {
        uint j = i - p.n_out, s = p.k - 1u;
        p.state.v[j] = T(padded(j / s, p.len + j % s));
        return;
    }
    uint bc = i / p.len, t = i % p.len, c = bc % p.channels;
    float acc = p.has_bias != 0u ? float(p.bias.v[c]) : 0.0;
    for (uint j = 0u; j < p.k; ++j) acc += float(p.w.v[c * p.k + j]) * padded(bc, t + j);
    if (p.silu != 0u) acc = acc / (1.0 + exp(-acc));
    p.y.v[i] = T(acc);
}
