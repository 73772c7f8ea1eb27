#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
// @variant regs
// @variant shared SHARED

// test_coop_peak: how fast VK_KHR_cooperative_matrix multiplies on this device, with nothing
// else in the way, for the tensor-core report in device/vulkan/coop_report.rs.
//
// 128 invocations in 4 subgroups of 32, each holding 4x4 16x16 f32 accumulators, as
// gemm_coop.comp does; every iteration does the 16 products of 4 A and 4 B 16x16x16 f16
// fragments. `regs` keeps the fragments in registers (the tensor cores' rate as the driver
// reaches it); `shared` reloads them from shared memory every iteration, at the ratio of loads
// to products gemm_coop's inner loop has (its 16-byte rows padded the same way), which adds
// the cost of feeding the tensor cores from shared memory (an upper bound: a compiler that
// unrolls by two may keep both alternating halves in registers). No global memory is touched until
// workgroup 0 stores its accumulators for the report to check: every element must equal
// iters * 16 * (1/16)^2 = iters / 16.
layout(local_size_x = 128) in;
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    Out y;
    uint iters;
} p;

// A: 128 rows of 32 k (4 units of 8 halves, +1 pad); B: 32 k rows of 128 (16 units, +1 pad).
const uint S32 = 5;
const uint S128 = 17;
shared uvec4 As[128 * S32];
shared uvec4 Bs[32 * S128];

// 1/16 in f16 (0x2C00), twice per 32-bit word.
const uint SIXTEENTH2 = 0x2C002C00u;

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint wm = (sg / 2u) * 64u;
    uint wn = (sg % 2u) * 64u;
    for (uint i = tid; i < 128u * S32; i += 128u) {
        As[i] = uvec4(SIXTEENTH2);
    }
    for (uint i = tid; i < 32u * S128; i += 128u) {
        Bs[i] = uvec4(SIXTEENTH2);
    }
    barrier();

    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[4];
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b[4];
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        coopMatLoad(a[i], As, (wm + 16u * i) * S32, S32, gl_CooperativeMatrixLayoutRowMajor);
        coopMatLoad(b[i], Bs, wn / 8u + 2u * i, S128, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
        }
    }
    for (uint it = 0u; it < p.iters; ++it) {
#ifdef SHARED
        // Alternate between the two 16-deep halves of the staged 32, as gemm_coop does, so
        // the loads cannot be hoisted out of the loop.
        uint kh = it & 1u;
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            coopMatLoad(a[i], As, (wm + 16u * i) * S32 + 2u * kh, S32,
                        gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(b[i], Bs, 16u * kh * S128 + wn / 8u + 2u * i, S128,
                        gl_CooperativeMatrixLayoutRowMajor);
        }
#endif
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
            }
        }
    }
    if (gl_WorkGroupID.x == 0u) {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                coopMatStore(acc[i][j], p.y.v, (sg * 16u + i * 4u + j) * 256u, 16u,
                             gl_CooperativeMatrixLayoutRowMajor);
            }
        }
    }
}
