// types.glsl: the element type of a shader variant, for `#include "types.glsl"` right after a
// shader's own #extension lines (needs GL_GOOGLE_include_directive). A variant line defines one
// of the DT_* names, e.g.
//     // @variant f16 DT_F16
//     // @variant i64 DT_I64
// and the shader then uses:
//     T          the storage type of the elements (what the buffers hold)
//     A          the type arithmetic is done in: T itself, except f16 computes in float16_t and
//                8/16-bit integers in int/uint (GLSL has no 8-bit arithmetic to speak of)
//     TO_A(x)    T -> A,   FROM_A(x)  A -> T
// Booleans are bytes holding 0 or 1 (ONNX's layout), arithmetic type uint.
// The build records which optional device features each variant's SPIR-V declares, so a
// variant a device cannot run is never placed on it.

#if defined(DT_F16) || defined(DT_I16) || defined(DT_U16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(DT_I8) || defined(DT_U8) || defined(DT_BOOL)
#extension GL_EXT_shader_8bit_storage : require
#endif
#extension GL_EXT_shader_explicit_arithmetic_types : require

#if defined(DT_F32)
#define T float
#define A float
#elif defined(DT_F16)
#define T float16_t
#define A float16_t
#elif defined(DT_F64)
#define T double
#define A double
#elif defined(DT_I64)
#define T int64_t
#define A int64_t
#elif defined(DT_U64)
#define T uint64_t
#define A uint64_t
#elif defined(DT_I32)
#define T int
#define A int
#elif defined(DT_U32)
#define T uint
#define A uint
#elif defined(DT_I16)
#define T int16_t
#define A int
#elif defined(DT_U16)
#define T uint16_t
#define A uint
#elif defined(DT_I8)
#define T int8_t
#define A int
#elif defined(DT_U8) || defined(DT_BOOL)
#define T uint8_t
#define A uint
#else
#error "define one of DT_F32 DT_F16 DT_F64 DT_I64 DT_U64 DT_I32 DT_U32 DT_I16 DT_U16 DT_I8 DT_U8 DT_BOOL"
#endif

#define TO_A(x) A(x)
#define FROM_A(x) T(x)
