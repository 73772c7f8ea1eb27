// Compress's pre-pass: the positions of the true entries of the (bool) condition, in order, as
// int32 indices for gather_e.comp. One invocation; the count is known when planning (the
// output shape depends on it), so at most `picks` positions are written.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types : require

layout(local_size_x = 1) in;

layout(buffer_reference, scalar) readonly buffer Cond { uint8_t v[]; };
layout(buffer_reference, scalar) writeonly buffer Picks { int v[]; };

layout(push_constant, scalar) uniform P {
    Cond cond;
    Picks y;
    uint n;      // condition entries
    uint picks;  // true entries expected
} p;

void main() {
    uint k = 0u;
    for (uint i = 0u; i < p.n && k < p.picks; ++i) {
        if (uint(p.cond.v[i]) != 0u) {
            p.y.v[k] = int(i);
            k += 1u;
        }
    }
    // Fewer than planned (the condition changed since planning): fill with indices that are
    // still inside the axis, so no read leaves the buffer.
    for (; k < p.picks; ++k) p.y.v[k] = k > 0u ? int(k - 1u) : 0;
}
