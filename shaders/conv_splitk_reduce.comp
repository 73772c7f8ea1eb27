#version 460
// The second pass of a split-K convolution (shaders/conv_gemm.comp, SPLIT_K variants):
// y[i] = sum over the slices s, in order, of part[s * n + i], plus the bias of i's channel.
// Partial sums are float for every element type, so f16 convolutions round once, at the end.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer PIn { float v[]; };
layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };

// part: splits x n floats; b: OC; y: n = N x OC x plane elements.
layout(push_constant, scalar) uniform P {
    PIn part;
    FIn b;
    FOut y;
    uint n;
    uint splits;
    uint plane;
    uint oc;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    float s = 0.0;
    for (uint k = 0; k < p.splits; k++) s += p.part.v[k * p.n + i];
    uint c = (i / p.plane) % p.oc;
    p.y.v[i] = T(s + float(p.b.v[c]));
}
