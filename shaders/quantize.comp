#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_GOOGLE_include_directive : require

// QuantizeLinear (ops/quantize.rs): y = x / scale rounded half to even, plus the zero point,
// clipped to the type's range; to float8 the quotient rounded (saturating when `flags` bit 1),
// to float4 quotient plus zero point. x and the scale share a type (f32 or f16); `fmt` is the
// output type: lowp.glsl's codes, or 10 uint8, 11 int8, 12 uint16, 13 int16. The scale (and
// zero point) of element i: per tensor (kind 0), along an axis (1), or blocked (2).
// flags: bit 0 a zero point is given, bit 1 saturate, bit 2 round the quotient to f16 (x and
// the scale are f16, and numpy divides in f16).
// @variant f32_b8 X_F32 OUT_B8
// @variant f32_b16 X_F32 OUT_B16
// @variant f16_b8 X_F16 OUT_B8
// @variant f16_b16 X_F16 OUT_B16

layout(local_size_x = 256) in;

#if defined(X_F32)
#define X float
#else
#define X float16_t
#endif
#if defined(OUT_B8)
#define B uint8_t
#else
#define B uint16_t
#endif

layout(buffer_reference, scalar) readonly buffer In { X v[]; };
layout(buffer_reference, scalar) readonly buffer Zp { B v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { B v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    In scale;
    Zp zp;
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

// A stored integer of the output type, sign-extended where it is signed.
int as_int(uint b) {
    switch (p.fmt) {
    case 6u:
    case 8u:
    case 11u: return int(b << 24) >> 24;
    case 13u: return int(b << 16) >> 16;
    default: return int(b);
    }
}

ivec2 range_of(uint fmt) {
    switch (fmt) {
    case 6u: return ivec2(-8, 7);
    case 7u: return ivec2(0, 15);
    case 8u: return ivec2(-2, 1);
    case 9u: return ivec2(0, 3);
    case 10u: return ivec2(0, 255);
    case 11u: return ivec2(-128, 127);
    case 12u: return ivec2(0, 65535);
    default: return ivec2(-32768, 32767);
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint k = scale_at(i);
    float xv = float(p.x.v[i]);
    float s = float(p.scale.v[k]);
    // The division correctly rounded as the CPU's: one correction from the exact residual.
    precise float q0 = xv / s;
    precise float r = fma(-q0, s, xv);
    precise float q = fma(r, 1.0 / s, q0);
    // To f16 rounding to nearest even by hand: a GPU's own conversion may truncate.
    if ((p.flags & 4u) != 0u && !isnan(q) && !isinf(q) && q != 0.0) {
        float a = round_to(abs(q), 10, -14);
        a = a > 65504.0 ? uintBitsToFloat(0x7f800000u) : a;
        q = q < 0.0 ? -a : a;
    }
    bool has_zp = (p.flags & 1u) != 0u;
    uint zb = has_zp ? uint(p.zp.v[k]) : 0u;
    uint b;
    if (p.fmt >= 6u) {
        int v = isnan(q) ? 0 : int(roundEven(clamp(q, -2147483648.0, 2147483520.0)));
        ivec2 lim = range_of(p.fmt);
        v = clamp(v + (has_zp ? as_int(zb) : 0), lim.x, lim.y);
        b = uint(v);
    } else if (p.fmt == 4u) {
        b = encode_float(q + (has_zp ? decode(zb, 4u) : 0.0), 4u, true);
    } else {
        b = encode_float(q, p.fmt, (p.flags & 2u) != 0u);
    }
#if defined(OUT_B8)
    p.y.v[i] = uint8_t(b & 0xffu);
#else
    p.y.v[i] = uint16_t(b & 0xffffu);
#endif
}
