// Trilu: keeps the upper (or lower) triangle of each matrix in the last two axes and zeroes
// the rest. k (the diagonal's offset) comes from a run-time int64 buffer when present.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// @variant b1 EB=1
// @variant b2 EB=2
// @variant b4 EB=4
// @variant b8 EB=8
#include "elem.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };
layout(buffer_reference, scalar) readonly buffer K { int64_t v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    K k;
    Out y;
    uint n;
    uint rows;
    uint cols;
    uint has_k;
    uint upper;
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    int64_t k = p.has_k == 1u ? p.k.v[0] : int64_t(0);
    int64_t j = int64_t(e % p.cols);
    int64_t i = int64_t((e / p.cols) % p.rows);
    bool keep = p.upper == 1u ? j - i >= k : j - i <= k;
    p.y.v[e] = keep ? p.x.v[e] : E_WORDS(0u, 0u);
}
