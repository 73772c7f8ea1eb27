// ReverseSequence: the input seen as [d0, d1, inner] with batch and time on axes 0 and 1 (in
// either order); along time, the first lens[b] elements of batch entry b are reversed and the
// rest copied. Lengths are clamped to [0, time] (the CPU kernel reports others as errors).
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant b1 EB=1
// @variant b2 EB=2
// @variant b4 EB=4
// @variant b8 EB=8
#include "elem.glsl"
#include "index.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Idx lens;
    Out y;
    uint n;
    uint d0;
    uint d1;
    uint inner;
    uint batch_first;  // 1: batch is axis 0, time axis 1
    uint idx_words;
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    uint i = e % p.inner;
    uint r = e / p.inner;
    uint a1 = r % p.d1;
    uint a0 = r / p.d1;
    uint b = p.batch_first == 1u ? a0 : a1;
    uint t = p.batch_first == 1u ? a1 : a0;
    uint steps = p.batch_first == 1u ? p.d1 : p.d0;
    uint l = uint(clamp(index_at(p.lens, b, p.idx_words), 0, int(steps)));
    uint st = t < l ? l - 1u - t : t;
    uint s0 = p.batch_first == 1u ? a0 : st;
    uint s1 = p.batch_first == 1u ? st : a1;
    p.y.v[e] = p.x.v[(s0 * p.d1 + s1) * p.inner + i];
}
