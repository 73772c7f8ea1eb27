// ScatterElements after the output holds a copy of the data: update element u targets u with
// the axis coordinate replaced by indices[u]. Targets can only repeat among updates on the
// same line along the axis; they are resolved in order as in scatter_nd.comp: with no
// reduction in three phases (0 clears one owner word per output element, 1 lets each update
// claim its target with atomicMax(position on its line + 1), 2 writes the owners' updates);
// with a reduction (phase 3) the first update naming a target folds the line's later ones.
// Table per axis: extent of the updates, stride of the data.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant f64 DT_F64
// @variant i64 DT_I64
// @variant u64 DT_U64
// @variant i32 DT_I32
// @variant u32 DT_U32
// @variant i16 DT_I16
// @variant u16 DT_U16
// @variant i8 DT_I8
// @variant u8 DT_U8
#include "types.glsl"
#include "index.glsl"
#include "scatter_common.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };
layout(buffer_reference, scalar) buffer Owners { uint v[]; };

layout(push_constant, scalar) uniform P {
    Idx indices;
    In updates;
    Table t;
    Out y;
    Owners owners;   // one word per output element (phases 0-2)
    Fault fault;
    uint n;          // invocations: output elements (phase 0), update elements (1-3)
    uint rank;
    uint axis;
    uint axis_dim;   // the data's extent on the axis (> 0)
    uint idx_words;
    uint reduction;
    uint phase;
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    if (p.phase == 0u) {
        p.owners.v[e] = 0u;
        return;
    }
    uint rest = e;
    uint base = 0u;
    uint ua = 0u;
    uint line_stride = 1u;
    uint after = 1u;
    for (int a = int(p.rank) - 1; a >= 0; --a) {
        uint d = p.t.v[2 * a];
        uint o = rest % d;
        rest /= d;
        if (uint(a) == p.axis) {
            ua = o;
            line_stride = after;
        } else {
            base += o * p.t.v[2 * a + 1];
        }
        after *= d;
    }
    uint len = p.t.v[2u * p.axis];
    uint astride = p.t.v[2u * p.axis + 1u];
    uint first = e - ua * line_stride;
    uint dst = base + checked_index(p.indices, e, p.idx_words, p.axis_dim, p.fault) * astride;
    if (p.phase == 1u) {
        atomicMax(p.owners.v[dst], ua + 1u);
        return;
    }
    if (p.phase == 2u) {
        if (p.owners.v[dst] == ua + 1u) p.y.v[dst] = p.updates.v[e];
        return;
    }
    for (uint r = 0u; r < ua; ++r) {
        uint o = base + checked_index(p.indices, first + r * line_stride, p.idx_words, p.axis_dim, p.fault) * astride;
        if (o == dst) return;
    }
    A acc = TO_A(p.y.v[dst]);
    for (uint r = ua; r < len; ++r) {
        uint u = first + r * line_stride;
        uint o = base + checked_index(p.indices, u, p.idx_words, p.axis_dim, p.fault) * astride;
        if (o == dst) acc = combine(acc, TO_A(p.updates.v[u]), p.reduction);
    }
    p.y.v[dst] = FROM_A(acc);
}
