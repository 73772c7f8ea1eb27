// GatherND: output element e = (t * slice + s), where t numbers the index tuples over all
// batches, takes data element b * batch_stride + sum_k indices[t, k] * stride_k + s with
// b = t / rows. Table per indexed axis: extent, stride (within a batch).
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant b1 EB=1
// @variant b2 EB=2
// @variant b4 EB=4
// @variant b8 EB=8
#include "elem.glsl"
#include "index.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };
layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Idx indices;
    Table t;
    Out y;
    Fault fault;
    uint n;
    uint k;            // entries per index tuple
    uint slice;        // elements per gathered slice
    uint rows;         // index tuples per batch
    uint batch_stride; // data elements per batch
    uint idx_words;
} p;

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    uint t = e / p.slice;
    uint src = (t / p.rows) * p.batch_stride + (e - t * p.slice);
    for (uint j = 0u; j < p.k; ++j) {
        src += checked_index(p.indices, t * p.k + j, p.idx_words, p.t.v[2u * j], p.fault) * p.t.v[2u * j + 1u];
    }
    p.y.v[e] = p.x.v[src];
}
