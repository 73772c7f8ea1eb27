#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant zero ZERO
// @variant scatter SCATTER
#include "index.glsl"

// MaxUnpool (ops/max_unpool), f32, in two dispatches: `zero` clears the output, `scatter`
// writes input element e where its int64 index names, an element of the unpooled shape
// moved to the same coordinates of the output (larger when output_shape says so). The table
// holds the rank, the unpooled shape, then the output shape.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Idx indices;
    Out y;
    Fault fault;
    Table t;
    uint n;      // elements this dispatch covers: the output's (zero), the input's (scatter)
    uint total;  // elements of the unpooled shape
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
#ifdef ZERO
    p.y.v[e] = 0.0;
#else
    int i = index_at(p.indices, e, 2u);
    if (i < 0 || i >= int(p.total)) {
        // Negative indices do not count from the back here, as on the CPU: record and skip.
        if (atomicCompSwap(p.fault.v[0], 0u, 1u) == 0u) {
            p.fault.v[1] = e;
            p.fault.v[2] = p.indices.v[2u * e];
            p.fault.v[3] = p.indices.v[2u * e + 1u];
            p.fault.v[4] = p.total;
        }
        return;
    }
    uint rank = p.t.v[0];
    uint rest = uint(i), at = 0u, stride = 1u;
    for (uint a = rank; a-- > 0u;) {
        uint from = p.t.v[1u + a], to = p.t.v[1u + rank + a];
        at += rest % from * stride;
        rest /= from;
        stride *= to;
    }
    p.y.v[at] = p.x.v[e];
#endif
}
