#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
#include "types.glsl"

// CumSum (ops/cumsum.rs): one invocation per line of `len` elements `inner` apart. Floats
// accumulate in float, integers in int64 (wrapping like ONNX's).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint lines;
    uint len;
    uint inner;
    uint exclusive;
    uint reverse;
} p;

#ifdef IS_FLOAT
#define ACC float
#else
#define ACC int64_t
#endif

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.lines) return;
    uint base = (i / p.inner) * p.len * p.inner + i % p.inner;
    ACC acc = ACC(0);
    for (uint s = 0u; s < p.len; ++s) {
        uint j = p.reverse != 0u ? p.len - 1u - s : s;
        uint k = base + j * p.inner;
        ACC v = ACC(p.x.v[k]);
        if (p.exclusive != 0u) {
            p.y.v[k] = T(acc);
            acc += v;
        } else {
            acc += v;
            p.y.v[k] = T(acc);
        }
    }
}
