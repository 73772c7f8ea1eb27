#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require

// DynamicQuantizeLinear's scale and zero point (ops/quantize/dynamic.rs), by ONNX's formula:
// the range [min(0, min x), max(0, max x)] over 255 steps (1/255 when it is empty), the zero
// point -min / scale clipped to [0, 255] and rounded half to even. One workgroup: each
// invocation scans a stride of x, then the workgroup combines; quantize.comp then uses both.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Scale { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Zp { uint8_t v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Scale scale;
    Zp zp;
    uint n;
} p;

shared float lo[256];
shared float hi[256];

void main() {
    uint t = gl_LocalInvocationID.x;
    float mn = 0.0;
    float mx = 0.0;
    for (uint i = t; i < p.n; i += 256u) {
        float v = p.x.v[i];
        mn = min(mn, v);
        mx = max(mx, v);
    }
    lo[t] = mn;
    hi[t] = mx;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) {
            lo[t] = min(lo[t], lo[t + s]);
            hi[t] = max(hi[t], hi[t + s]);
        }
        barrier();
    }
    if (t == 0u) {
        mn = lo[0];
        mx = hi[0];
        // Both divisions correctly rounded, as the CPU's (a GPU's may be an ulp off): one
        // correction from the exact residual.
        precise float d = mx == mn ? 1.0 : mx - mn;
        precise float s0 = d / 255.0;
        precise float scale = fma(fma(-s0, 255.0, d), 1.0 / 255.0, s0);
        precise float n = 0.0 - mn;
        precise float z0 = n / scale;
        precise float zp = clamp(fma(fma(-z0, scale, n), 1.0 / scale, z0), 0.0, 255.0);
        p.scale.v[0] = scale;
        p.zp.v[0] = uint8_t(uint(roundEven(zp)));
    }
}
