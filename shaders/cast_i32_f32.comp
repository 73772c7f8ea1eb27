#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// cast_i32_f32: int32 -> f32 (ops/cast.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { int v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

float conv(int x) { return float(x); }

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = conv(p.x.v[i]);
}
