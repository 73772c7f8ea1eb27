// Gather over raw bytes: one invocation writes one 32-bit word of the output.
// Output element e = ((o * picks) + j) * inner + i takes data element (o * rows + row(j)) * inner + i,
// where row(j) is indices[j], negative counting from the end.
// Elements are `eb` = 4k bytes (k words each; the op side makes the whole inner block the
// element when it can, so inner = 1), or 1 or 2 bytes packed little-endian into words (then
// data and output are whole words, so no access leaves their buffers).
// Out-of-range indices: recorded in the fault record (index.glsl), which fails the run as the
// CPU kernel's error would, and clamped to the nearest valid row so that no read leaves the
// data buffer. With rows = 0 every index is out of range: nothing is read, the output is zero.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
#include "index.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer OutWords { uint v[]; };

layout(push_constant, scalar) uniform P {
    Words x;
    Idx indices;
    OutWords y;
    Fault fault;
    uint n;          // output words
    uint eb;         // element bytes: 1, 2 or a multiple of 4
    uint inner;      // elements per gathered block
    uint picks;      // number of indices
    uint rows;       // size of the gathered axis
    uint idx_words;  // 1: int32 indices, 2: int64 indices
} p;

uint row(uint j) {
    return checked_index(p.indices, j, p.idx_words, p.rows, p.fault);
}

uint source_element(uint e) {
    uint i = e % p.inner;
    uint t = e / p.inner;
    uint j = t % p.picks;
    uint o = t / p.picks;
    return (o * p.rows + row(j)) * p.inner + i;
}

void main() {
    uint w = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (w >= p.n) return;
    if (p.rows == 0u) {
        if (w == 0u) checked_index(p.indices, 0u, p.idx_words, 0u, p.fault);
        p.y.v[w] = 0u;
        return;
    }
    if (p.eb >= 4u) {
        uint k = p.eb >> 2;
        uint e = w / k;
        p.y.v[w] = p.x.v[source_element(e) * k + (w - e * k)];
    } else {
        uint per_word = 4u / p.eb;
        uint bits = p.eb * 8u;
        uint mask = (1u << bits) - 1u;
        uint acc = 0u;
        for (uint s = 0u; s < per_word; ++s) {
            uint ie = source_element(w * per_word + s);
            uint word = p.x.v[ie / per_word];
            acc |= ((word >> ((ie % per_word) * bits)) & mask) << (s * bits);
        }
        p.y.v[w] = acc;
    }
}
