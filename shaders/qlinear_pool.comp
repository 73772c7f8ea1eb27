#version 460
// com.microsoft QLinearAveragePool (ops/pool/qlinear.rs), one thread per output element, 1-D
// to 3-D as pool.comp (taps in the padding skipped; with count_include_pad the divisor counts
// taps up to the end of the explicit padding). The window's values are dequantized in f32
// (x_scale * (x - x_zero)) and summed in order, the mean quantized as QuantizeLinear does:
// the CPU kernel's arithmetic, so the bytes agree.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_GOOGLE_include_directive : require
// @variant u8
// @variant i8 SIGNED
#include "opcodes.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer Floats { float v[]; };
layout(buffer_reference, scalar) writeonly buffer OutBytes { uint8_t v[]; };

// Axis triples are (D, H, W); lim = input + pad_end. No dilations: the op has none. 128
// bytes, the most push constants a device must offer.
layout(push_constant, scalar) uniform P {
    Bytes x;
    OutBytes y;
    Floats xs;
    Bytes xz;
    Floats ys;
    Bytes yz;
    uint planes;
    uvec3 in_size;
    uvec3 out_size;
    uvec3 kernel;
    uvec3 stride;
    uvec3 pad;
    uvec3 lim;
    uint mode; // POOL_AVG or POOL_AVG_INCLUDE_PAD
} p;

int val(uint8_t x) {
#ifdef SIGNED
    return int(int8_t(x));
#else
    return int(x);
#endif
}

float div_rn(float a, float b) {
    precise float q0 = a / b;
    precise float r = fma(-q0, b, a);
    precise float q = fma(r, 1.0 / b, q0);
    return q;
}

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
    float xs = p.xs.v[0];
    int xz = val(p.xz.v[0]);
    precise float sum = 0.0;
    uint count = 0;
    uvec3 padded = uvec3(0);
    for (uint kd = 0; kd < p.kernel.x; kd++) {
        int id = start.x + int(kd);
        if (id < int(p.lim.x)) padded.x++;
        if (uint(id) >= p.in_size.x) continue;
        for (uint kh = 0; kh < p.kernel.y; kh++) {
            int ih = start.y + int(kh);
            if (uint(ih) >= p.in_size.y) continue;
            uint row = xbase + (uint(id) * p.in_size.y + uint(ih)) * p.in_size.z;
            for (uint kw = 0; kw < p.kernel.z; kw++) {
                int iw = start.z + int(kw);
                if (uint(iw) >= p.in_size.z) continue;
                precise float v = xs * float(val(p.x.v[row + uint(iw)]) - xz);
                sum += v;
                count++;
            }
        }
    }
    if (p.mode == POOL_AVG_INCLUDE_PAD) {
        for (uint kh = 0; kh < p.kernel.y; kh++)
            if (start.y + int(kh) < int(p.lim.y)) padded.y++;
        for (uint kw = 0; kw < p.kernel.z; kw++)
            if (start.z + int(kw) < int(p.lim.z)) padded.z++;
        count = padded.x * padded.y * padded.z;
    }
    float mean = count == 0u ? 0.0 : div_rn(sum, float(count));
    float q = roundEven(clamp(div_rn(mean, p.ys.v[0]), -1e9, 1e9));
#ifdef SIGNED
    int v = clamp(int(q) + val(p.yz.v[0]), -128, 127);
#else
    int v = clamp(int(q) + val(p.yz.v[0]), 0, 255);
#endif
    p.y.v[i] = uint8_t(uint(v) & 255u);
}
