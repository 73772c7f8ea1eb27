#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"

// ai.onnx.ml TreeEnsemble (ops/tree_ensemble.rs), post_transform NONE: one thread per row of
// X [rows, features] walks every tree and aggregates the leaves' weights into its row of Y
// [rows, targets], which no other thread touches.
// tab (u32): the trees' roots, then 6 words per interior node at nodes_at (feature, mode |
// nan_true << 8, true branch, false branch, member set start, member set length; a branch with
// bit 31 set is a leaf), then each leaf's target at leaves_at.
// vals (T): each node's split, then each leaf's weight at weights_at, then the members at
// members_at. The host refuses trees with cycles; `nodes` bounds a walk all the same.

layout(local_size_x = 64) in;

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    Tab tab;
    In vals;
    uint rows;
    uint features;
    uint targets;
    uint trees;
    uint nodes;
    uint aggregate;  // 0 AVERAGE, 1 SUM, 2 MIN, 3 MAX
    uint nodes_at;
    uint leaves_at;
    uint weights_at;
    uint members_at;
} p;

const uint LEAF = 0x80000000u;

bool takes_true(uint node, A x) {
    uint at = p.nodes_at + 6u * node;
    uint mode = p.tab.v[at + 1u] & 0xffu;
    if (isnan(x)) return (p.tab.v[at + 1u] >> 8) != 0u || mode == 5u;
    A s = TO_A(p.vals.v[node]);
    switch (mode) {
        case 0u: return x <= s;
        case 1u: return x < s;
        case 2u: return x >= s;
        case 3u: return x > s;
        case 4u: return x == s;
        case 5u: return x != s;
    }
    uint first = p.members_at + p.tab.v[at + 4u];
    uint count = p.tab.v[at + 5u];
    for (uint k = 0u; k < count; ++k) {
        if (TO_A(p.vals.v[first + k]) == x) return true;
    }
    return false;
}

void main() {
    uint row = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (row >= p.rows) return;
    uint base = row * p.targets;
    T start = T(0);
#if defined(DT_F32)
    const T BIG = T(3.40282347e38);
#else
    const T BIG = T(1.7976931348623157e308LF);
#endif
    if (p.aggregate == 2u) start = BIG;
    if (p.aggregate == 3u) start = -BIG;
    for (uint t = 0u; t < p.targets; ++t) p.y.v[base + t] = start;
    uint xrow = row * p.features;
    for (uint tree = 0u; tree < p.trees; ++tree) {
        uint at = p.tab.v[tree];
        for (uint step = 0u; step <= p.nodes; ++step) {
            uint feature = p.tab.v[p.nodes_at + 6u * at];
            A x = TO_A(p.x.v[xrow + feature]);
            uint next = p.tab.v[p.nodes_at + 6u * at + (takes_true(at, x) ? 2u : 3u)];
            if ((next & LEAF) == 0u) {
                at = next;
                continue;
            }
            uint leaf = next & ~LEAF;
            uint target = p.tab.v[p.leaves_at + leaf];
            A w = TO_A(p.vals.v[p.weights_at + leaf]);
            A cur = TO_A(p.y.v[base + target]);
            if (p.aggregate == 2u) cur = min(cur, w);
            else if (p.aggregate == 3u) cur = max(cur, w);
            else cur += w;
            p.y.v[base + target] = FROM_A(cur);
            break;
        }
    }
    if (p.aggregate == 0u) {
        for (uint t = 0u; t < p.targets; ++t) {
            p.y.v[base + t] = FROM_A(TO_A(p.y.v[base + t]) / A(p.trees));
        }
    }
}
