#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// The second pass of gemv.comp's SPLIT variant: y[i] = sum over the slices s, in order, of
// part[s * total + i], in float, stored as T.
layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Part { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };

layout(push_constant, scalar) uniform P {
    Part part;
    Out y;
    uint total;
    uint splits;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.total) return;
    float s = 0.0;
    for (uint k = 0u; k < p.splits; k++) s += p.part.v[k * p.total + i];
    p.y.v[i] = T(s);
}
