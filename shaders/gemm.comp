#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
// @variant f32
// @variant f32_splitk SPLIT_K

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
// SPLIT_K (ops/splitk.rs): too few tiles to fill the GPU and a long K. Workgroup z is then
// slice * batch + z: slice `slice` covers k in [slice * KSLICE, +KSLICE) (a multiple of BK)
// and writes its raw sums (no alpha, C or beta) to y, a float scratch laid out
// [slices][batch][M][N]; shaders/gemm_splitk_reduce.comp adds the slices and applies the
// rest. C is unused and the words of rsC and csC carry the slice count and KSLICE instead.
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
#ifdef SPLIT_K
    uint SPLITS;
    uint KSLICE;
#else
    uint rsC;
    uint csC;
#endif
    float alpha;
    float beta;
    uint has_c;
    uint offA;
    uint offB;
    uint offY;
} p;

const uint BM = 64;
const uint BN = 64;
const uint BK = 16;
const uint THREADS = 256;

// Both tiles are stored k-major so the inner loop reads rows of them; the +1 padding spreads
// the column-wise stores of a k-contiguous operand (A untransposed, B transposed) over banks.
shared float As[BK][BM + 1];
shared float Bs[BK][BN + 1];

void main() {
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint tid = ty * 16u + tx;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;

    uint z = gl_WorkGroupID.z;
    uint kBegin = 0u, kEnd = p.K;
#ifdef SPLIT_K
    uint nbatch = gl_NumWorkGroups.z / p.SPLITS;
    uint slice = z / nbatch;
    z -= slice * nbatch;
    kBegin = slice * p.KSLICE;
    kEnd = min(p.K, kBegin + p.KSLICE);
#endif
    uint i2 = z % p.nb2;
    uint t = z / p.nb2;
    uint i1 = t % p.nb1;
    uint i0 = t / p.nb1;
    uint offA = p.offA + i0 * p.bA0 + i1 * p.bA1 + i2 * p.bA2;
    uint offB = p.offB + i0 * p.bB0 + i1 * p.bB1 + i2 * p.bB2;

    // Neighbouring invocations load along whichever axis is contiguous in memory.
    bool aKFast = p.csA == 1u;
    bool bNFast = p.csB == 1u || p.rsB != 1u;

    float acc[4][4];
    for (uint i = 0u; i < 4u; ++i) {
        for (uint j = 0u; j < 4u; ++j) {
            acc[i][j] = 0.0;
        }
    }

    // Slices start at multiples of BK: only the last one reaches past K, where loads give 0.
    for (uint k0 = kBegin; k0 < kEnd; k0 += BK) {
        for (uint l = 0u; l < (BM * BK) / THREADS; ++l) {
            uint idx = tid + l * THREADS;
            uint r = aKFast ? idx / BK : idx % BM;
            uint q = aKFast ? idx % BK : idx / BM;
            uint gm = m0 + r;
            uint gk = k0 + q;
            As[q][r] = (gm < p.M && gk < p.K) ? p.a.v[offA + gm * p.rsA + gk * p.csA] : 0.0;
        }
        for (uint l = 0u; l < (BN * BK) / THREADS; ++l) {
            uint idx = tid + l * THREADS;
            uint q = bNFast ? idx / BN : idx % BK;
            uint c = bNFast ? idx % BN : idx / BK;
            uint gk = k0 + q;
            uint gn = n0 + c;
            Bs[q][c] = (gk < p.K && gn < p.N) ? p.b.v[offB + gk * p.rsB + gn * p.csB] : 0.0;
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

#ifdef SPLIT_K
    uint offY = p.offY + gl_WorkGroupID.z * p.M * p.N;
#else
    uint offY = p.offY + z * p.M * p.N;
#endif
    for (uint i = 0u; i < 4u; ++i) {
        uint m = m0 + ty + 16u * i;
        if (m >= p.M) continue;
        for (uint j = 0u; j < 4u; ++j) {
            uint n = n0 + tx + 16u * j;
            if (n >= p.N) continue;
#ifdef SPLIT_K
            float v = acc[i][j];
#else
            float v = p.alpha * acc[i][j];
            if (p.has_c != 0u) {
                v += p.beta * p.c.v[m * p.rsC + n * p.csC];
            }
#endif
            p.y.v[offY + m * p.N + n] = v;
        }
    }
}
