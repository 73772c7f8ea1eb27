// Gather over raw bytes: one invocation writes one 32-bit word of the output.
// Output element e = ((o * picks) + j) * inner + i takes data element (o * rows + row(j)) * inner + i,
// where row(j) is indices[j], negative counting from the end.
// Elements are `eb` = 4k bytes (k words each; the op side makes the whole inner block the
// element when it can, so inner = 1), or 1 or 2 bytes packed little-endian into words (then
// data and output are whole words, so no access leaves their buffers).
// Out-of-range indices: the CPU kernel reports them as errors; here they are clamped to the
// nearest valid row so that no read leaves the data buffer (int64 indices beyond int32 saturate
// first). With rows = 0 there is nothing to read and the output is zero.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer OutWords { uint v[]; };

layout(push_constant, scalar) uniform P {
    Words x;
    Words indices;
    OutWords y;
    uint n;          // output words
    uint eb;         // element bytes: 1, 2 or a multiple of 4
    uint inner;      // elements per gathered block
    uint picks;      // number of indices
    uint rows;       // size of the gathered axis
    uint idx_words;  // 1: int32 indices, 2: int64 indices
} p;

int index_at(uint j) {
    if (p.idx_words == 1u) return int(p.indices.v[j]);
    uint lo = p.indices.v[2u * j];
    int hi = int(p.indices.v[2u * j + 1u]);
    if (hi == 0 && lo < 0x80000000u) return int(lo);
    if (hi == -1 && lo >= 0x80000000u) return int(lo);
    return hi < 0 ? -2147483647 - 1 : 2147483647;
}

uint row(uint j) {
    int s = int(p.rows);
    int idx = index_at(j);
    if (idx < 0) idx += s;
    return uint(clamp(idx, 0, s - 1));
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
