// GatherElements: output element at position u (the indices' shape) takes data at u with the
// axis coordinate replaced by indices[u]. Table per axis (outermost first): extent of the
// indices, stride of the data.
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
layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Idx indices;
    Table t;
    Out y;
    Fault fault;
    uint n;
    uint rank;
    uint axis;
    uint axis_dim;   // the data's extent on the axis (> 0)
    uint idx_words;
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    uint rest = e;
    uint src = 0u;
    for (int a = int(p.rank) - 1; a >= 0; --a) {
        uint d = p.t.v[2 * a];
        uint o = rest % d;
        rest /= d;
        if (uint(a) == p.axis) o = checked_index(p.indices, e, p.idx_words, p.axis_dim, p.fault);
        src += o * p.t.v[2 * a + 1];
    }
    p.y.v[e] = p.x.v[src];
}
