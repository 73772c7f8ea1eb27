#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "matmul_nbits.glsl"

// MatMulNBits for many rows of A (prefill), ops/matmul_nbits/gpu.rs: gemm.comp's scheme, a
// 16x16 workgroup per 64x64 tile of Y and 4x4 outputs per invocation, streaming 64x32 slices
// of A and 32x64 slices of B through shared memory (16.3 KiB); B's slice is dequantized from
// its packed words (one or two per invocation) as it is stored there, so the weights stay
// packed in memory. Out-of-range rows, columns and k load as 0. See matmul_nbits.glsl for the
// layouts and the push constants.
layout(local_size_x = 16, local_size_y = 16) in;

const uint BM = 64u;
const uint BN = 64u;
const uint BK = 32u;
const uint THREADS = 256u;

shared float As[BK][BM + 1u];
shared float Bs[BK][BN + 1u];

void main() {
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint tid = ty * 16u + tx;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint vpw = 32u / p.bits;
    uint mask = (1u << p.bits) - 1u;
    // BK is a multiple of every vpw (4, 8 or 16), so each k-slice is whole words.
    uint stepWords = BK / vpw;
    uint tileWords = BN * stepWords;

    float acc[4][4];
    for (uint i = 0u; i < 4u; ++i) {
        for (uint j = 0u; j < 4u; ++j) {
            acc[i][j] = 0.0;
        }
    }

    for (uint k0 = 0u; k0 < p.K; k0 += BK) {
        for (uint l = 0u; l < (BM * BK) / THREADS; ++l) {
            uint idx = tid + l * THREADS;
            uint r = idx / BK;
            uint q = idx % BK;
            uint gm = m0 + r;
            uint gk = k0 + q;
            As[q][r] = (gm < p.M && gk < p.K) ? float(p.a.v[gm * p.K + gk]) : 0.0;
        }
        for (uint idx = tid; idx < tileWords; idx += THREADS) {
            uint c = idx / stepWords;
            uint q0 = (idx % stepWords) * vpw;
            uint gn = n0 + c;
            uint kw = k0 + q0;
            if (gn < p.N && kw < p.K) {
                uint word = p.b.v[gn * p.rowWords + kw / vpw];
                uint blk = kw / p.blockSize;
                float s = block_scale(gn, blk);
                float zp = zero_point(gn, blk);
                for (uint i = 0u; i < vpw; ++i) {
                    float v = (float((word >> (i * p.bits)) & mask) - zp) * s;
                    Bs[q0 + i][c] = kw + i < p.K ? v : 0.0;
                }
            } else {
                for (uint i = 0u; i < vpw; ++i) {
                    Bs[q0 + i][c] = 0.0;
                }
            }
        }
        barrier();
        for (uint q = 0u; q < BK; ++q) {
            float av[4];
            float bv[4];
            for (uint i = 0u; i < 4u; ++i) {
                av[i] = As[q][ty + 16u * i];
                bv[i] = Bs[q][tx + 16u * i];
            }
            for (uint i = 0u; i < 4u; ++i) {
                for (uint j = 0u; j < 4u; ++j) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
        barrier();
    }

    for (uint i = 0u; i < 4u; ++i) {
        uint m = m0 + ty + 16u * i;
        if (m >= p.M) continue;
        for (uint j = 0u; j < 4u; ++j) {
            uint n = n0 + tx + 16u * j;
            if (n >= p.N) continue;
            p.y.v[m * p.N + n] = T(acc[i][j] + bias_of(n));
        }
    }
}
