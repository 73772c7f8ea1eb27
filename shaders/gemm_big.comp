#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// gemm_big: the same contract and push constants as gemm.comp (read its header), tuned for
// large products: each 256-invocation workgroup computes a 128x128 tile of Y, 8x8 elements per
// invocation, so every value read from shared memory feeds 8 FMAs instead of 4 and the kernel
// is bound by arithmetic, not by shared-memory bandwidth.
//
// - A 128x8 slice of A and an 8x128 slice of B go through shared memory per step, stored
//   k-major; two buffers alternate, so the next slice is written while this one is read and
//   one barrier per step suffices (16 KiB in all).
// - The next slices' global loads are issued into registers before this step's arithmetic,
//   hiding their latency behind it.
// - An invocation's 8 rows are two groups of 4 (ty*4 and 64 + ty*4), likewise its columns, so
//   its shared-memory reads are vec4-wide and a warp's reads hit distinct banks.
// Out-of-range rows, columns and k load as 0, so any M, N, K is correct; the planner picks this
// kernel only where M and N are large enough to fill the tiles.
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

const uint BM = 128;
const uint BN = 128;
const uint BK = 8;

shared vec4 As[2][BK][BM / 4];
shared vec4 Bs[2][BK][BN / 4];

// Each invocation loads 4 elements of each slice per step (128 * 8 / 256).
float ra[4];
float rb[4];

uint offA;
uint offB;
bool aKFast;
bool bNFast;

// Element l of this invocation's share of A's slice at k0: when A is contiguous along k, a
// run of 8 invocations covers one row's 8 k values (32 contiguous bytes); otherwise
// neighbouring invocations walk down the m axis.
void loadA(uint tid, uint m0, uint k0) {
    for (uint l = 0u; l < 4u; ++l) {
        uint idx = tid + l * 256u;
        uint r = aKFast ? idx / BK : idx % BM;
        uint q = aKFast ? idx % BK : idx / BM;
        uint gm = m0 + r;
        uint gk = k0 + q;
        ra[l] = (gm < p.M && gk < p.K) ? p.a.v[offA + gm * p.rsA + gk * p.csA] : 0.0;
    }
}

void storeA(uint tid, uint buf) {
    for (uint l = 0u; l < 4u; ++l) {
        uint idx = tid + l * 256u;
        uint r = aKFast ? idx / BK : idx % BM;
        uint q = aKFast ? idx % BK : idx / BM;
        As[buf][q][r >> 2][r & 3u] = ra[l];
    }
}

void loadB(uint tid, uint n0, uint k0) {
    for (uint l = 0u; l < 4u; ++l) {
        uint idx = tid + l * 256u;
        uint q = bNFast ? idx / BN : idx % BK;
        uint c = bNFast ? idx % BN : idx / BK;
        uint gk = k0 + q;
        uint gn = n0 + c;
        rb[l] = (gk < p.K && gn < p.N) ? p.b.v[offB + gk * p.rsB + gn * p.csB] : 0.0;
    }
}

void storeB(uint tid, uint buf) {
    for (uint l = 0u; l < 4u; ++l) {
        uint idx = tid + l * 256u;
        uint q = bNFast ? idx / BN : idx % BK;
        uint c = bNFast ? idx % BN : idx / BK;
        Bs[buf][q][c >> 2][c & 3u] = rb[l];
    }
}

void main() {
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint tid = ty * 16u + tx;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;

    uint z = gl_WorkGroupID.z;
    uint i2 = z % p.nb2;
    uint t = z / p.nb2;
    uint i1 = t % p.nb1;
    uint i0 = t / p.nb1;
    offA = p.offA + i0 * p.bA0 + i1 * p.bA1 + i2 * p.bA2;
    offB = p.offB + i0 * p.bB0 + i1 * p.bB1 + i2 * p.bB2;
    aKFast = p.csA == 1u;
    bNFast = p.csB == 1u || p.rsB != 1u;

    vec4 acc[8][2];
    for (uint i = 0u; i < 8u; ++i) {
        acc[i][0] = vec4(0.0);
        acc[i][1] = vec4(0.0);
    }

    loadA(tid, m0, 0u);
    loadB(tid, n0, 0u);
    storeA(tid, 0u);
    storeB(tid, 0u);
    barrier();

    uint buf = 0u;
    for (uint k0 = 0u; k0 < p.K; k0 += BK) {
        bool more = k0 + BK < p.K;
        if (more) {
            loadA(tid, m0, k0 + BK);
            loadB(tid, n0, k0 + BK);
        }
        for (uint q = 0u; q < BK; ++q) {
            vec4 a0 = As[buf][q][ty];
            vec4 a1 = As[buf][q][16u + ty];
            vec4 b0 = Bs[buf][q][tx];
            vec4 b1 = Bs[buf][q][16u + tx];
            float av[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
            for (uint i = 0u; i < 8u; ++i) {
                acc[i][0] = fma(vec4(av[i]), b0, acc[i][0]);
                acc[i][1] = fma(vec4(av[i]), b1, acc[i][1]);
            }
        }
        if (more) {
            // The other buffer was last read before the previous barrier: free to overwrite.
            storeA(tid, buf ^ 1u);
            storeB(tid, buf ^ 1u);
        }
        barrier();
        buf ^= 1u;
    }

    uint offY = p.offY + z * p.M * p.N;
    for (uint i = 0u; i < 8u; ++i) {
        uint m = m0 + (i < 4u ? ty * 4u + i : 64u + ty * 4u + (i - 4u));
        if (m >= p.M) continue;
        for (uint h = 0u; h < 2u; ++h) {
            for (uint j = 0u; j < 4u; ++j) {
                uint n = n0 + h * 64u + tx * 4u + j;
                if (n >= p.N) continue;
                float v = p.alpha * acc[i][h][j];
                if (p.has_c != 0u) {
                    v += p.beta * p.c.v[m * p.rsC + n * p.csC];
                }
                p.y.v[offY + m * p.N + n] = v;
            }
        }
    }
}
