#version 460
// MaxPool / AveragePool, one thread per output element, 1-D to 3-D (shorter inputs arrive
// with leading size-1 axes). Conventions as node/src/ops/pool/mod.rs states them: taps in the
// padding are skipped; with count_include_pad the divisor counts taps up to the end of the
// explicit padding; an empty window gives -FLT_MAX (max) or 0 (average).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant u8 DT_U8
// @variant i8 DT_I8
#include "types.glsl"
#include "opcodes.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };

// Axis triples are (D, H, W). lim = input + pad_end.
layout(push_constant, scalar) uniform P {
    FIn x;
    FOut y;
    uint planes;
    uvec3 in_size;
    uvec3 out_size;
    uvec3 kernel;
    uvec3 stride;
    uvec3 dilation;
    uvec3 pad;
    uvec3 lim;
    uint mode; // POOL_*
    uint lp;   // LpPool's p
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

    uint xbase = plane * p.in_size.x * p.in_size.y * p.in_size.z;
    bool is_max = p.mode == POOL_MAX;
    float best = -3.402823466e+38;
    float sum = 0.0;
    uint count = 0;
    uvec3 padded_taps = uvec3(0);
    for (uint kd = 0; kd < p.kernel.x; kd++) {
        int id = start.x + int(kd * p.dilation.x);
        if (id < int(p.lim.x)) padded_taps.x++;
        if (uint(id) >= p.in_size.x) continue;
        for (uint kh = 0; kh < p.kernel.y; kh++) {
            int ih = start.y + int(kh * p.dilation.y);
            if (uint(ih) >= p.in_size.y) continue;
            uint row = xbase + (uint(id) * p.in_size.y + uint(ih)) * p.in_size.z;
            for (uint kw = 0; kw < p.kernel.z; kw++) {
                int iw = start.z + int(kw * p.dilation.z);
                if (uint(iw) >= p.in_size.z) continue;
                float v = float(p.x.v[row + uint(iw)]);
                // First tap taken as is, so a leading NaN propagates as on the CPU.
                if (count == 0u || v > best) best = v;
                sum += p.mode == POOL_LP ? pow(abs(v), float(p.lp)) : v;
                count++;
            }
        }
    }
    float result;
    if (is_max) {
        result = best;
    } else if (p.mode == POOL_LP) {
        result = pow(sum, 1.0 / float(p.lp));
    } else {
        if (p.mode == POOL_AVG_INCLUDE_PAD) {
            // Taps before the end of the explicit padding, per axis (starts are never
            // before the beginning of the padding).
            for (uint kh = 0; kh < p.kernel.y; kh++)
                if (start.y + int(kh * p.dilation.y) < int(p.lim.y)) padded_taps.y++;
            for (uint kw = 0; kw < p.kernel.z; kw++)
                if (start.z + int(kw * p.dilation.z) < int(p.lim.z)) padded_taps.z++;
            count = padded_taps.x * padded_taps.y * padded_taps.z;
        }
        result = count == 0u ? 0.0 : sum / float(count);
    }
#if defined(DT_U8) || defined(DT_I8)
    // MaxPool only (ONNX allows no other pool of 8-bit integers). Only an empty window (all
    // padding, which shapes checked at load rule out) could leave the type's range.
    #if defined(DT_U8)
    result = clamp(result, 0.0, 255.0);
#else
    result = clamp(result, -128.0, 127.0);
#endif
#endif
    p.y.v[i] = T(result);
}
