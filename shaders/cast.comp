#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require

// cast: every pair among f32 f16 i64 i32 i8 u8 bool (ops/cast.rs), with the CPU's rules:
// integer -> integer wraps; float -> integer truncates toward zero, NaN -> 0, out of range ->
// the nearest limit (GLSL leaves those conversions undefined, so they are spelled out); anything
// -> bool is != 0 (NaN is true); bool -> anything is 0 or 1; narrowing floats round to nearest.
// Variants are named <from>_<to>.
// @variant f32_f16 SRC_F32 DST_F16
// @variant f32_i64 SRC_F32 DST_I64
// @variant f32_i32 SRC_F32 DST_I32
// @variant f32_i8 SRC_F32 DST_I8
// @variant f32_u8 SRC_F32 DST_U8
// @variant f32_bool SRC_F32 DST_BOOL
// @variant f16_f32 SRC_F16 DST_F32
// @variant f16_i64 SRC_F16 DST_I64
// @variant f16_i32 SRC_F16 DST_I32
// @variant f16_i8 SRC_F16 DST_I8
// @variant f16_u8 SRC_F16 DST_U8
// @variant f16_bool SRC_F16 DST_BOOL
// @variant i64_f32 SRC_I64 DST_F32
// @variant i64_f16 SRC_I64 DST_F16
// @variant i64_i32 SRC_I64 DST_I32
// @variant i64_i8 SRC_I64 DST_I8
// @variant i64_u8 SRC_I64 DST_U8
// @variant i64_bool SRC_I64 DST_BOOL
// @variant i32_f32 SRC_I32 DST_F32
// @variant i32_f16 SRC_I32 DST_F16
// @variant i32_i64 SRC_I32 DST_I64
// @variant i32_i8 SRC_I32 DST_I8
// @variant i32_u8 SRC_I32 DST_U8
// @variant i32_bool SRC_I32 DST_BOOL
// @variant i8_f32 SRC_I8 DST_F32
// @variant i8_f16 SRC_I8 DST_F16
// @variant i8_i64 SRC_I8 DST_I64
// @variant i8_i32 SRC_I8 DST_I32
// @variant i8_u8 SRC_I8 DST_U8
// @variant i8_bool SRC_I8 DST_BOOL
// @variant u8_f32 SRC_U8 DST_F32
// @variant u8_f16 SRC_U8 DST_F16
// @variant u8_i64 SRC_U8 DST_I64
// @variant u8_i32 SRC_U8 DST_I32
// @variant u8_i8 SRC_U8 DST_I8
// @variant u8_bool SRC_U8 DST_BOOL
// @variant bool_f32 SRC_BOOL DST_F32
// @variant bool_f16 SRC_BOOL DST_F16
// @variant bool_i64 SRC_BOOL DST_I64
// @variant bool_i32 SRC_BOOL DST_I32
// @variant bool_i8 SRC_BOOL DST_I8
// @variant bool_u8 SRC_BOOL DST_U8
// f64 pairs need shaderFloat64, which the planner checks per device.
// @variant f64_f32 SRC_F64 DST_F32
// @variant f64_f16 SRC_F64 DST_F16
// @variant f64_i64 SRC_F64 DST_I64
// @variant f64_i32 SRC_F64 DST_I32
// @variant f64_i8 SRC_F64 DST_I8
// @variant f64_u8 SRC_F64 DST_U8
// @variant f64_bool SRC_F64 DST_BOOL
// @variant f32_f64 SRC_F32 DST_F64
// @variant f16_f64 SRC_F16 DST_F64
// @variant i64_f64 SRC_I64 DST_F64
// @variant i32_f64 SRC_I32 DST_F64
// @variant i8_f64 SRC_I8 DST_F64
// @variant u8_f64 SRC_U8 DST_F64
// @variant bool_f64 SRC_BOOL DST_F64
// Same-type copies of sub-word types (4- and 8-byte ones use cast_copy32).
// @variant f16_f16 SRC_F16 DST_F16
// @variant i8_i8 SRC_I8 DST_I8
// @variant u8_u8 SRC_U8 DST_U8
// @variant bool_bool SRC_BOOL DST_BOOL

#if defined(SRC_F16) || defined(DST_F16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(SRC_I8) || defined(SRC_U8) || defined(SRC_BOOL) || defined(DST_I8) || defined(DST_U8) || defined(DST_BOOL)
#extension GL_EXT_shader_8bit_storage : require
#endif

#if defined(SRC_F32)
#define S float
#define SRC_FLOAT 1
#elif defined(SRC_F16)
#define S float16_t
#define SRC_FLOAT 1
#elif defined(SRC_F64)
#define S double
#define SRC_FLOAT 1
#elif defined(SRC_I64)
#define S int64_t
#elif defined(SRC_I32)
#define S int
#elif defined(SRC_I8)
#define S int8_t
#elif defined(SRC_U8)
#define S uint8_t
#else
#define S uint8_t
#endif

#if defined(DST_F32)
#define D float
#define DST_FLOAT 1
#elif defined(DST_F16)
#define D float16_t
#define DST_FLOAT 1
#elif defined(DST_F64)
#define D double
#define DST_FLOAT 1
#elif defined(DST_I64)
#define D int64_t
#elif defined(DST_I32)
#define D int
#elif defined(DST_I8)
#define D int8_t
#elif defined(DST_U8)
#define D uint8_t
#else
#define D uint8_t
#endif

// The float type a float source is read into: exact for every source.
#if defined(SRC_F64) || defined(DST_F64)
#define W double
#else
#define W float
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { S v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { D v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

D conv(S s) {
#if defined(DST_BOOL)
    return D(s != S(0) ? 1u : 0u);
#elif defined(SRC_BOOL)
    return D(s != S(0) ? 1u : 0u);
#elif defined(SRC_FLOAT) && defined(DST_FLOAT)
    return D(W(s));
#elif defined(SRC_FLOAT)
    W v = W(s);
    if (isnan(v)) return D(0);
#if defined(DST_I64)
    // 2^63 is exact in f32.
    if (v >= 9223372036854775808.0) return D(0x7fffffffffffffffl);
    if (v <= -9223372036854775808.0) return D(0x8000000000000000ul);
    return D(v);
#elif defined(DST_I32)
    if (v >= 2147483648.0) return D(0x7fffffff);
    if (v <= -2147483648.0) return D(0x80000000u);
    return D(v);
#elif defined(DST_I8)
    return D(int(clamp(trunc(v), -128.0, 127.0)));
#else
    return D(uint(clamp(trunc(v), 0.0, 255.0)));
#endif
#elif defined(DST_F64)
    return D(s);
#elif defined(DST_F16)
    // Integers past f16's range (65504) overflow to inf either way; below 2^24 f32 is exact.
    return D(float(s));
#else
    // Integer -> integer wraps; integer -> f32 rounds once.
    return D(s);
#endif
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = conv(p.x.v[i]);
}
