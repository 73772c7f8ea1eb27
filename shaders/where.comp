#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require

// where: y = c ? x : y with three-way numpy broadcasting (ops/elementwise/select.rs). It only
// moves elements, so the variants are by element size (bits), serving every dtype. The output
// dims are padded at the front with 1s to rank 5 (four stride lists fill the push constants).
// @variant w8 W8
// @variant w16 W16
// @variant w32 W32
// @variant w64 W64
#if defined(W8)
#define E uint8_t
#elif defined(W16)
#extension GL_EXT_shader_16bit_storage : require
#define E uint16_t
#elif defined(W32)
#define E uint
#else
#define E uint64_t
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer Cond { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer In { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };
layout(push_constant, scalar) uniform P {
    Cond c;
    In x;
    In y;
    Out out_;
    uint n;
    uint dims[5];
    uint sc[5];
    uint sx[5];
    uint sy[5];
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint ic = 0u, ix = 0u, iy = 0u;
    uint r = i;
    for (int ax = 4; ax >= 0; --ax) {
        uint k = r % p.dims[ax];
        r /= p.dims[ax];
        ic += k * p.sc[ax];
        ix += k * p.sx[ax];
        iy += k * p.sy[ax];
    }
    p.out_.v[i] = p.c.v[ic] != uint8_t(0) ? p.x.v[ix] : p.y.v[iy];
}
