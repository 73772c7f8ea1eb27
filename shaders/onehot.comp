// OneHot: output element (o, d, i) (d on the new axis) is values[1] when the index at (o, i)
// equals d (from opset 11 negative indices count from the back of depth), values[0] otherwise.
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

layout(buffer_reference, scalar) readonly buffer Values { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };

layout(push_constant, scalar) uniform P {
    Idx indices;
    Values values;
    Out y;
    uint n;
    uint depth;
    uint inner;
    uint idx_words;  // 1 int32, 2 int64, 0 float32 (truncated, as ONNX casts them)
    uint wrap;       // opset 11: negative indices count from the back
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    uint i = e % p.inner;
    uint t = e / p.inner;
    uint d = t % p.depth;
    uint o = t / p.depth;
    uint at = o * p.inner + i;
    int idx = p.idx_words == 0u ? int(uintBitsToFloat(p.indices.v[at])) : index_at(p.indices, at, p.idx_words);
    if (idx < 0 && p.wrap == 1u) idx += int(p.depth);
    p.y.v[e] = p.values.v[idx == int(d) ? 1 : 0];
}
