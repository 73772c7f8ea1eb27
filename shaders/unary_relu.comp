#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// unary_relu: y = max(x, 0) over f32, elementwise (ops/elementwise/unary.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

float op(float x) {
    // Not max(): GLSL leaves max(NaN, 0) undefined, and NaN must stay NaN as on the CPU.
    return x < 0.0 ? 0.0 : x;
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = op(p.x.v[i]);
}
