#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"

// ai.onnx.ml Binarizer (ops/ml.rs): y = x > threshold ? 1 : 0 in x's type. The threshold is a
// float attribute, so widening it to double for the f64 variant is exact. NaN compares false,
// giving 0, as the CPU kernel does.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    float threshold;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = TO_A(p.x.v[i]) > A(p.threshold) ? T(1) : T(0);
}
