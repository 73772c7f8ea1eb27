#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require

// fill: every element of y is one value, given as its bits (lo, then hi for 8-byte elements).
// Dropout's mask at inference (all true) is what it is for. It only writes bits, so the
// variants are by element size, serving every dtype.
// @variant b1 B1
// @variant b2 B2
// @variant b4 B4
// @variant b8 B8
#if defined(B1)
#define E uint8_t
#define VALUE uint8_t(p.lo)
#elif defined(B2)
#extension GL_EXT_shader_16bit_storage : require
#define E uint16_t
#define VALUE uint16_t(p.lo)
#elif defined(B4)
#define E uint
#define VALUE p.lo
#else
#define E uint64_t
#define VALUE (uint64_t(p.hi) << 32 | uint64_t(p.lo))
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };
layout(push_constant, scalar) uniform P {
    Out y;
    uint n;   // elements
    uint lo;  // the value's low 32 bits
    uint hi;  // its high 32 bits (b8 only)
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = VALUE;
}
