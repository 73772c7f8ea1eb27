#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// Col2Im (ops/col2im), f32, any number of spatial axes: one invocation per image element of
// [N, C, image...], adding the block values that came from it in ascending kernel-offset
// order, as the CPU kernel does. The table holds the rank, then per axis (outermost first)
// the image size, block size, block positions, stride, dilation and leading pad.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    Table t;
    uint n;       // image elements
    uint plane;   // elements of one image
    uint kvol;    // elements of one block
    uint blocks;  // block positions (L)
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint nc = i / p.plane;
    uint pixel = i - nc * p.plane;
    uint rank = p.t.v[0];
    float acc = 0.0;
    for (uint k = 0u; k < p.kvol; ++k) {
        uint rest_p = pixel, rest_k = k, block = 0u, stride = 1u;
        bool hit = true;
        for (uint a = rank; a-- > 0u;) {
            uint at = 1u + 6u * a;
            uint image = p.t.v[at], kernel = p.t.v[at + 1u], cols = p.t.v[at + 2u];
            uint coord = rest_p % image, offset = rest_k % kernel;
            rest_p /= image;
            rest_k /= kernel;
            int s = int(coord + p.t.v[at + 5u]) - int(offset * p.t.v[at + 4u]);
            uint st = p.t.v[at + 3u];
            if (s < 0 || uint(s) % st != 0u || uint(s) / st >= cols) {
                hit = false;
                break;
            }
            block += uint(s) / st * stride;
            stride *= cols;
        }
        if (hit) acc += p.x.v[(nc * p.kvol + k) * p.blocks + block];
    }
    p.y.v[i] = acc;
}
