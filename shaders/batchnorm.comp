#version 460
// BatchNormalization in inference mode, one thread per element:
// y = (x - mean) / sqrt(var + eps) * scale + bias, the statistics indexed by channel, or by
// position within a sample when per_activation (spatial = 0, opsets before 9).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };

layout(push_constant, scalar) uniform P {
    FIn x;
    FIn scale;
    FIn bias;
    FIn mean;
    FIn var;
    FOut y;
    uint n;         // elements of x
    uint channels;
    uint spatial;   // elements per channel per sample
    uint eps_bits;
    uint per_activation;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint j = p.per_activation != 0u ? i % (p.channels * p.spatial) : (i / p.spatial) % p.channels;
    float eps = uintBitsToFloat(p.eps_bits);
    float a = float(p.scale.v[j]) * inversesqrt(float(p.var.v[j]) + eps);
    p.y.v[i] = T((float(p.x.v[i]) - float(p.mean.v[j])) * a + float(p.bias.v[j]));
}
