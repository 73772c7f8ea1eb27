#version 460
// Test kernel for the Vulkan layer: dst[i] = i + 1 for i < n, through the folded 1-D index,
// so a launch that misses or repeats an index is caught.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) buffer U { uint v[]; };
layout(push_constant, scalar) uniform P { U dst; uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.dst.v[i] += i + 1u;
}
