#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
// @vulkan1.3
// @variant regs BM=128 BN=256 BK=32
// @variant global BM=128 BN=256 BK=32 GLOBAL
// @variant narrow_regs BM=128 BN=128 BK=32
// @variant strided BM=128 BN=256 BK=32 GLOBAL PITCH=4096
// @variant big BM=128 BN=256 BK=32 BIG

// test_coop2_peak: how fast VK_NV_cooperative_matrix2's workgroup-scope matrices multiply on
// this device, for the tensor-core report in device/vulkan/coop_report.rs. 256 invocations
// hold a BM x BN f32 accumulator and multiply it by BM x BK and BK x BN f16 operands, as
// gemm_coop2.comp does. `regs` loads the operands once (the driver's rate for the product
// alone); `global` reloads them every iteration through tensor-addressed loads from a small
// matrix that stays in cache (8 k-steps of A and of B), which adds the cost of the load path
// without DRAM bandwidth; `strided` reads the same elements from rows 4096 apart, as a
// 4096-wide product's operands lie; `big` reads two whole 4096 x 4096 operands, each
// workgroup the slices one tile of their product needs. Workgroup 0 stores its accumulator for the report to check: with
// every operand element 1/16, each element is iters * BK / 256.
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer In { float16_t v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In a;   // BM x 8*BK, then 8*BK x BN, row-major (rows PITCH apart; `big`: 4096 x 4096
            // twice), every element 1/16
    Out y;  // BM x BN
    uint iters;
} p;

void main() {
#ifdef BIG
    // A whole 4096^3 product's worth of operands: workgroup w takes the tile a 4096 x 4096
    // output's w-th 128 x 256 tile would, and steps through all of K.
    tensorLayoutNV<2> la = createTensorLayoutNV(2);
    tensorLayoutNV<2> lb = createTensorLayoutNV(2);
    la = setTensorLayoutDimensionNV(la, 4096u, 4096u);
    lb = setTensorLayoutDimensionNV(lb, 4096u, 4096u);
    uint offB = 4096u * 4096u;
    uint tm = ((gl_WorkGroupID.x / 16u) % 32u) * BM;
    uint tn = (gl_WorkGroupID.x % 16u) * BN;
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    for (uint it = 0u; it < p.iters; ++it) {
        uint k0 = (it % 128u) * BK;
        coopMatLoadTensorNV(ma, p.a.v, 0u, sliceTensorLayoutNV(la, tm, BM, k0, BK));
        coopMatLoadTensorNV(mb, p.a.v, offB, sliceTensorLayoutNV(lb, k0, BK, tn, BN));
        acc = coopMatMulAdd(ma, mb, acc);
    }
#else
    tensorLayoutNV<2> la = createTensorLayoutNV(2);
    tensorLayoutNV<2> lb = createTensorLayoutNV(2);
    la = setTensorLayoutDimensionNV(la, BM, 8u * BK);
    lb = setTensorLayoutDimensionNV(lb, 8u * BK, BN);
#ifdef PITCH
    // The same elements, rows PITCH apart: the address span one step touches is then that of
    // a real product with PITCH-long rows, while the data stays small enough for the caches.
    la = setTensorLayoutStrideNV(la, PITCH, 1);
    lb = setTensorLayoutStrideNV(lb, PITCH, 1);
    uint offB = BM * PITCH;
#else
    uint offB = BM * 8u * BK;
#endif
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
    coopMatLoadTensorNV(ma, p.a.v, 0u, sliceTensorLayoutNV(la, 0u, BM, 0u, BK));
    coopMatLoadTensorNV(mb, p.a.v, offB, sliceTensorLayoutNV(lb, 0u, BK, 0u, BN));
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    for (uint it = 0u; it < p.iters; ++it) {
#ifdef GLOBAL
        uint k0 = (it & 7u) * BK;
        coopMatLoadTensorNV(ma, p.a.v, 0u, sliceTensorLayoutNV(la, 0u, BM, k0, BK));
        coopMatLoadTensorNV(mb, p.a.v, offB, sliceTensorLayoutNV(lb, k0, BK, 0u, BN));
#endif
        acc = coopMatMulAdd(ma, mb, acc);
    }
#endif
    if (gl_WorkGroupID.x == 0u) {
        tensorLayoutNV<2> ly = createTensorLayoutNV(2);
        ly = setTensorLayoutDimensionNV(ly, BM, BN);
        coopMatStoreTensorNV(acc, p.y.v, 0u, sliceTensorLayoutNV(ly, 0u, BM, 0u, BN));
    }
}
