#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
#include "types.glsl"

// ArgMax / ArgMin (ops/reduce/arg.rs): one invocation per output, scanning `len` elements
// `inner` apart. `is_min` picks ArgMin, `last` the last of equal extremes; a NaN is the
// extreme, as in numpy.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { int64_t v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    uint len;
    uint inner;
    uint is_min;
    uint last;
} p;

bool nan_of(T v) {
#ifdef IS_FLOAT
    return isnan(float(v));
#else
    return false;
#endif
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint base = (i / p.inner) * p.len * p.inner + i % p.inner;
    T best = p.x.v[base];
    uint at = 0u;
    for (uint j = 1u; j < p.len; ++j) {
        T v = p.x.v[base + j * p.inner];
        bool take;
        if (nan_of(best)) {
            take = p.last != 0u && nan_of(v);
        } else if (nan_of(v)) {
            take = true;
        } else {
            bool strictly = p.is_min != 0u ? v < best : v > best;
            take = strictly || (p.last != 0u && v == best);
        }
        if (take) {
            best = v;
            at = j;
        }
    }
    p.y.v[i] = int64_t(at);
}
