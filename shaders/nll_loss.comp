#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
#include "index.glsl"

// NegativeLogLikelihoodLoss (ops/loss.rs), f32 with int64 targets, x [N, C, D] flattened:
// element i = n * D + d takes -x[n, t, d] x weight[t] (weight 1 without weights), 0 where t
// is ignore_index. `reduce` 0 writes the losses (reduction none); 1 writes each loss and its
// weight to `sums` (losses then weights) for nll_reduce.comp. A target outside [0, C) that is
// not ignored is recorded in the fault record (index.glsl), which fails the run.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Idx target;
    In weight;
    Out y;
    Fault fault;
    uint n;
    uint classes;
    uint inner;
    uint has_weight;
    uint has_ignore;
    int ignore;
    uint reduce;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    int t = index_at(p.target, i, 2u);
    float loss = 0.0;
    float w = 0.0;
    if (p.has_ignore == 0u || t != p.ignore) {
        if (t < 0 || t >= int(p.classes)) {
            if (atomicCompSwap(p.fault.v[0], 0u, 1u) == 0u) {
                p.fault.v[1] = i;
                p.fault.v[2] = p.target.v[2u * i];
                p.fault.v[3] = p.target.v[2u * i + 1u];
                p.fault.v[4] = p.classes;
            }
        } else {
            uint c = uint(t);
            w = p.has_weight != 0u ? p.weight.v[c] : 1.0;
            uint d = i % p.inner;
            loss = -p.x.v[((i / p.inner) * p.classes + c) * p.inner + d] * w;
        }
    }
    if (p.reduce == 0u) {
        p.y.v[i] = loss;
    } else {
        p.y.v[i] = loss;
        p.y.v[p.n + i] = w;
    }
}
