#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_GOOGLE_include_directive : require

// DequantizeLinear (ops/quantize.rs): y = (x - zero point) x scale, the scale of the output's
// type (f32 or f16). `fmt` is x's type: lowp.glsl's codes, or 10 uint8, 11 int8, 12 uint16,
// 13 int16, 14 int32; `kind` etc. place the scale as in quantize.comp. flags bit 0: a zero
// point is given (an integer type's; float8 and float4 ones are not read).
// @variant b8_f32 X_B8 OUT_F32
// @variant b8_f16 X_B8 OUT_F16
// @variant b16_f32 X_B16 OUT_F32
// @variant b16_f16 X_B16 OUT_F16
// @variant b32_f32 X_B32 OUT_F32
// @variant b32_f16 X_B32 OUT_F16

layout(local_size_x = 256) in;

#if defined(X_B8)
#define B uint8_t
#elif defined(X_B16)
#define B uint16_t
#else
#define B uint
#endif
#if defined(OUT_F32)
#define Y float
#else
#define Y float16_t
#endif

layout(buffer_reference, scalar) readonly buffer In { B v[]; };
layout(buffer_reference, scalar) readonly buffer Scale { Y v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { Y v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Scale scale;
    In zp;
    Out y;
    uint n;
    uint kind;
    uint inner;
    uint dim;
    uint block;
    uint blocks;
    uint fmt;
    uint flags;
} p;

#include "lowp.glsl"

uint scale_at(uint i) {
    if (p.kind == 0u) return 0u;
    if (p.kind == 1u) return (i / p.inner) % p.dim;
    uint outer = i / (p.dim * p.inner);
    uint along = (i / p.inner) % p.dim / p.block;
    return (outer * p.blocks + along) * p.inner + i % p.inner;
}

// A stored integer of x's type, sign-extended where it is signed.
int as_int(uint b) {
    switch (p.fmt) {
    case 6u:
    case 8u:
    case 11u: return int(b << 24) >> 24;
    case 13u: return int(b << 16) >> 16;
    default: return int(b);
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint k = scale_at(i);
    uint b = uint(p.x.v[i]);
    float d;
    if (p.fmt < 6u) {
        d = decode(b, p.fmt);
    } else if (p.fmt == 14u) {
        // int32: the difference in float, as it may not fit an int.
        d = float(int(b)) - ((p.flags & 1u) != 0u ? float(int(uint(p.zp.v[k]))) : 0.0);
    } else {
        int z = (p.flags & 1u) != 0u ? as_int(uint(p.zp.v[k])) : 0;
        d = float(as_int(b) - z);
    }
    p.y.v[i] = Y(d * float(p.scale.v[k]));
}
