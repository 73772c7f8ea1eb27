#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32

// gemm: Y[z] = alpha * A[z] * B[z] + beta * C over f32, for MatMul and Gemm (ops/matmul.rs).
//
// A[z] is M x K with element (i, p) at offA(z) + i * rsA + p * csA, B[z] is K x N likewise, so
// transposes are only strides. Batch index z = gl_WorkGroupID.z splits over three batch axes as
// z = (i0 * nb1 + i1) * nb2 + i2, each operand having its own batch strides (0 = broadcast),
// from base offsets offA, offB, offY (further batch axes are further dispatches).
// C (when has_c) is M x N with strides rsC, csC (0 = broadcast); Y is dense [batch, M, N].
//
// Each 16x16 workgroup computes a 64x64 tile of Y, 4x4 elements per invocation, streaming
// 64x16 slices of A and 16x64 slices of B through shared memory (8.1 KiB). Out-of-range rows,
// columns and k are loaded as 0, so any M, N, K (K = 0 included) is handled.
//
// gemm_splitk.comp is the same product split along K, over the same body (gemm.glsl).
layout(local_size_x = 16, local_size_y = 16) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    In b;
    In c;
    Out y;
    uint M;
    uint N;
    uint K;
    uint nb1;
    uint nb2;
    uint rsA;
    uint csA;
    uint bA0;
    uint bA1;
    uint bA2;
    uint rsB;
    uint csB;
    uint bB0;
    uint bB1;
    uint bB2;
    uint rsC;
    uint csC;
    float alpha;
    float beta;
    uint has_c;
    uint offA;
    uint offB;
    uint offY;
} p;

#include "gemm.glsl"
