#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// Merges attention.comp's splits of the key range (ops/attention/gpu.rs): per output element,
// y = sum_sp acc_sp * exp(m_sp - M) / sum_sp l_sp * exp(m_sp - M), M the largest m_sp; zero
// when no split saw a key. Splits are merged in order, so results are deterministic.
// One invocation per element of y; the table is attention.comp's.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer Part { float v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    Part part;
    Words t;
    Out y;
    uint n;
    uint nsplit;
} p;

const float NEG_INF = uintBitsToFloat(0xff800000u);

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint S = p.t.v[0], DV = p.t.v[3], G = p.t.v[4], R = p.t.v[37];
    uint d = i % DV;
    uint prow = i / DV;
    uint r = prow % R;
    uint bk = prow / R;
    uint hkv = p.t.v[5] / G;
    uint kvh = bk % hkv;
    uint b = bk / hkv;
    uint accs = p.t.v[39];
    float mx = NEG_INF;
    for (uint sp = 0u; sp < p.nsplit; ++sp) mx = max(mx, p.part.v[2u * (prow * p.nsplit + sp)]);
    float l = 0.0;
    float a = 0.0;
    if (mx > NEG_INF) {
        for (uint sp = 0u; sp < p.nsplit; ++sp) {
            uint slot = prow * p.nsplit + sp;
            float w = exp(p.part.v[2u * slot] - mx);
            l += p.part.v[2u * slot + 1u] * w;
            a += p.part.v[accs + slot * DV + d] * w;
        }
    }
    uint hq = kvh * G + r / S;
    uint at = b * p.t.v[18] + hq * p.t.v[19] + (r % S) * p.t.v[20] + d;
    p.y.v[at] = T(l > 0.0 ? a / l : 0.0);
}
