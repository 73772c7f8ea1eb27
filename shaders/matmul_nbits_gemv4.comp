#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// MatMulNBits for few rows of A with the usual int4 layout (4 bits, blocks a multiple of 32
// values, K a multiple of 32), ops/matmul_nbits/gpu.rs; matmul_nbits_gemv.comp takes the
// rest. Each load of B is 16 bytes: 32 values of one block, so that one scale and zero point
// serve them all, and A is read 16 bytes at a time beside them (L1 serves the columns of a
// workgroup, which all read the same A). A workgroup computes 256 / lanes columns of up to
// ROWS rows of Y (rows m0 = ROWS * workgroup z on), `lanes` invocations per column striding
// over its 16-byte pieces; their partial sums are added in shared memory. Column groups fold
// into y past 65,535 workgroups. See matmul_nbits.glsl for the layouts and push constants.
layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer Quads { uvec4 v[]; };
#define NBITS_A Quads
#define NBITS_B Quads
#include "matmul_nbits.glsl"

layout(local_size_x = 256) in;

const uint ROWS = 4u;
#if defined(DT_F16)
const uint A_QUADS = 4u;
#else
const uint A_QUADS = 8u;
#endif

shared float red[ROWS][256];

// The 32 values of A's row m from k0 on, against the 32 values of qz.
float dot32(uint m, uint k0, float qz[32]) {
    uint first = (m * p.K + k0) / (32u / A_QUADS);
    float s = 0.0;
    for (uint j = 0u; j < A_QUADS; ++j) {
        uvec4 w = p.a.v[first + j];
#if defined(DT_F16)
        for (uint c = 0u; c < 4u; ++c) {
            vec2 h = unpackHalf2x16(w[c]);
            s = fma(h.x, qz[j * 8u + 2u * c], s);
            s = fma(h.y, qz[j * 8u + 2u * c + 1u], s);
        }
#else
        for (uint c = 0u; c < 4u; ++c) {
            s = fma(uintBitsToFloat(w[c]), qz[j * 4u + c], s);
        }
#endif
    }
    return s;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint lanes = (p.flags >> 3u) & 63u;
    uint lane = tid % lanes;
    uint cols = 256u / lanes;
    uint n = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * cols + tid / lanes;
    uint m0 = gl_WorkGroupID.z * ROWS;
    uint rows = min(ROWS, p.M - m0);
    float acc[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        acc[r] = 0.0;
    }
    if (n < p.N) {
        uint pieces = p.K / 32u;
        uint perBlock = p.blockSize / 32u;
        uint rowB = n * (p.rowWords / 4u);
        for (uint c = lane; c < pieces; c += lanes) {
            uvec4 w = p.b.v[rowB + c];
            uint blk = c / perBlock;
            float zp = zero_point(n, blk);
            float qz[32];
            for (uint j = 0u; j < 4u; ++j) {
                for (uint i = 0u; i < 8u; ++i) {
                    qz[j * 8u + i] = float((w[j] >> (4u * i)) & 15u) - zp;
                }
            }
            float s = block_scale(n, blk);
            for (uint r = 0u; r < ROWS; ++r) {
                if (r < rows) {
                    acc[r] = fma(s, dot32(m0 + r, c * 32u, qz), acc[r]);
                }
            }
        }
    }
    for (uint r = 0u; r < ROWS; ++r) {
        red[r][tid] = acc[r];
    }
    barrier();
    for (uint s = lanes / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            for (uint r = 0u; r < ROWS; ++r) {
                red[r][tid] += red[r][tid + s];
            }
        }
        barrier();
    }
    if (lane == 0u && n < p.N) {
        float b = bias_of(n);
        for (uint r = 0u; r < rows; ++r) {
            p.y.v[(m0 + r) * p.N + n] = T(red[r][tid] + b);
        }
    }
}
