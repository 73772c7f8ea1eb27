#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#ifdef BF16
#extension GL_EXT_bfloat16 : require
#endif
// @vulkan1.3
// @variant f16 T=float16_t BM=128 BN=128 BK=32
// @variant bf16 T=bfloat16_t BF16 BM=128 BN=128 BK=32
// @variant wide_f16 T=float16_t BM=128 BN=256 BK=32
// @variant wide_bf16 T=bfloat16_t BF16 BM=128 BN=256 BK=32
// @variant a8_f16 T=float16_t BM=128 BN=128 BK=32 ALIGN=8u
// @variant a8_bf16 T=bfloat16_t BF16 BM=128 BN=128 BK=32 ALIGN=8u
// @variant a8_wide_f16 T=float16_t BM=128 BN=256 BK=32 ALIGN=8u
// @variant a8_wide_bf16 T=bfloat16_t BF16 BM=128 BN=256 BK=32 ALIGN=8u
// @variant exact_f16 T=float16_t BM=128 BN=128 BK=32 ALIGN=8u EXACT
// @variant exact_bf16 T=bfloat16_t BF16 BM=128 BN=128 BK=32 ALIGN=8u EXACT
// @variant exact_wide_f16 T=float16_t BM=128 BN=256 BK=64 ALIGN=8u EXACT
// @variant exact_wide_bf16 T=bfloat16_t BF16 BM=128 BN=256 BK=64 ALIGN=8u EXACT

// gemm_coop2: Y[z] = alpha * A[z] * B[z] + beta * C on tensor cores through NV cooperative
// matrix 2 (workgroup-scope matrices, tensor-addressed loads). Half-precision operands, f32
// accumulation, Y in the operands' type. The push constants are gemm.comp's, word for word,
// so ops/matmul builds both from one description; see gemm.comp for their meaning.
//
// Tiles: 128x128 or, for products with many tiles, 128x256 (variant `wide`), 32 deep.
//
// Variants `a8_*` are for operands whose strides and offsets are all multiples of 8 elements
// (ops/matmul checks): the shader rounds them down to multiples of 8, which changes nothing
// but tells the driver's compiler that every row starts on a 16-byte boundary. Knowing that,
// the driver moves tiles 16 bytes at a time; not knowing it, element by element.
//
// Variants `exact_*` (aligned too) are for products whose M, N and K are multiples of the tile
// (128x256x64 for `exact_wide`) and that need no epilogue (alpha 1, no C): they leave out the
// clamped loop for edge tiles and the epilogue. Neither runs for such a product, but their
// mere presence costs registers the driver then takes from the main loop. On an H200,
// 4096^3 f16 (`coop_gemm_report`, robust medians): general 60, aligned 76, exact 146 with 32
// deep steps and 154 with 64 TFLOP/s; the same loads from a small cached operand reach 360
// and the products alone 620 (`coop_report`).
//
// Workgroup-scope matrices let the driver choose how the BM x BN tile is split over the
// subgroups and staged through shared memory. Loads are clamped at the edges: rows, columns
// and k past the tensor's edge read as 0, and stores past it are dropped, so any M, N, K is
// handled. A and B must each be contiguous along one of their two axes (ops/matmul checks):
// row-major, or transposed through a view. The main loop is written once per layout pair,
// so no branch sits between one step's loads and the next.
layout(local_size_x = 256) in;
// Declared 16-byte aligned (every tensor buffer is at least that) so that the driver may move
// tiles 16 bytes at a time.
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer In { T v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) writeonly buffer Out { T v[]; };
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


// The tile's origin, for the epilogue's per-element callback.
uint tileM;
uint tileN;

float epilogue(const in uint32_t row, const in uint32_t col, const in float x) {
    float v = p.alpha * x;
    uint m = tileM + row;
    uint n = tileN + col;
    if (p.has_c != 0u && m < p.M && n < p.N) {
        v += p.beta * float(p.c.v[m * p.rsC + n * p.csC]);
    }
    return v;
}

void main() {
    tileM = gl_WorkGroupID.y * BM;
    tileN = gl_WorkGroupID.x * BN;
    uint z = gl_WorkGroupID.z;
    uint i2 = z % p.nb2;
    uint t = z / p.nb2;
    uint i1 = t % p.nb1;
    uint i0 = t / p.nb1;
    uint offA = p.offA + i0 * p.bA0 + i1 * p.bA1 + i2 * p.bA2;
    uint offB = p.offB + i0 * p.bB0 + i1 * p.bB1 + i2 * p.bB2;
    uint offY = p.offY + z * p.M * p.N;

    // Each operand as the 2-D tensor it is in memory: (rows, contiguous columns). A
    // transposed operand is read through a view that swaps the axes back. Tiles wholly inside
    // the tensors (most of them) load without clamping, which is cheaper.
    bool aRowMajor = p.csA == 1u;
    bool bRowMajor = p.csB == 1u;
    uint aRows = aRowMajor ? p.M : p.K;
    uint aCols = aRowMajor ? p.K : p.M;
    uint aStride = aRowMajor ? p.rsA : p.csA;
    uint bRows = bRowMajor ? p.K : p.N;
    uint bCols = bRowMajor ? p.N : p.K;
    uint bStride = bRowMajor ? p.rsB : p.csB;
#ifdef ALIGN
    aStride = (aStride / ALIGN) * ALIGN;
    bStride = (bStride / ALIGN) * ALIGN;
    offA = (offA / ALIGN) * ALIGN;
    offB = (offB / ALIGN) * ALIGN;
#endif
    bool inside = tileM + BM <= p.M && tileN + BN <= p.N && p.K % BK == 0u;
    tensorViewNV<2, false, 1, 0> swap = createTensorViewNV(2, false, 1, 0);

#define LOOP(LOAD_A, LOAD_B) \
    for (uint k0 = 0u; k0 < p.K; k0 += BK) { \
        coopmat<T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma; \
        coopmat<T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb; \
        LOAD_A; \
        LOAD_B; \
        acc = coopMatMulAdd(ma, mb, acc); \
    }
#define A_ROWS coopMatLoadTensorNV(ma, p.a.v, offA, sliceTensorLayoutNV(la, tileM, BM, k0, BK))
#define A_COLS coopMatLoadTensorNV(ma, p.a.v, offA, sliceTensorLayoutNV(la, k0, BK, tileM, BM), swap)
#define B_ROWS coopMatLoadTensorNV(mb, p.b.v, offB, sliceTensorLayoutNV(lb, k0, BK, tileN, BN))
#define B_COLS coopMatLoadTensorNV(mb, p.b.v, offB, sliceTensorLayoutNV(lb, tileN, BN, k0, BK), swap)
#define LOOPS \
    la = setTensorLayoutDimensionNV(la, aRows, aCols); \
    la = setTensorLayoutStrideNV(la, aStride, 1); \
    lb = setTensorLayoutDimensionNV(lb, bRows, bCols); \
    lb = setTensorLayoutStrideNV(lb, bStride, 1); \
    if (aRowMajor && bRowMajor) { \
        LOOP(A_ROWS, B_ROWS) \
    } else if (aRowMajor) { \
        LOOP(A_ROWS, B_COLS) \
    } else if (bRowMajor) { \
        LOOP(A_COLS, B_ROWS) \
    } else { \
        LOOP(A_COLS, B_COLS) \
    }

    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    if (inside) {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        LOOPS
    }
#ifndef EXACT
    else {
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        LOOPS
    }
    if (p.alpha != 1.0 || p.has_c != 0u) {
        coopMatPerElementNV(acc, acc, epilogue);
    }
#endif

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    ly = setTensorLayoutDimensionNV(ly, p.M, p.N);
    coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> out_ =
        coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    coopMatStoreTensorNV(out_, p.y.v, offY, sliceTensorLayoutNV(ly, tileM, BM, tileN, BN));
}
