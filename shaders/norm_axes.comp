#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// MeanVarianceNormalization and LpNormalization (ops/norm/other.rs) over any set of axes:
// one invocation per index of the kept axes walks the normalised set (offsets through the
// table, laid out as in reduce.comp: [nk, kept sizes, kept strides, nr, reduced sizes,
// reduced strides]) once for the statistic and once to write, in float.
// mode 0: (x - mean) / (sqrt(var) + 1e-9); 1: x / sum |x|; 2: x / sqrt(sum x^2).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    Tab t;
    uint nout;
    uint nred;
    uint mode;
} p;

uint offset(uint idx, uint at) {
    uint n = p.t.v[at];
    uint off = 0u;
    for (int k = int(n) - 1; k >= 0; --k) {
        uint size = p.t.v[at + 1u + uint(k)];
        uint stride = p.t.v[at + 1u + n + uint(k)];
        off += (idx % size) * stride;
        idx /= size;
    }
    return off;
}

void main() {
    uint o = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (o >= p.nout) return;
    uint roff = 1u + 2u * p.t.v[0];
    uint base = offset(o, 0u);
    float shift = 0.0;
    float scale;
    if (p.mode == 0u) {
        float sum = 0.0;
        for (uint r = 0u; r < p.nred; ++r) sum += float(p.x.v[base + offset(r, roff)]);
        shift = sum / float(max(p.nred, 1u));
        float sq = 0.0;
        for (uint r = 0u; r < p.nred; ++r) {
            float c = float(p.x.v[base + offset(r, roff)]) - shift;
            sq += c * c;
        }
        scale = 1.0 / (sqrt(sq / float(max(p.nred, 1u))) + 1e-9);
    } else {
        float acc = 0.0;
        for (uint r = 0u; r < p.nred; ++r) {
            float v = float(p.x.v[base + offset(r, roff)]);
            acc += p.mode == 1u ? abs(v) : v * v;
        }
        float norm = p.mode == 1u ? acc : sqrt(acc);
        // A zero vector stays zero (ONNX's reference), rather than 0 / 0 = NaN.
        scale = norm == 0.0 ? 0.0 : 1.0 / norm;
    }
    for (uint r = 0u; r < p.nred; ++r) {
        uint i = base + offset(r, roff);
        p.y.v[i] = T((float(p.x.v[i]) - shift) * scale);
    }
}
