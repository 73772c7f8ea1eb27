#version 460
// com.microsoft QLinearAdd (ops/qlinear_add.rs), of two inputs of one shape: c = quantize(
// dequantize(a) + dequantize(b)), with the arithmetic of DequantizeLinear, Add and
// QuantizeLinear in f32 (dequantize.comp, quantize.comp), so that the fused QDQ residual sum
// it replaces (graph/fuse_qdq.rs) gives the same bytes. One invocation per element; the
// scales and zero points are one value each.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require
// @variant u8
// @variant i8 SIGNED

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer Floats { float v[]; };
layout(buffer_reference, scalar) writeonly buffer OutBytes { uint8_t v[]; };

layout(push_constant, scalar) uniform P {
    Bytes a;
    Floats sa;
    Bytes za;
    Bytes b;
    Floats sb;
    Bytes zb;
    Floats sc;
    Bytes zc;
    OutBytes c;
    uint n;
} p;

int val(uint8_t x) {
#ifdef SIGNED
    return int(int8_t(x));
#else
    return int(x);
#endif
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    precise float x = float(val(p.a.v[i]) - val(p.za.v[0])) * p.sa.v[0];
    precise float y = float(val(p.b.v[i]) - val(p.zb.v[0])) * p.sb.v[0];
    precise float s = x + y;
    float sc = p.sc.v[0];
    // The division correctly rounded, as quantize.comp's.
    precise float q0 = s / sc;
    precise float r = fma(-q0, sc, s);
    precise float q = fma(r, 1.0 / sc, q0);
#ifdef SIGNED
    int v = clamp(int(roundEven(clamp(q, -1e9, 1e9))) + val(p.zc.v[0]), -128, 127);
#else
    int v = clamp(int(roundEven(clamp(q, -1e9, 1e9))) + val(p.zc.v[0]), 0, 255);
#endif
    p.c.v[i] = uint8_t(uint(v) & 255u);
}
