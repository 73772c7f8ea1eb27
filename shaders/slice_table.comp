// Slice's pre-pass: fills in the remap table's start and step for each sliced axis from the
// starts, axes and steps inputs (run-time buffers; the output shape, hence the rest of the
// table, is known when planning). One invocation. Clamping follows ONNX: a negative start
// counts from the back, then it is clamped to [0, dim] (positive step) or [0, dim - 1].
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(local_size_x = 1) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Table { int v[]; };
layout(buffer_reference, scalar) writeonly buffer OutTable { int v[]; };

layout(push_constant, scalar) uniform P {
    Table tmpl;
    Words starts;
    Words axes;
    Words steps;
    OutTable y;
    uint words;     // table words
    uint rank;
    uint listed;    // entries of starts
    uint idx_words; // 1: int32 inputs, 2: int64
    uint has_axes;
    uint has_steps;
} p;

int64_t read_at(Words b, uint j) {
    if (p.idx_words == 1u) return int64_t(int(b.v[j]));
    return int64_t(uint64_t(b.v[2u * j]) | (uint64_t(b.v[2u * j + 1u]) << 32));
}

void main() {
    for (uint w = 0u; w < p.words; ++w) p.y.v[w] = p.tmpl.v[w];
    for (uint j = 0u; j < p.listed; ++j) {
        int64_t a = p.has_axes == 1u ? read_at(p.axes, j) : int64_t(j);
        if (a < 0) a += int64_t(p.rank);
        if (a < 0 || a >= int64_t(p.rank)) continue;
        uint b = 2u + 7u * uint(a);
        int64_t dim = int64_t(p.tmpl.v[b + 2u]);
        int64_t step = p.has_steps == 1u ? read_at(p.steps, j) : int64_t(1);
        int64_t s = read_at(p.starts, j);
        if (s < 0) s += dim;
        s = step > 0 ? clamp(s, int64_t(0), dim) : clamp(s, int64_t(0), max(dim - 1, int64_t(0)));
        // Beyond the axis a step only ever yields one element; keep it within 32 bits.
        step = clamp(step, -dim - 1, dim + 1);
        p.y.v[b + 4u] = int(s);
        p.y.v[b + 5u] = int(step);
    }
}
