#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
// @variant f16 T=float16_t
// @variant bf16 T=bfloat16_t BF16
#ifdef BF16
#extension GL_EXT_bfloat16 : require
#endif

// gemm_coop_any: Y[z] = alpha * A[z] * B[z] + beta * C on cooperative matrices (VK_KHR_
// cooperative_matrix, subgroup scope, 16x16x16 with f32 accumulators) for operands of any
// alignment (gemm_coop.comp takes 16-byte aligned ones, 8x faster). Half-precision operands, Y in
// their type. Push constants: gemm.comp's, word for word.
//
// 128 invocations in 4 subgroups of 32 (ops/matmul uses it only where the subgroup size is
// 32) compute a 128x128 tile of Y, each subgroup a 64x64 quarter as 4x4 accumulators. Each
// step stages a 128x32 slice of A and a 32x128 slice of B in shared memory, double-buffered:
// the next slice's global loads are in flight while the tensor cores work on this one. Slices
// are stored as they lie in memory (row-major, or transposed and read back as column-major
// matrices), 16 bytes at a time where the strides, offsets and contiguous extents allow
// (`vec` below: the usual case), else element by element with bounds; rows are padded by 16
// bytes against bank conflicts. Operands move as raw 16-bit words: only the matrices and the
// epilogue need the element type. The epilogue goes through a per-subgroup 16x16 f32 scratch
// so alpha, C and the bounds apply element by element.
layout(local_size_x = 128) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) readonly buffer Raw { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Raw8 { uvec4 v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    Raw a;
    Raw b;
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
const uint BK = 32;
const uint THREADS = 128;
// Row strides in 16-byte units: a 32-wide row is 4 units (+1 pad), a 128-wide row 16 (+1).
const uint S32 = 5;
const uint S128 = 17;
// One stage of either operand holds at most 128 rows of 32 or 32 rows of 128, padded.
const uint STAGE = 128 * S32;
// Per thread and stage: 128 * 32 / 8 / THREADS = 4 loads of 16 bytes per operand.
const uint PER = (BM * BK / 8) / THREADS;

shared uvec4 As[2][STAGE];
shared uvec4 Bs[2][STAGE];
shared float Cs[4][16 * 16];

uint offA;
uint offB;
bool aRow;   // A's k is contiguous (csA == 1): stage [BM][BK]; else [BK][BM]
bool bRow;   // B's n is contiguous (csB == 1): stage [BK][BN]; else [BN][BK]
bool aVec;
bool bVec;

uvec4 packRaw(Raw r, uint base, uint step, uint count) {
    uint w[8];
    [[unroll]] for (uint e = 0u; e < 8u; ++e) {
        w[e] = e < count ? uint(r.v[base + e * step]) : 0u;
    }
    return uvec4(w[0] | (w[1] << 16), w[2] | (w[3] << 16), w[4] | (w[5] << 16), w[6] | (w[7] << 16));
}

// The 16-byte unit `s` of A's slice at k0: where it goes in the stage, and its value.
uvec4 loadA(uint s, uint m0, uint k0, out uint at) {
    uint outer, inner;
    if (aRow) {
        outer = s / (BK / 8u);
        inner = s % (BK / 8u);
        at = outer * S32 + inner;
        uint m = m0 + outer;
        uint k = k0 + inner * 8u;
        if (m >= p.M || k >= p.K) return uvec4(0);
        uint base = offA + m * p.rsA + k;
        if (aVec) return Raw8(p.a).v[base / 8u];
        return packRaw(p.a, base, 1u, min(8u, p.K - k));
    }
    outer = s / (BM / 8u);
    inner = s % (BM / 8u);
    at = outer * S128 + inner;
    uint k = k0 + outer;
    uint m = m0 + inner * 8u;
    if (k >= p.K || m >= p.M) return uvec4(0);
    uint base = offA + k * p.csA + m;
    if (aVec) return Raw8(p.a).v[base / 8u];
    return packRaw(p.a, base, p.rsA, min(8u, p.M - m));
}

uvec4 loadB(uint s, uint n0, uint k0, out uint at) {
    uint outer, inner;
    if (bRow) {
        outer = s / (BN / 8u);
        inner = s % (BN / 8u);
        at = outer * S128 + inner;
        uint k = k0 + outer;
        uint n = n0 + inner * 8u;
        if (k >= p.K || n >= p.N) return uvec4(0);
        uint base = offB + k * p.rsB + n;
        if (bVec) return Raw8(p.b).v[base / 8u];
        return packRaw(p.b, base, 1u, min(8u, p.N - n));
    }
    outer = s / (BK / 8u);
    inner = s % (BK / 8u);
    at = outer * S32 + inner;
    uint n = n0 + outer;
    uint k = k0 + inner * 8u;
    if (n >= p.N || k >= p.K) return uvec4(0);
    uint base = offB + n * p.csB + k;
    if (bVec) return Raw8(p.b).v[base / 8u];
    return packRaw(p.b, base, p.rsB, min(8u, p.K - k));
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint wm = (sg / 2u) * 64u;
    uint wn = (sg % 2u) * 64u;

    uint z = gl_WorkGroupID.z;
    uint i2 = z % p.nb2;
    uint t = z / p.nb2;
    uint i1 = t % p.nb1;
    uint i0 = t / p.nb1;
    offA = p.offA + i0 * p.bA0 + i1 * p.bA1 + i2 * p.bA2;
    offB = p.offB + i0 * p.bB0 + i1 * p.bB1 + i2 * p.bB2;
    uint offY = p.offY + z * p.M * p.N;
    aRow = p.csA == 1u;
    bRow = p.csB == 1u;
    // 16-byte loads need every row start 16-byte aligned (buffers are) and no unit straddling
    // the contiguous extent's end.
    aVec = offA % 8u == 0u && (aRow ? (p.rsA % 8u == 0u && p.K % 8u == 0u)
                                    : (p.csA % 8u == 0u && p.M % 8u == 0u));
    bVec = offB % 8u == 0u && (bRow ? (p.rsB % 8u == 0u && p.N % 8u == 0u)
                                    : (p.csB % 8u == 0u && p.K % 8u == 0u));

    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
        }
    }

    uvec4 ra[PER];
    uvec4 rb[PER];
    uint pa[PER];
    uint pb[PER];
    [[unroll]] for (uint l = 0u; l < PER; ++l) {
        ra[l] = loadA(tid + l * THREADS, m0, 0u, pa[l]);
        rb[l] = loadB(tid + l * THREADS, n0, 0u, pb[l]);
    }
    [[unroll]] for (uint l = 0u; l < PER; ++l) {
        As[0][pa[l]] = ra[l];
        Bs[0][pb[l]] = rb[l];
    }
    barrier();

    uint steps = (p.K + BK - 1u) / BK;
    for (uint st = 0u; st < steps; ++st) {
        uint cur = st & 1u;
        bool more = st + 1u < steps;
        if (more) {
            [[unroll]] for (uint l = 0u; l < PER; ++l) {
                ra[l] = loadA(tid + l * THREADS, m0, (st + 1u) * BK, pa[l]);
                rb[l] = loadB(tid + l * THREADS, n0, (st + 1u) * BK, pb[l]);
            }
        }
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> fa[4];
            coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> fb[4];
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                uint m = wm + i * 16u;
                if (aRow) {
                    coopMatLoad(fa[i], As[cur], m * S32 + kk / 8u, S32, gl_CooperativeMatrixLayoutRowMajor);
                } else {
                    coopMatLoad(fa[i], As[cur], kk * S128 + m / 8u, S128, gl_CooperativeMatrixLayoutColumnMajor);
                }
            }
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                uint n = wn + j * 16u;
                if (bRow) {
                    coopMatLoad(fb[j], Bs[cur], kk * S128 + n / 8u, S128, gl_CooperativeMatrixLayoutRowMajor);
                } else {
                    coopMatLoad(fb[j], Bs[cur], n * S32 + kk / 8u, S32, gl_CooperativeMatrixLayoutColumnMajor);
                }
            }
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
                }
            }
        }
        if (more) {
            [[unroll]] for (uint l = 0u; l < PER; ++l) {
                As[cur ^ 1u][pa[l]] = ra[l];
                Bs[cur ^ 1u][pb[l]] = rb[l];
            }
        }
        barrier();
    }

    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            coopMatStore(acc[i][j], Cs[sg], 0, 16, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
                uint m = m0 + wm + i * 16u + e / 16u;
                uint n = n0 + wn + j * 16u + e % 16u;
                if (m < p.M && n < p.N) {
                    float v = p.alpha * Cs[sg][e];
                    if (p.has_c != 0u) {
                        v += p.beta * float(p.c.v[m * p.rsC + n * p.csC]);
                    }
                    p.y.v[offY + m * p.N + n] = T(v);
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}
