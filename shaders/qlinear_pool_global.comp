#version 460
// com.microsoft QLinearGlobalAveragePool (ops/pool/qlinear.rs): one workgroup per (batch,
// channel) plane sums its 8-bit values in int32, then requantizes once as ONNX Runtime's
// MLAS does: y = round_even((sum - x_zero * n) * (x_scale / (y_scale * n))) + y_zero,
// saturated. The arithmetic is the CPU kernel's, f32 in the same order, so the bytes agree.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require
// @variant u8
// @variant i8 SIGNED

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer Floats { float v[]; };
layout(buffer_reference, scalar) writeonly buffer OutBytes { uint8_t v[]; };

layout(push_constant, scalar) uniform P {
    Bytes x;
    Floats xs;
    Bytes xz;
    Floats ys;
    Bytes yz;
    OutBytes y;
    uint planes;
    uint plane_size;
} p;

shared int part[256];

int val(uint8_t x) {
#ifdef SIGNED
    return int(int8_t(x));
#else
    return int(x);
#endif
}

// a / b correctly rounded (Vulkan's division may be 2.5 ulp off; the CPU's is exact).
float div_rn(float a, float b) {
    precise float q0 = a / b;
    precise float r = fma(-q0, b, a);
    precise float q = fma(r, 1.0 / b, q0);
    return q;
}

void main() {
    uint plane = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (plane >= p.planes) return;
    uint lid = gl_LocalInvocationID.x;
    uint base = plane * p.plane_size;
    int acc = 0;
    for (uint j = lid; j < p.plane_size; j += 256u) acc += val(p.x.v[base + j]);
    part[lid] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (lid < s) part[lid] += part[lid + s];
        barrier();
    }
    if (lid != 0u) return;
    int n = int(p.plane_size);
    int yz = val(p.yz.v[0]);
    precise float scale = div_rn(p.xs.v[0], p.ys.v[0] * float(n));
    precise float v = float(part[0] - val(p.xz.v[0]) * n) * scale;
#ifdef SIGNED
    const float lo = -128.0, hi = 127.0;
#else
    const float lo = 0.0, hi = 255.0;
#endif
    v = isnan(v) ? 0.0 : clamp(v, lo - float(yz), hi - float(yz));
    p.y.v[plane] = uint8_t(uint(int(roundEven(v)) + yz) & 255u);
}
