// Transpose over raw bytes: one invocation writes one 32-bit word of the output.
// The op side (node/src/ops/transpose.rs) merges axes and pads to rank 6; dims are the output's,
// strides are the input's (in elements) for the axis each output axis walks.
// Elements are either `eb` = 4k bytes (k words each), or 1 or 2 bytes packed little-endian into
// words; in the packed case both tensors are a whole number of words, so reading the word that
// holds an element and writing whole output words stay inside the buffers.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer OutWords { uint v[]; };

layout(push_constant, scalar) uniform P {
    Words x;
    OutWords y;
    uint n;        // output words
    uint eb;       // element bytes: 1, 2 or a multiple of 4
    uint dims[6];
    uint strides[6];
} p;

uint source_element(uint e) {
    uint src = 0u;
    for (int a = 5; a >= 0; --a) {
        uint d = p.dims[a];
        src += (e % d) * p.strides[a];
        e /= d;
    }
    return src;
}

void main() {
    uint w = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (w >= p.n) return;
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
