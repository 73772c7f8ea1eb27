#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// cast_copy32: a cast to the same type: copies n 32-bit words (8-byte types count 2 each) (ops/cast.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { uint v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

uint conv(uint x) { return x; }

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = conv(p.x.v[i]);
}
