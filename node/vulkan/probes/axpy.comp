#version 460
// Test kernel for the Vulkan layer: out = alpha * x + y over n floats.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer FIn { float v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { float v[]; };
layout(push_constant, scalar) uniform P { FIn x; FIn y; FOut out_; uint n; float alpha; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.out_.v[i] = p.alpha * p.x.v[i] + p.y.v[i];
}
