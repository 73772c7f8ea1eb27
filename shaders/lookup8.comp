#version 460
// Lookup8 (ops/lookup8.rs): y = table[x] over 8-bit values, the table holding an 8-bit result
// for each of the 256 bytes. graph/fuse_qdq.rs computes it for an elementwise op between a
// DequantizeLinear and a QuantizeLinear. Each invocation maps four bytes, read and written as
// one word where the tensor's length allows.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer OutBytes { uint8_t v[]; };
layout(buffer_reference, scalar) writeonly buffer OutWords { uint v[]; };

layout(push_constant, scalar) uniform P {
    Bytes x;
    Words table;
    OutBytes y;
    uint n;
} p;

shared uint t[256];

void main() {
    t[gl_LocalInvocationID.x] = p.table.v[gl_LocalInvocationID.x];
    barrier();
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint at = 4u * i;
    if (at >= p.n) return;
    if (at + 4u <= p.n && (p.n & 3u) == 0u) {
        uint w = Words(p.x).v[i];
        OutWords(p.y).v[i] = t[w & 255u] | t[(w >> 8) & 255u] << 8 | t[(w >> 16) & 255u] << 16
            | t[w >> 24] << 24;
        return;
    }
    for (uint k = at; k < min(at + 4u, p.n); ++k) p.y.v[k] = uint8_t(t[uint(p.x.v[k])]);
}
