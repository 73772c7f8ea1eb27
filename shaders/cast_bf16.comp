#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
// @variant from_f32 FROM_F32
// @variant to_f32 TO_F32

// cast_bf16: f32 <-> bf16 (ops/cast.rs), on bits, so it needs only 16-bit storage, not the
// bfloat16 type: bf16 is the top half of an f32. To bf16 rounds to nearest, ties to even, as
// the CPU does; a NaN stays a (quiet) NaN, which plain rounding could turn into infinity.
layout(local_size_x = 256) in;
#ifdef FROM_F32
layout(buffer_reference, scalar) readonly buffer In { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { uint16_t v[]; };
#else
layout(buffer_reference, scalar) readonly buffer In { uint16_t v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { uint v[]; };
#endif
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
#ifdef FROM_F32
    uint b = p.x.v[i];
    uint h;
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        h = (b >> 16) | 0x40u;
    } else {
        h = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    }
    p.y.v[i] = uint16_t(h);
#else
    p.y.v[i] = uint(p.x.v[i]) << 16;
#endif
}
