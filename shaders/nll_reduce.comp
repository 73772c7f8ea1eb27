#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// NegativeLogLikelihoodLoss's sum or weighted mean (ops/loss.rs) of the `n` losses and `n`
// weights nll_loss.comp left in `sums`: one workgroup, each invocation a stride, then a tree.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In sums;
    Out y;
    uint n;
    uint mean;
} p;

shared float ls[256];
shared float ws[256];

void main() {
    uint t = gl_LocalInvocationID.x;
    float l = 0.0;
    float w = 0.0;
    for (uint i = t; i < p.n; i += 256u) {
        l += p.sums.v[i];
        w += p.sums.v[p.n + i];
    }
    ls[t] = l;
    ws[t] = w;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) {
            ls[t] += ls[t + s];
            ws[t] += ws[t + s];
        }
        barrier();
    }
    if (t == 0u) {
        p.y.v[0] = p.mean != 0u ? ls[0] / ws[0] : ls[0];
    }
}
