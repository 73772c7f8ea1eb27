// Pad's pre-pass: fills in the remap table's constant and the start of each padded axis from
// the pads, constant_value and axes inputs (run-time buffers; the output shape is known when
// planning). One invocation. The start of an axis is minus its leading pad.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_GOOGLE_include_directive : require
// @variant b1 EB=1
// @variant b2 EB=2
// @variant b4 EB=4
// @variant b8 EB=8
#include "elem.glsl"

layout(local_size_x = 1) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Elems { E v[]; };
layout(buffer_reference, scalar) readonly buffer Table { int v[]; };
layout(buffer_reference, scalar) writeonly buffer OutTable { int v[]; };

layout(push_constant, scalar) uniform P {
    Table tmpl;
    Words pads;
    Elems value;
    Words axes;
    OutTable y;
    uint words;     // table words
    uint rank;
    uint listed;    // padded axes (pads has twice as many entries)
    uint axes_words; // 0: no axes input, 1: int32, 2: int64
    uint has_value;
} p;

int64_t pad_at(uint j) {
    return int64_t(uint64_t(p.pads.v[2u * j]) | (uint64_t(p.pads.v[2u * j + 1u]) << 32));
}

void main() {
    for (uint w = 0u; w < p.words; ++w) p.y.v[w] = p.tmpl.v[w];
    if (p.has_value == 1u) {
        E c = p.value.v[0];
        p.y.v[0] = int(E_LO(c));
        p.y.v[1] = int(E_HI(c));
    }
    for (uint j = 0u; j < p.listed; ++j) {
        int64_t a = int64_t(j);
        if (p.axes_words == 1u) a = int64_t(int(p.axes.v[j]));
        if (p.axes_words == 2u) a = int64_t(uint64_t(p.axes.v[2u * j]) | (uint64_t(p.axes.v[2u * j + 1u]) << 32));
        if (a < 0) a += int64_t(p.rank);
        if (a < 0 || a >= int64_t(p.rank)) continue;
        p.y.v[2u + 7u * uint(a) + 4u] = int(-pad_at(j));
    }
}
