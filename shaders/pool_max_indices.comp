#version 460
// MaxPool with its Indices output, one thread per output element, 1-D to 3-D as pool.comp.
// The index is the flat input position of the window's first maximum (plane offset
// included), counting the spatial axes column-major when column_major (storage_order = 1);
// -1 for a window that covers no input element. Indices are int64, written as two 32-bit
// words (low, high) so the shader needs no 64-bit integer support.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };
layout(buffer_reference, scalar) writeonly buffer UOut { uint v[]; };

layout(push_constant, scalar) uniform P {
    FIn x;
    FOut y;
    UOut idx;
    uint planes;
    uvec3 in_size;
    uvec3 out_size;
    uvec3 kernel;
    uvec3 stride;
    uvec3 dilation;
    uvec3 pad;
    uint column_major;
} p;

void main() {
    uint plane_out = p.out_size.x * p.out_size.y * p.out_size.z;
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.planes * plane_out) return;

    uint plane = i / plane_out;
    uint r = i - plane * plane_out;
    uint ohw = p.out_size.y * p.out_size.z;
    uvec3 o;
    o.x = r / ohw;
    r -= o.x * ohw;
    o.y = r / p.out_size.z;
    o.z = r - o.y * p.out_size.z;
    ivec3 start = ivec3(o * p.stride) - ivec3(p.pad);

    uint plane_in = p.in_size.x * p.in_size.y * p.in_size.z;
    uint xbase = plane * plane_in;
    float best = -3.402823466e+38;
    bool found = false;
    uint best_at = 0;
    for (uint kd = 0; kd < p.kernel.x; kd++) {
        int id = start.x + int(kd * p.dilation.x);
        if (uint(id) >= p.in_size.x) continue;
        for (uint kh = 0; kh < p.kernel.y; kh++) {
            int ih = start.y + int(kh * p.dilation.y);
            if (uint(ih) >= p.in_size.y) continue;
            for (uint kw = 0; kw < p.kernel.z; kw++) {
                int iw = start.z + int(kw * p.dilation.z);
                if (uint(iw) >= p.in_size.z) continue;
                uint row_major = (uint(id) * p.in_size.y + uint(ih)) * p.in_size.z + uint(iw);
                float v = float(p.x.v[xbase + row_major]);
                // Strict '>' keeps the first maximum, and a NaN only when it comes first.
                if (!found || v > best) {
                    best = v;
                    found = true;
                    best_at = p.column_major != 0u
                        ? uint(id) + uint(ih) * p.in_size.x + uint(iw) * p.in_size.x * p.in_size.y
                        : row_major;
                }
            }
        }
    }
    p.y.v[i] = T(best);
    if (found) {
        p.idx.v[2 * i] = xbase + best_at;
        p.idx.v[2 * i + 1] = 0u;
    } else {
        p.idx.v[2 * i] = 0xFFFFFFFFu;
        p.idx.v[2 * i + 1] = 0xFFFFFFFFu;
    }
}
