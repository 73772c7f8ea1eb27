// Concat: one dispatch per input copies that input's blocks into the output. Viewed as
// [outer, block] words, input row o lands at output word o * out_row + offset. The op side
// (node/src/ops/concat.rs) only dispatches when every block is a whole number of words.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer OutWords { uint v[]; };

layout(push_constant, scalar) uniform P {
    Words x;
    OutWords y;
    uint n;        // words of this input
    uint block;    // words per outer row of this input
    uint out_row;  // words per outer row of the output
    uint offset;   // where this input's block starts in an output row
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint o = i / p.block;
    p.y.v[o * p.out_row + p.offset + (i - o * p.block)] = p.x.v[i];
}
