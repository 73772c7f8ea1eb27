#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

// cast_i32_i64: int32 -> int64 (sign-extends) (ops/cast.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { int v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { int64_t v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

int64_t conv(int x) { return int64_t(x); }

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = conv(p.x.v[i]);
}
