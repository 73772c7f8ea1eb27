#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "matmul_nbits.glsl"

// MatMulNBits for few rows of A (decode: one token, a few beams), ops/matmul_nbits/gpu.rs.
// Memory-bound on B, which is read once, packed: each workgroup computes 8 columns n of up to
// ROWS rows of Y (rows m0 = ROWS * workgroup z on), 32 invocations per column striding over
// the 32-bit words of row n of B, each dequantizing its word in registers against every row
// of A; the 32 partial sums of each column are then added in shared memory. Column groups fold
// into y past 65,535 workgroups. See matmul_nbits.glsl for the layouts and the push constants.
layout(local_size_x = 256) in;

const uint LANES = 32u;
const uint COLS = 256u / LANES;
const uint ROWS = 4u;

shared float red[ROWS][256];

// The values of one word, less the zero point, against A[m0 + r][k0 ...] for r < rows. Called
// with literal bits and count, so that the loop is unrolled with constant shifts.
void dot_word(uint word, uint bits, uint count, float zp, uint m0, uint rows, uint k0,
              inout float part[ROWS]) {
    uint mask = (1u << bits) - 1u;
    for (uint i = 0u; i < count; ++i) {
        float q = float((word >> (i * bits)) & mask) - zp;
        for (uint r = 0u; r < ROWS; ++r) {
            if (r < rows) {
                part[r] = fma(float(p.a.v[(m0 + r) * p.K + k0 + i]), q, part[r]);
            }
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % LANES;
    uint n = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * COLS + tid / LANES;
    uint m0 = gl_WorkGroupID.z * ROWS;
    uint rows = min(ROWS, p.M - m0);
    float acc[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        acc[r] = 0.0;
    }
    if (n < p.N) {
        uint vpw = 32u / p.bits;
        uint wordsPerBlock = p.blockSize / vpw;
        uint words = (p.K + vpw - 1u) / vpw;
        uint rowB = n * p.rowWords;
        for (uint w = lane; w < words; w += LANES) {
            uint word = p.b.v[rowB + w];
            uint blk = w / wordsPerBlock;
            float zp = zero_point(n, blk);
            uint k0 = w * vpw;
            uint count = min(vpw, p.K - k0);
            float part[ROWS];
            for (uint r = 0u; r < ROWS; ++r) {
                part[r] = 0.0;
            }
            // Uniform but for the last word of a row whose K ends inside it.
            if (count == vpw && p.bits == 4u) {
                dot_word(word, 4u, 8u, zp, m0, rows, k0, part);
            } else if (count == vpw && p.bits == 8u) {
                dot_word(word, 8u, 4u, zp, m0, rows, k0, part);
            } else if (count == vpw && p.bits == 2u) {
                dot_word(word, 2u, 16u, zp, m0, rows, k0, part);
            } else {
                dot_word(word, p.bits, count, zp, m0, rows, k0, part);
            }
            float s = block_scale(n, blk);
            for (uint r = 0u; r < ROWS; ++r) {
                acc[r] = fma(s, part[r], acc[r]);
            }
        }
    }
    for (uint r = 0u; r < ROWS; ++r) {
        red[r][tid] = acc[r];
    }
    barrier();
    for (uint s = LANES / 2u; s > 0u; s >>= 1u) {
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
