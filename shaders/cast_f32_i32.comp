#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// cast_f32_i32: f32 -> int32: truncate toward zero, NaN -> 0, out of range -> the nearest limit (ops/cast.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { int v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

int conv(float x) {
    // GLSL leaves int() of NaN and of out-of-range values undefined; saturate as the CPU does.
    if (isnan(x)) return 0;
    if (x >= 2147483648.0) return 2147483647;
    if (x <= -2147483648.0) return -2147483647 - 1;
    return int(x);  // truncates toward zero
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = conv(p.x.v[i]);
}
