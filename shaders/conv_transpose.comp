#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// ConvTranspose (ops/conv_transpose/): one invocation per output element, gathering the
// input positions i = (o + pad_begin - k * dilation) / stride that divide exactly and lie
// inside, over the channels of the output's group; accumulates in float.
// Table (3 entries each, spatial axes padded in front): input, output, kernel, stride,
// dilation, pad_begin (signed).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { int v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In w;
    In b;
    Out y;
    Tab t;
    uint total;
    uint c;
    uint m;
    uint group;
    uint has_bias;
} p;

void main() {
    uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (idx >= p.total) return;
    ivec3 insz = ivec3(p.t.v[0], p.t.v[1], p.t.v[2]);
    ivec3 outsz = ivec3(p.t.v[3], p.t.v[4], p.t.v[5]);
    ivec3 ksz = ivec3(p.t.v[6], p.t.v[7], p.t.v[8]);
    ivec3 st = ivec3(p.t.v[9], p.t.v[10], p.t.v[11]);
    ivec3 dl = ivec3(p.t.v[12], p.t.v[13], p.t.v[14]);
    ivec3 pb = ivec3(p.t.v[15], p.t.v[16], p.t.v[17]);
    uint out_vol = uint(outsz.x * outsz.y * outsz.z);
    uint in_vol = uint(insz.x * insz.y * insz.z);
    uint k_vol = uint(ksz.x * ksz.y * ksz.z);
    uint ov = idx % out_vol;
    uint nm = idx / out_vol;
    uint m = nm % p.m;
    uint n = nm / p.m;
    ivec3 o = ivec3(int(ov) / (outsz.y * outsz.z), (int(ov) / outsz.z) % outsz.y, int(ov) % outsz.z);
    uint cg = p.c / p.group;
    uint mg = p.m / p.group;
    uint grp = m / mg;
    uint mo = m % mg;
    float acc = p.has_bias != 0u ? float(p.b.v[m]) : 0.0;
    for (int k0 = 0; k0 < ksz.x; ++k0) {
        int a0 = o.x + pb.x - k0 * dl.x;
        if (a0 < 0 || a0 % st.x != 0 || a0 / st.x >= insz.x) continue;
        for (int k1 = 0; k1 < ksz.y; ++k1) {
            int a1 = o.y + pb.y - k1 * dl.y;
            if (a1 < 0 || a1 % st.y != 0 || a1 / st.y >= insz.y) continue;
            for (int k2 = 0; k2 < ksz.z; ++k2) {
                int a2 = o.z + pb.z - k2 * dl.z;
                if (a2 < 0 || a2 % st.z != 0 || a2 / st.z >= insz.z) continue;
                uint iv = uint(((a0 / st.x) * insz.y + a1 / st.y) * insz.z + a2 / st.z);
                uint kv = uint((k0 * ksz.y + k1) * ksz.z + k2);
                for (uint ci = 0u; ci < cg; ++ci) {
                    uint c = grp * cg + ci;
                    acc += float(p.x.v[(n * p.c + c) * in_vol + iv]) * float(p.w.v[(c * mg + mo) * k_vol + kv]);
                }
            }
        }
    }
    p.y.v[idx] = T(acc);
}
