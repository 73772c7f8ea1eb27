#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f16 DT_F16
#include "types.glsl"

// gemm for element types other than f32 (ops/matmul/mod.rs): the same contract, push
// constants and launch grid as gemm.comp (Y[z] = alpha * A[z] * B[z] + beta * C, a 16x16
// workgroup per 64x64 tile of Y, 4x4 outputs per invocation), without the shared-memory
// staging: each invocation reads its rows and columns straight from memory and accumulates in
// float. Correct for any M, N, K; gemm.comp is the fast path for f32.
layout(local_size_x = 16, local_size_y = 16) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
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

void main() {
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint m0 = gl_WorkGroupID.y * 64u;
    uint n0 = gl_WorkGroupID.x * 64u;
    uint z = gl_WorkGroupID.z;
    uint i2 = z % p.nb2;
    uint t = z / p.nb2;
    uint i1 = t % p.nb1;
    uint i0 = t / p.nb1;
    uint offA = p.offA + i0 * p.bA0 + i1 * p.bA1 + i2 * p.bA2;
    uint offB = p.offB + i0 * p.bB0 + i1 * p.bB1 + i2 * p.bB2;
    uint offY = p.offY + z * p.M * p.N;
    for (uint i = 0u; i < 4u; ++i) {
        uint m = m0 + ty + 16u * i;
        if (m >= p.M) continue;
        for (uint j = 0u; j < 4u; ++j) {
            uint n = n0 + tx + 16u * j;
            if (n >= p.N) continue;
            float acc = 0.0;
            for (uint k = 0u; k < p.K; ++k) {
                acc = fma(float(p.a.v[offA + m * p.rsA + k * p.csA]),
                          float(p.b.v[offB + k * p.rsB + n * p.csB]), acc);
            }
            float v = p.alpha * acc;
            if (p.has_c != 0u) {
                v += p.beta * float(p.c.v[m * p.rsC + n * p.csC]);
            }
            p.y.v[offY + m * p.N + n] = T(v);
        }
    }
}
