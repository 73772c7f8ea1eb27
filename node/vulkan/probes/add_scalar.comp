#version 460
// Test kernel for the Vulkan layer: dst = src + value over n floats (src may equal dst).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) buffer F { float v[]; };
layout(push_constant, scalar) uniform P { F src; F dst; uint n; float value; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.dst.v[i] = p.src.v[i] + p.value;
}
