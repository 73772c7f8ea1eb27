#version 460
// GlobalMaxPool / GlobalAveragePool: one workgroup per (batch, channel) plane, each thread
// folding a strided share of the plane, then a tree reduction in shared memory.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "opcodes.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };

layout(push_constant, scalar) uniform P {
    FIn x;
    FOut y;
    uint planes;
    uint plane_size;
    uint mode; // POOL_MAX or POOL_AVG
} p;

shared float part[256];

void main() {
    uint plane = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (plane >= p.planes) return;
    uint lid = gl_LocalInvocationID.x;
    bool is_max = p.mode == POOL_MAX;
    uint base = plane * p.plane_size;

    float acc = is_max ? -3.402823466e+38 : 0.0;
    for (uint j = lid; j < p.plane_size; j += 256u) {
        float v = float(p.x.v[base + j]);
        acc = is_max ? max(acc, v) : acc + v;
    }
    part[lid] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (lid < s) {
            float o = part[lid + s];
            part[lid] = is_max ? max(part[lid], o) : part[lid] + o;
        }
        barrier();
    }
    if (lid == 0u) {
        p.y.v[plane] = T(is_max ? part[0] : part[0] / float(p.plane_size));
    }
}
