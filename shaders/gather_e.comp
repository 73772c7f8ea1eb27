// Gather by element size: the fallback of gather.comp for tensors that are not whole words.
// Output element e = ((o * picks) + j) * inner + i takes data element
// (o * rows + indices[j]) * inner + i. Out-of-range indices are clamped (see index.glsl).
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
    Idx indices;
    Out y;
    Fault fault;
    uint n;          // output elements
    uint inner;
    uint picks;
    uint rows;       // size of the gathered axis (> 0)
    uint idx_words;
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    uint i = e % p.inner;
    uint t = e / p.inner;
    uint j = t % p.picks;
    uint o = t / p.picks;
    uint row = checked_index(p.indices, j, p.idx_words, p.rows, p.fault);
    p.y.v[e] = p.x.v[(o * p.rows + row) * p.inner + i];
}
