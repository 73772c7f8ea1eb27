#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// binary: y = a OP b with numpy broadcasting (ops/elementwise/binary.rs, variadic.rs); Pow has
// its own shader, pow.comp, as its exponent may have another type.
// One pipeline per element type; the op is a push-constant code (BIN_* or, for the cmp_*
// variants, CMP_*: shaders/opcodes.toml),
// uniform across the dispatch so the switch costs no divergence. The cmp_* variants compare and
// write bools (bytes 0/1). u8 also serves bool (And/Or/Xor on 0/1 bytes).
// mode 0: a, b and y have one shape; 1: b is a single element; 2: a is; 3: general broadcast
// through the output dims (rank padded to 6 with leading 1s) and each input's element strides
// (0 on broadcast axes).
// Integer rules match the CPU kernels (ops/elementwise/num.rs): wrapping arithmetic, x / 0 = 0,
// Mod by 0 = 0, Mod with the divisor's sign (numpy) or the dividend's (fmod), shifts by the
// width or more give 0.
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant f64 DT_F64
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant i8 DT_I8
// @variant u8 DT_U8
// @variant i16 DT_I16
// @variant u16 DT_U16
// @variant u32 DT_U32
// @variant u64 DT_U64
// @variant cmp_f32 DT_F32 CMP
// @variant cmp_f16 DT_F16 CMP
// @variant cmp_f64 DT_F64 CMP
// @variant cmp_i32 DT_I32 CMP
// @variant cmp_i64 DT_I64 CMP
// @variant cmp_i8 DT_I8 CMP
// @variant cmp_u8 DT_U8 CMP
// @variant cmp_i16 DT_I16 CMP
// @variant cmp_u16 DT_U16 CMP
// @variant cmp_u32 DT_U32 CMP
// @variant cmp_u64 DT_U64 CMP
#include "types.glsl"
#include "opcodes.glsl"
#ifdef CMP
#extension GL_EXT_shader_8bit_storage : require
#define TY uint8_t
#else
#define TY T
#endif

#if defined(DT_F32) || defined(DT_F16)
#define IS_FLOAT 1
// f16 computes in float and rounds once on the store.
#define C float
#elif defined(DT_F64)
// Needs shaderFloat64, which the planner checks per device.
#define IS_FLOAT 1
#define C double
#else
#define C A
#endif
#if defined(DT_U8)
#define UNSIGNED 1
#define BITS 8
#elif defined(DT_U16)
#define UNSIGNED 1
#define BITS 16
#elif defined(DT_U32)
#define UNSIGNED 1
#define BITS 32
#elif defined(DT_U64)
#define UNSIGNED 1
#define BITS 64
#elif defined(DT_I8)
#define BITS 8
#elif defined(DT_I16)
#define BITS 16
#elif defined(DT_I32)
#define BITS 32
#elif defined(DT_I64)
#define BITS 64
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { TY v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    In b;
    Out y;
    uint mode;
    uint n;
    uint dims[6];
    uint sa[6];
    uint sb[6];
    uint op;
    float alpha;
} p;

#ifdef CMP
uint8_t apply(C x, C y) {
    bool r;
    switch (p.op) {
    case CMP_EQ: r = x == y; break;
    case CMP_LT: r = x < y; break;
    case CMP_LE: r = x <= y; break;
    case CMP_GT: r = x > y; break;
    default: r = x >= y; break;  // CMP_GE
    }
    return uint8_t(r ? 1u : 0u);
}
#else

C apply(C x, C y) {
    switch (p.op) {
    case BIN_ADD: return x + y;
    case BIN_SUB: return x - y;
    case BIN_MUL: return x * y;
#ifdef IS_FLOAT
    case BIN_DIV: return x / y;
    case BIN_MOD: {
        // numpy.mod: the divisor's sign.
        C r = x - y * trunc(x / y);
        return (r != 0.0 && ((r < 0.0) != (y < 0.0))) ? r + y : r;
    }
    case BIN_FMOD: return x - y * trunc(x / y);
    case BIN_MIN: return (isnan(x) || isnan(y)) ? x + y : min(x, y);
    case BIN_MAX: return (isnan(x) || isnan(y)) ? x + y : max(x, y);
    case BIN_SCALE: return x * p.alpha;
#else
    case BIN_DIV: {
        if (y == C(0)) return C(0);
#ifndef UNSIGNED
        // MIN / -1 overflows; the CPU wraps it to MIN, which is -x in two's complement.
        if (y == C(-1)) return -x;
#endif
        return x / y;
    }
    case BIN_MOD:
    case BIN_FMOD: {
        if (y == C(0)) return C(0);
#ifndef UNSIGNED
        if (y == C(-1)) return C(0);
#endif
        C r = x - y * (x / y);
#ifndef UNSIGNED
        if (p.op == BIN_MOD && r != C(0) && ((r < C(0)) != (y < C(0)))) r += y;
#endif
        return r;
    }
    case BIN_MIN: return min(x, y);
    case BIN_MAX: return max(x, y);
    case BIN_AND: return x & y;
    case BIN_OR: return x | y;
    case BIN_XOR: return x ^ y;
    case BIN_SHL: return (y < C(0) || y >= C(BITS)) ? C(0) : (x << y);
    case BIN_SHR: return (y < C(0) || y >= C(BITS)) ? C(0) : (x >> y);
#endif
    case BIN_PRELU: return x < C(0) ? x * y : x;
    default: return x;  // BIN_COPY
    }
}
#endif

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
    C x = C(p.a.v[ia]);
    C y = C(p.b.v[ib]);
#ifdef CMP
    p.y.v[i] = apply(x, y);
#else
    p.y.v[i] = T(apply(x, y));
#endif
}
