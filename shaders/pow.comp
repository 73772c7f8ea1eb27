#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// pow: y = a ^ b with numpy broadcasting (ops/elementwise/binary.rs, Pow), the exponent of its
// own type (variants <base>_<exponent>). Float bases compute in float; integer bases raised to
// a non-negative integral exponent multiply exactly (wrapping), otherwise the float result is
// truncated toward zero and saturated, as the CPU kernel (onnxruntime's cast of std::pow).
// Push constants as binary.comp's: mode, n, dims[6], strides of a and b.
// @variant f32_f32 DT_F32 E_F32
// @variant f32_f16 DT_F32 E_F16
// @variant f32_i32 DT_F32 E_I32
// @variant f32_i64 DT_F32 E_I64
// @variant f32_u32 DT_F32 E_U32
// @variant f32_u64 DT_F32 E_U64
// @variant f16_f16 DT_F16 E_F16
// @variant f16_f32 DT_F16 E_F32
// @variant f16_i32 DT_F16 E_I32
// @variant f16_i64 DT_F16 E_I64
// @variant i32_i32 DT_I32 E_I32
// @variant i32_i64 DT_I32 E_I64
// @variant i32_f32 DT_I32 E_F32
// @variant i64_i64 DT_I64 E_I64
// @variant i64_i32 DT_I64 E_I32
// @variant i64_f32 DT_I64 E_F32
#include "types.glsl"

#if defined(E_F32)
#define E float
#elif defined(E_F16)
#define E float16_t
#elif defined(E_I32)
#define E int
#elif defined(E_I64)
#define E int64_t
#elif defined(E_U32)
#define E uint
#else
#define E uint64_t
#endif
#if defined(E_F16) && !defined(DT_F16)
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) readonly buffer Exp { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    Exp b;
    Out y;
    uint mode;
    uint n;
    uint dims[6];
    uint sa[6];
    uint sb[6];
} p;

float fpow(float x, float y) {
    // GLSL's pow is undefined for x < 0 and for x = 0, y <= 0: spell out C's rules.
    if (y == 0.0) return 1.0;
    if (isnan(x) || isnan(y)) return x + y;
    float r = pow(abs(x), y);
    if (x == 0.0) r = y < 0.0 ? 1.0 / 0.0 : 0.0;
    if (x < 0.0 || (x == 0.0 && sign(1.0 / x) < 0.0)) {
        if (floor(y) != y) return 0.0 / 0.0;
        // An odd integer exponent keeps the sign.
        if (mod(abs(y), 2.0) == 1.0) r = -r;
    }
    return r;
}

T power(T x, E e) {
#if defined(DT_F32) || defined(DT_F16)
    return T(fpow(float(x), float(e)));
#else
    float fe = float(e);
    if (fe >= 0.0 && floor(fe) == fe) {
#if defined(E_F32)
        uint64_t k = uint64_t(fe);
#else
        uint64_t k = uint64_t(e);
#endif
        A base = A(x);
        A acc = A(1);
        for (int it = 0; it < 64 && k != 0ul; ++it) {
            if ((k & 1ul) != 0ul) acc *= base;
            base *= base;
            k >>= 1;
        }
        return T(acc);
    }
    float r = fpow(float(x), fe);
    if (isnan(r)) return T(0);
#if defined(DT_I64)
    if (r >= 9223372036854775808.0) return T(0x7fffffffffffffffl);
    if (r <= -9223372036854775808.0) return T(0x8000000000000000ul);
#else
    if (r >= 2147483648.0) return T(0x7fffffff);
    if (r <= -2147483648.0) return T(0x80000000u);
#endif
    return T(r);
#endif
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint ia = i;
    uint ib = i;
    if (p.mode == 1u) {
        ib = 0u;
    } else if (p.mode == 2u) {
        ia = 0u;
    } else if (p.mode == 3u) {
        ia = 0u;
        ib = 0u;
        uint r = i;
        for (int ax = 5; ax >= 0; --ax) {
            uint c = r % p.dims[ax];
            r /= p.dims[ax];
            ia += c * p.sa[ax];
            ib += c * p.sb[ax];
        }
    }
    p.y.v[i] = power(p.a.v[ia], p.b.v[ib]);
}
