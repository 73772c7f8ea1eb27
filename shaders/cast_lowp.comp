#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_GOOGLE_include_directive : require

// cast_lowp: the low-precision types (one byte an element, ops/lowp.rs) from and to f32 and
// f16, by the CPU's rules: to a float format rounding to nearest even, out of range to the
// largest finite value (`saturate`) or else infinity or NaN; e8m0 from the f32 exponent,
// rounded by `round` (0 up, 1 down, 2 nearest); the narrow integers truncated toward zero and
// wrapped. `fmt` is the type (lowp.glsl), uniform across a dispatch, so the switches cost no
// divergence.
// @variant decode_f32 DECODE DST_F32
// @variant decode_f16 DECODE DST_F16
// @variant encode_f32 SRC_F32
// @variant encode_f16 SRC_F16

#if defined(DST_F16) || defined(SRC_F16)
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x = 256) in;

#if defined(DECODE)
layout(buffer_reference, scalar) readonly buffer In { uint8_t v[]; };
#if defined(DST_F32)
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
#else
layout(buffer_reference, scalar) writeonly buffer Out { float16_t v[]; };
#endif
#else
#if defined(SRC_F32)
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
#else
layout(buffer_reference, scalar) readonly buffer In { float16_t v[]; };
#endif
layout(buffer_reference, scalar) writeonly buffer Out { uint8_t v[]; };
#endif

layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    uint fmt;
    uint saturate;
    uint round;
} p;

#include "lowp.glsl"

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
#if defined(DECODE)
    float v = decode(uint(p.x.v[i]), p.fmt);
#if defined(DST_F32)
    p.y.v[i] = v;
#else
    p.y.v[i] = float16_t(v);
#endif
#else
    float x = float(p.x.v[i]);
#if !defined(SRC_F32)
    // A GPU may drop a NaN's sign converting f16 to f32; the sign decides the NaN's bits.
    if (isnan(x)) {
        bool neg = (packFloat2x16(f16vec2(p.x.v[i], float16_t(0.0))) & 0x8000u) != 0u;
        x = uintBitsToFloat(neg ? 0xffc00000u : 0x7fc00000u);
    }
#endif
    uint b;
    if (p.fmt == 5u) {
        b = encode_e8m0(x, p.saturate != 0u, p.round);
    } else if (p.fmt >= 6u) {
        b = encode_int(x, p.fmt);
    } else {
        b = encode_float(x, p.fmt, p.saturate != 0u);
    }
    p.y.v[i] = uint8_t(b);
#endif
}
