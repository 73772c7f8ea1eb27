#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
// @variant nn_f16 T=float16_t
// @variant nt_f16 T=float16_t B_T
// @variant tn_f16 T=float16_t A_T
// @variant tt_f16 T=float16_t A_T B_T
// @variant nn_exact_f16 T=float16_t EXACT
// @variant nt_exact_f16 T=float16_t B_T EXACT
// @variant tn_exact_f16 T=float16_t A_T EXACT
// @variant tt_exact_f16 T=float16_t A_T B_T EXACT
// @variant nn_bf16 T=bfloat16_t BF16
// @variant nt_bf16 T=bfloat16_t BF16 B_T
// @variant tn_bf16 T=bfloat16_t BF16 A_T
// @variant tt_bf16 T=bfloat16_t BF16 A_T B_T
// @variant nn_exact_bf16 T=bfloat16_t BF16 EXACT
// @variant nt_exact_bf16 T=bfloat16_t BF16 B_T EXACT
// @variant tn_exact_bf16 T=bfloat16_t BF16 A_T EXACT
// @variant tt_exact_bf16 T=bfloat16_t BF16 A_T B_T EXACT
#ifdef BF16
#extension GL_EXT_bfloat16 : require
#endif

// gemm_coop: Y[z] = alpha * A[z] * B[z] + beta * C on cooperative matrices (VK_KHR_
// cooperative_matrix, subgroup scope, 16x16x16 with f32 accumulators): the portable
// tensor-core path, for operands whose every row starts on a 16-byte boundary and outputs of
// whole 16x16 fragments (M and N multiples of 16; ops/matmul checks, and gemm_coop_any.comp
// takes the rest). Push constants: gemm.comp's, word for word.
//
// Everything the loop does not need is decided at compile time, because on NVIDIA's driver
// code that never runs still costs registers the main loop then lacks (the lesson of
// gemm_coop2's `exact` variants too). Each variant knows its operands' layouts: A `n`
// (row-major, k contiguous) or `t` (transposed, m contiguous), likewise B (`n`: n contiguous,
// `t`: k contiguous). `exact` variants are for whole 128x128x32 tiles with alpha 1 and no C,
// and check no bounds; the others read zeros past the edges, skip fragments that lie past
// them, and apply alpha and C.
//
// The results never go through memory as f32: an epilogue that stored the accumulators to a
// shared scratch to treat them element by element made the whole kernel 8x slower on an H100
// (30 against 265 TFLOP/s on 4096^3 f16, coop_gemm_report), as did the old kernel, now
// gemm_coop_any. So alpha and beta scale whole fragments, C is staged in shared memory in its
// own type and loaded back as fragments, and each fragment is converted and stored directly.
//
// 128 invocations in 4 subgroups of 32 (ops/matmul uses it only where the subgroup size is
// always 32) compute a 128x128 tile of Y, each subgroup a 64x64 quarter as 4x4 accumulators.
// Each 32-deep step of A and B is staged in shared memory as it lies in memory, 16 bytes at a
// time, double-buffered: the next step's global loads are in flight while the tensor cores
// work on this one. Staged rows are padded by 16 bytes, so the fragment loads' 8 rows of 16
// bytes fall in distinct banks.
layout(local_size_x = 128) in;
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Raw8 { uvec4 v[]; };
layout(buffer_reference, scalar) readonly buffer Raw { uint16_t v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    Raw8 a;
    Raw8 b;
    Raw c;
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
// Staged row strides in 16-byte units: a 32-wide row is 4 units (+1 pad), a 128-wide row 16
// (+1). A stage holds 128 rows of 32 or 32 rows of 128.
const uint S32 = 5;
const uint S128 = 17;
const uint STAGE = 128 * S32;
// 16-byte units per operand and stage, per invocation: 128 * 32 / 8 / 128.
const uint PER = 4;

// A's two stages, then B's: S[(operand * 2 + stage) * STAGE ...]. One array, so that the
// epilogue can stage a whole 128x128 tile of C (128 rows of 17 units) across all four.
shared uvec4 S[4 * STAGE];
const uint A0 = 0;
const uint B0 = 2 * STAGE;

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint wm = (sg / 2u) * 64u;
    uint wn = (sg % 2u) * 64u;
    uint z = gl_WorkGroupID.z;
    uint i2 = z % p.nb2;
    uint t = z / p.nb2;
    uint i1 = t % p.nb1;
    uint i0 = t / p.nb1;
    // Element offsets, strides and extents are multiples of 8 (ops/matmul checks): in
    // 16-byte units they are exact.
    uint offA = (p.offA + i0 * p.bA0 + i1 * p.bA1 + i2 * p.bA2) / 8u;
    uint offB = (p.offB + i0 * p.bB0 + i1 * p.bB1 + i2 * p.bB2) / 8u;
    uint offY = p.offY + z * p.M * p.N;

    // Each of this invocation's 16-byte units of a step: where it comes from at k0 = 0 (in
    // units), where it goes in the stage, and (at edges) the row and column it must lie within.
    uint ga[PER];
    uint sa[PER];
    uint gb[PER];
    uint sb[PER];
#ifndef EXACT
    uvec2 ea[PER];  // (outer index, inner element index) of A's unit, checked against its extents
    uvec2 eb[PER];
#endif
    uint stepA;
    uint stepB;
    [[unroll]] for (uint l = 0u; l < PER; ++l) {
        uint s = tid + l * THREADS;
#ifdef A_T
        // A is K x M in memory (m contiguous): stage [BK][BM].
        uint ro = s / (BM / 8u);
        uint co = s % (BM / 8u);
        ga[l] = offA + ro * (p.csA / 8u) + m0 / 8u + co;
        sa[l] = ro * S128 + co;
#ifndef EXACT
        ea[l] = uvec2(ro, m0 + co * 8u);
#endif
        stepA = BK * (p.csA / 8u);
#else
        // A is M x K (k contiguous): stage [BM][BK].
        uint ro = s / (BK / 8u);
        uint co = s % (BK / 8u);
        ga[l] = offA + (m0 + ro) * (p.rsA / 8u) + co;
        sa[l] = ro * S32 + co;
#ifndef EXACT
        ea[l] = uvec2(m0 + ro, co * 8u);
#endif
        stepA = BK / 8u;
#endif
#ifdef B_T
        // B is N x K in memory (k contiguous): stage [BN][BK].
        uint rb = s / (BK / 8u);
        uint cb = s % (BK / 8u);
        gb[l] = offB + (n0 + rb) * (p.csB / 8u) + cb;
        sb[l] = rb * S32 + cb;
#ifndef EXACT
        eb[l] = uvec2(n0 + rb, cb * 8u);
#endif
        stepB = BK / 8u;
#else
        // B is K x N (n contiguous): stage [BK][BN].
        uint rb = s / (BN / 8u);
        uint cb = s % (BN / 8u);
        gb[l] = offB + rb * (p.rsB / 8u) + n0 / 8u + cb;
        sb[l] = rb * S128 + cb;
#ifndef EXACT
        eb[l] = uvec2(rb, n0 + cb * 8u);
#endif
        stepB = BK * (p.rsB / 8u);
#endif
    }

    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
        }
    }

    uvec4 ra[PER];
    uvec4 rb[PER];
    uint steps = (p.K + BK - 1u) / BK;
    // Loads step `st`'s units into ra/rb (zero past the edges).
#ifdef EXACT
#define LOAD(st) \
    [[unroll]] for (uint l = 0u; l < PER; ++l) { \
        ra[l] = p.a.v[ga[l] + (st) * stepA]; \
        rb[l] = p.b.v[gb[l] + (st) * stepB]; \
    }
#else
#ifdef A_T
#define A_IN(l, k0) (ea[l].x + (k0) < p.K && ea[l].y < p.M)
#else
#define A_IN(l, k0) (ea[l].x < p.M && ea[l].y + (k0) < p.K)
#endif
#ifdef B_T
#define B_IN(l, k0) (eb[l].x < p.N && eb[l].y + (k0) < p.K)
#else
#define B_IN(l, k0) (eb[l].x + (k0) < p.K && eb[l].y < p.N)
#endif
#define LOAD(st) \
    [[unroll]] for (uint l = 0u; l < PER; ++l) { \
        ra[l] = A_IN(l, (st) * BK) ? p.a.v[ga[l] + (st) * stepA] : uvec4(0); \
        rb[l] = B_IN(l, (st) * BK) ? p.b.v[gb[l] + (st) * stepB] : uvec4(0); \
    }
#endif
    LOAD(0u)
    [[unroll]] for (uint l = 0u; l < PER; ++l) {
        S[A0 + sa[l]] = ra[l];
        S[B0 + sb[l]] = rb[l];
    }
    barrier();

    for (uint st = 0u; st < steps; ++st) {
        uint cur = st & 1u;
        bool more = st + 1u < steps;
        if (more) {
            LOAD(st + 1u)
        }
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> fa[4];
            coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> fb[4];
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                uint m = wm + i * 16u;
#ifdef A_T
                coopMatLoad(fa[i], S, A0 + cur * STAGE + kk * S128 + m / 8u, S128,
                            gl_CooperativeMatrixLayoutColumnMajor);
#else
                coopMatLoad(fa[i], S, A0 + cur * STAGE + m * S32 + kk / 8u, S32,
                            gl_CooperativeMatrixLayoutRowMajor);
#endif
            }
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                uint n = wn + j * 16u;
#ifdef B_T
                coopMatLoad(fb[j], S, B0 + cur * STAGE + n * S32 + kk / 8u, S32,
                            gl_CooperativeMatrixLayoutColumnMajor);
#else
                coopMatLoad(fb[j], S, B0 + cur * STAGE + kk * S128 + n / 8u, S128,
                            gl_CooperativeMatrixLayoutRowMajor);
#endif
            }
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
                }
            }
        }
        if (more) {
            [[unroll]] for (uint l = 0u; l < PER; ++l) {
                S[A0 + (cur ^ 1u) * STAGE + sa[l]] = ra[l];
                S[B0 + (cur ^ 1u) * STAGE + sb[l]] = rb[l];
            }
        }
        barrier();
    }

#ifdef EXACT
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o =
                coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(acc[i][j]);
            coopMatStore(o, p.y.v, offY + (m0 + wm + i * 16u) * p.N + n0 + wn + j * 16u, p.N,
                         gl_CooperativeMatrixLayoutRowMajor);
        }
    }
#else
    bool hasC = p.has_c != 0u;
    if (hasC) {
        // This tile of C, broadcast by its strides, as [128][S128] units of 8 elements of
        // its type (zero past the edges). The loop's last barrier freed the stages.
        for (uint u = tid; u < BM * (BN / 8u); u += THREADS) {
            uint r = u / (BN / 8u);
            uint cu = u % (BN / 8u);
            uint m = m0 + r;
            uint n = n0 + cu * 8u;
            uint w[8];
            [[unroll]] for (uint e = 0u; e < 8u; ++e) {
                w[e] = m < p.M && n + e < p.N ? uint(p.c.v[m * p.rsC + (n + e) * p.csC]) : 0u;
            }
            S[r * S128 + cu] = uvec4(w[0] | (w[1] << 16), w[2] | (w[3] << 16),
                                     w[4] | (w[5] << 16), w[6] | (w[7] << 16));
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            uint fm = m0 + wm + i * 16u;
            uint fn = n0 + wn + j * 16u;
            // M and N are multiples of 16: a fragment lies wholly inside or wholly past them.
            if (fm >= p.M || fn >= p.N) {
                continue;
            }
            coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> r =
                acc[i][j] * p.alpha;
            if (hasC) {
                coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> ct;
                coopMatLoad(ct, S, (wm + i * 16u) * S128 + (wn + j * 16u) / 8u, S128,
                            gl_CooperativeMatrixLayoutRowMajor);
                r += coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(ct) *
                     p.beta;
            }
            coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o =
                coopmat<T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(r);
            coopMatStore(o, p.y.v, offY + fm * p.N + fn, p.N, gl_CooperativeMatrixLayoutRowMajor);
        }
    }
#endif
}
