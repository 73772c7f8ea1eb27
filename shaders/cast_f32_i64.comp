#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

// cast_f32_i64: f32 -> int64: truncate toward zero, NaN -> 0, out of range -> the nearest limit (ops/cast.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { int64_t v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

int64_t conv(float x) {
    // GLSL leaves the conversion of NaN and of out-of-range values undefined; saturate as the
    // CPU does. 2^63 is exact in f32.
    if (isnan(x)) return int64_t(0);
    if (x >= 9223372036854775808.0) return int64_t(0x7fffffffffffffffl);
    if (x <= -9223372036854775808.0) return int64_t(0x8000000000000000ul);
    return int64_t(x);  // truncates toward zero
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = conv(p.x.v[i]);
}
