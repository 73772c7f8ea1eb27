#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32_1 DT_F32 NIN=1
// @variant f32_2 DT_F32 NIN=2
// @variant f16_1 DT_F16 NIN=1
// @variant f16_2 DT_F16 NIN=2
#include "types.glsl"

// Einsum of one or two inputs (ops/einsum/): one invocation per output element, summing over
// the labels not in the output the product of the inputs at per-label strides; float
// accumulation. Table: [n_out, n_sum, sizes (output labels, then summed), strides of input 0
// over all labels, strides of input 1].
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };
layout(push_constant, scalar) uniform P {
    In a;
#if NIN == 2
    In b;
#endif
    Out y;
    Tab t;
    uint nout;
    uint nsum;
} p;

void main() {
    uint o = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (o >= p.nout) return;
    uint no = p.t.v[0];
    uint ns = p.t.v[1];
    uint nl = no + ns;
    uint sz = 2u;
    uint sa = 2u + nl;
    uint sb = 2u + 2u * nl;
    uint base_a = 0u;
    uint base_b = 0u;
    uint r = o;
    for (int l = int(no) - 1; l >= 0; --l) {
        uint i = r % p.t.v[sz + uint(l)];
        r /= p.t.v[sz + uint(l)];
        base_a += i * p.t.v[sa + uint(l)];
#if NIN == 2
        base_b += i * p.t.v[sb + uint(l)];
#endif
    }
    float acc = 0.0;
    for (uint s = 0u; s < p.nsum; ++s) {
        uint oa = base_a;
        uint ob = base_b;
        uint q = s;
        for (int l = int(ns) - 1; l >= 0; --l) {
            uint k = no + uint(l);
            uint i = q % p.t.v[sz + k];
            q /= p.t.v[sz + k];
            oa += i * p.t.v[sa + k];
#if NIN == 2
            ob += i * p.t.v[sb + k];
#endif
        }
#if NIN == 2
        acc += float(p.a.v[oa]) * float(p.b.v[ob]);
#else
        acc += float(p.a.v[oa]);
#endif
    }
    p.y.v[o] = T(acc);
}
