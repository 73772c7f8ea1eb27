// gemm.glsl: the body of gemm.comp and of gemm_splitk.comp (SPLIT_K defined), included after
// their push-constant blocks `p`, which differ only in the words rsC and csC (SPLITS and KSLICE
// in the split form). See those files for what they compute.

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
