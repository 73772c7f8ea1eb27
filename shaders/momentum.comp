#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"
#include "optim.glsl"

// ai.onnx.preview.training Momentum (ops/training.rs), standard or Nesterov's, on one
// (X, G, V) group; a node with several groups dispatches this once per group.

layout(push_constant, scalar) uniform P {
    Vals r;
    Step t;
    Vals x;
    Vals g;
    Vals v;
    Outs x_new;
    Outs v_new;
    uint n;
    float norm_coefficient;
    float alpha;
    float beta;
    uint nesterov;
} p;

void main() {
    uint i = optim_index();
    if (i >= p.n) return;
    // The first step (T = 0) takes the whole gradient.
    A beta = step_positive(p.t) ? A(p.beta) : A(1);
    A x = TO_A(p.x.v[i]);
    A g = A(p.norm_coefficient) * x + TO_A(p.g.v[i]);
    A v = A(p.alpha) * TO_A(p.v.v[i]) + beta * g;
    A dir = p.nesterov != 0u ? g + A(p.alpha) * v : v;
    p.v_new.v[i] = FROM_A(v);
    p.x_new.v[i] = FROM_A(x - TO_A(p.r.v[0]) * dir);
}
