#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "index.glsl"

// RotaryEmbedding, ONNX's and com.microsoft's (ops/rotary/): one invocation per element of
// x, laid out [B, S, H, D] (transposed = 0) or [B, H, S, D] (1). The first `rot` elements of
// each head rotate in pairs, the rest pass through. A pair is (d, d + rot/2), or (2c, 2c + 1)
// when interleaved; with c its cache column and r the token's cache row,
//   y[first]  = x[first] cos[r, c] - x[second] sin[r, c]
//   y[second] = x[second] cos[r, c] + x[first] sin[r, c].
// The row: mode 0, the token itself (caches [B, S, rot/2], ONNX without position_ids);
// mode 1, pos[b, s]; mode 2, pos[0] + s (a start offset). A row outside [0, max_pos) is
// recorded in the fault record (element of pos, the row, max_pos) and clamped.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In cos_c;
    In sin_c;
    Idx pos;
    Out y;
    Fault fault;
    uint n;
    uint d;
    uint rot;
    uint seq;
    uint heads;
    uint transposed;
    uint mode;
    uint max_pos;
    uint interleaved;
} p;

uint cache_row(uint b, uint s) {
    if (p.mode == 0u) return b * p.seq + s;
    uint j = p.mode == 1u ? b * p.seq + s : 0u;
    int r = index_at(p.pos, j, 2u);
    if (p.mode == 2u) r += int(s);
    if (r < 0 || r >= int(p.max_pos)) {
        if (atomicCompSwap(p.fault.v[0], 0u, 1u) == 0u) {
            p.fault.v[1] = j;
            p.fault.v[2] = uint(r);
            p.fault.v[3] = uint(r >> 31);
            p.fault.v[4] = p.max_pos;
        }
        r = clamp(r, 0, int(p.max_pos) - 1);
    }
    return uint(r);
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint dd = i % p.d;
    if (dd >= p.rot) {
        p.y.v[i] = p.x.v[i];
        return;
    }
    uint t = i / p.d;
    uint s = p.transposed != 0u ? t % p.seq : (t / p.heads) % p.seq;
    uint b = t / (p.seq * p.heads);
    uint half_rot = p.rot / 2u;
    uint c;
    uint partner;
    bool first;
    if (p.interleaved != 0u) {
        c = dd / 2u;
        first = (dd & 1u) == 0u;
        partner = first ? dd + 1u : dd - 1u;
    } else {
        first = dd < half_rot;
        c = first ? dd : dd - half_rot;
        partner = first ? dd + half_rot : dd - half_rot;
    }
    uint k = cache_row(b, s) * half_rot + c;
    float co = float(p.cos_c.v[k]);
    float si = float(p.sin_c.v[k]);
    float xs = float(p.x.v[i]);
    float xp = float(p.x.v[i - dd + partner]);
    p.y.v[i] = T(first ? xs * co - xp * si : xs * co + xp * si);
}
