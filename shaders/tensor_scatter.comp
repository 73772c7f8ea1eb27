#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "index.glsl"

// ONNX's TensorScatter (ops/tensor_scatter): present = past with update's `seq` rows written
// along the cache axis from write_indices[b] on (wrapping around `len` when circular). The
// tensors are seen as [batch, mid, len, inner]; one invocation per present element takes it
// from update when its row is one of the written ones, else from past, so nothing races. When
// present is past's buffer (a cache bound in place) the other elements are left as they are.
// flags: 1 circular, 2 write_indices given (int64).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In past;
    In update;
    Idx idx;
    Out y;
    uint n;
    uint mid;
    uint len;
    uint inner;
    uint seq;
    uint flags;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint j = i % p.inner;
    uint t = (i / p.inner) % p.len;
    uint bm = i / (p.inner * p.len);
    uint b = bm / p.mid;
    int w = (p.flags & 2u) != 0u ? index_at(p.idx, b, 2u) : 0;
    int s = int(t) - w;
    if ((p.flags & 1u) != 0u) s = ((s % int(p.len)) + int(p.len)) % int(p.len);
    if (s >= 0 && s < int(p.seq)) {
        p.y.v[i] = p.update.v[(bm * p.seq + uint(s)) * p.inner + j];
    } else if (uvec2(p.past) != uvec2(p.y)) {
        p.y.v[i] = p.past.v[i];
    }
}
