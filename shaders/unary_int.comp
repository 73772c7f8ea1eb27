#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// unary_int: y = f(x) elementwise over integers and bools (ops/elementwise/unary.rs): Neg, Abs,
// Sign, Relu, BitwiseNot, Not, by the same op codes as unary.comp. Results wrap to the element
// type as on the CPU (Neg/Abs of MIN give MIN). The u8 variant also serves bool (Not).
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant i8 DT_I8
// @variant u8 DT_U8
// @variant i16 DT_I16
// @variant u16 DT_U16
// @variant u32 DT_U32
// @variant u64 DT_U64
#include "types.glsl"
#include "opcodes.glsl"
#if defined(DT_U8) || defined(DT_U16) || defined(DT_U32) || defined(DT_U64)
#define UNSIGNED 1
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    uint op;
} p;

A apply(A x) {
    switch (p.op) {
#ifdef UNSIGNED
    case UN_NEG: return A(0) - x;
    case UN_ABS: return x;
    case UN_SIGN: return x != A(0) ? A(1) : A(0);
    case UN_RELU: return x;
#else
    case UN_NEG: return -x;
    case UN_ABS: return x < A(0) ? -x : x;
    case UN_SIGN: return x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0));
    case UN_RELU: return x < A(0) ? A(0) : x;
#endif
    case UN_BITWISE_NOT: return ~x;
    case UN_NOT: return x == A(0) ? A(1) : A(0);
    default: return x;
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = T(apply(A(p.x.v[i])));
}
