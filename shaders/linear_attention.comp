#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// LinearAttention (ops/linear_attention.rs): one invocation per state column, i.e. per
// (batch, KV head, value dimension m). Column m of the [d_k, d_v] state evolves using only
// itself (decay, the delta rule's retrieval S^T k, the write k v'), and output element m of
// each query head of the group is q . column m, so an invocation runs its column through all
// tokens in float registers, without talking to the others. Packed layouts:
// q [B, T, Hq * dk], k [B, T, Hkv * dk], v [B, T, Hkv * dv], y [B, T, Hq * dv],
// state [B, Hkv, dk, dv]; decay [B, T, Hkv] (mode 1) or [B, T, Hkv * dk] (mode 2);
// beta [B, T, 1] (mode 1) or [B, T, Hkv] (mode 2).

#define MAX_DK 256

layout(local_size_x = 64) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In q;
    In k;
    In v;
    In past;
    In decay;
    In beta;
    Out y;
    Out state;
    uint columns;  // B * Hkv * dv
    uint tokens;
    uint q_heads;
    uint kv_heads;
    uint dk;
    uint dv;
    uint has_past;
    uint decay_mode;  // 0 none, 1 per head, 2 per key dimension
    uint beta_mode;   // 0 none, 1 per token, 2 per head
    float scale;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.columns) return;
    uint m = i % p.dv, bh = i / p.dv, h = bh % p.kv_heads, b = bh / p.kv_heads;
    uint dk = p.dk, dv = p.dv, group = p.q_heads / p.kv_heads;
    float s[MAX_DK];
    for (uint r = 0u; r < dk; ++r) s[r] = p.has_past != 0u ? float(p.past.v[(bh * dk + r) * dv + m]) : 0.0;
    for (uint t = 0u; t < p.tokens; ++t) {
        uint bt = b * p.tokens + t, kh = bt * p.kv_heads + h;
        if (p.decay_mode == 1u) {
            float e = exp(float(p.decay.v[kh]));
            for (uint r = 0u; r < dk; ++r) s[r] *= e;
        } else if (p.decay_mode == 2u) {
            for (uint r = 0u; r < dk; ++r) s[r] *= exp(float(p.decay.v[kh * dk + r]));
        }
        float w = float(p.v.v[kh * dv + m]);
        if (p.beta_mode != 0u) {
            float got = 0.0;
            for (uint r = 0u; r < dk; ++r) got += s[r] * float(p.k.v[kh * dk + r]);
            w = float(p.beta.v[p.beta_mode == 2u ? kh : bt]) * (w - got);
        }
        for (uint r = 0u; r < dk; ++r) s[r] += float(p.k.v[kh * dk + r]) * w;
        for (uint g = 0u; g < group; ++g) {
            uint qh = bt * p.q_heads + h * group + g;
            float o = 0.0;
            for (uint r = 0u; r < dk; ++r) o += float(p.q.v[qh * dk + r]) * s[r];
            p.y.v[qh * dv + m] = T(p.scale * o);
        }
    }
    for (uint r = 0u; r < dk; ++r) p.state.v[(bh * dk + r) * dv + m] = T(s[r]);
}
