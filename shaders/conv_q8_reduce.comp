#version 460
// The split-K pass of conv_q8.comp (ops/conv/q8.rs): sums its int32 partials over the slices,
// in slice order, and writes the int32 result or (flag 1) QLinearConv's requantized bytes.
// One invocation per output element; the flags are conv_q8.comp's.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_GOOGLE_include_directive : require
#include "q8.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Ints { int v[]; };
layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer Floats { float v[]; };
layout(buffer_reference, scalar) writeonly buffer OutBytes { uint8_t v[]; };
layout(buffer_reference, scalar) writeonly buffer OutInts { int v[]; };

layout(push_constant, scalar) uniform P {
    Ints part;
    Floats sa;
    Floats sb;
    Floats sy;
    Bytes yz;
    Ints y;
    uint n;
    uint splits;
    uint plane;
    uint oc;
    uint flags;
} p;

const uint F_REQUANT = 1u, F_Y_SIGNED = 2u, F_SB_PER = 8u;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    int v = 0;
    for (uint s = 0u; s < p.splits; ++s) v += p.part.v[s * p.n + i];
    if ((p.flags & F_REQUANT) == 0u) {
        OutInts(p.y).v[i] = v;
        return;
    }
    uint oc = (i / p.plane) % p.oc;
    bool y_signed = (p.flags & F_Y_SIGNED) != 0u;
    float mult = q8_multiplier(p.sa.v[0], p.sb.v[(p.flags & F_SB_PER) != 0u ? oc : 0u], p.sy.v[0]);
    OutBytes(p.y).v[i] = q8_requant(v, mult, q8_zero(uint(p.yz.v[0]), y_signed), y_signed);
}
