// ScatterND after the output holds a copy of the data. Duplicate targets are resolved in row
// order, as the CPU kernel does, in one of two ways chosen by `phase`:
// - no reduction, in three dispatches: 0 clears one owner word per output slice (one
//   invocation per slice), 1 lets every row claim its target slice with atomicMax(row + 1)
//   (one invocation per row), 2 writes each update element whose row owns its slice (one
//   invocation per update element): the last row naming a slice wins, in linear time;
// - a reduction (phase 3), one invocation per update element: the first row naming a target
//   folds every later row's update into it, in order (a scan over the rows).
// Table per indexed axis: extent, stride (elements).
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
    Owners owners;   // one word per output slice (phases 0-2)
    Fault fault;
    uint n;          // invocations: slices (phase 0), rows (1), update elements (2, 3)
    uint k;          // entries per index tuple
    uint slice;      // elements per update slice
    uint rows;       // index tuples
    uint idx_words;
    uint reduction;  // 0 none, 1 add, 2 mul, 3 max, 4 min
    uint phase;
} p;

uint target_of(uint i) {
    uint off = 0u;
    for (uint j = 0u; j < p.k; ++j) {
        off += checked_index(p.indices, i * p.k + j, p.idx_words, p.t.v[2u * j], p.fault) * p.t.v[2u * j + 1u];
    }
    return off;
}

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    if (p.phase == 0u) {
        p.owners.v[e] = 0u;
        return;
    }
    if (p.phase == 1u) {
        atomicMax(p.owners.v[target_of(e) / p.slice], e + 1u);
        return;
    }
    uint i = e / p.slice;
    uint s = e - i * p.slice;
    uint dst = target_of(i);
    if (p.phase == 2u) {
        if (p.owners.v[dst / p.slice] == i + 1u) p.y.v[dst + s] = p.updates.v[e];
        return;
    }
    for (uint r = 0u; r < i; ++r) if (target_of(r) == dst) return;
    A acc = TO_A(p.y.v[dst + s]);
    for (uint r = i; r < p.rows; ++r) {
        if (target_of(r) == dst) acc = combine(acc, TO_A(p.updates.v[r * p.slice + s]), p.reduction);
    }
    p.y.v[dst + s] = FROM_A(acc);
}
