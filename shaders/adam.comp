#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"
#include "optim.glsl"

// ai.onnx.preview.training Adam (ops/training.rs) on one (X, G, V, H) group; a node with
// several groups dispatches this once per group.

layout(push_constant, scalar) uniform P {
    Vals r;
    Step t;
    Vals x;
    Vals g;
    Vals v;
    Vals h;
    Outs x_new;
    Outs v_new;
    Outs h_new;
    uint n;
    float norm_coefficient;
    float norm_coefficient_post;
    float alpha;
    float beta;
    float epsilon;
} p;

void main() {
    uint i = optim_index();
    if (i >= p.n) return;
    A alpha = A(p.alpha);
    A beta = A(p.beta);
    A rate = TO_A(p.r.v[0]);
    // Bias correction from the second step on (T > 0).
    if (step_positive(p.t)) {
        rate *= sqrt(A(1) - pow_step(beta, p.t)) / (A(1) - pow_step(alpha, p.t));
    }
    A x = TO_A(p.x.v[i]);
    A g = A(p.norm_coefficient) * x + TO_A(p.g.v[i]);
    A v = alpha * TO_A(p.v.v[i]) + (A(1) - alpha) * g;
    A h = beta * TO_A(p.h.v[i]) + (A(1) - beta) * (g * g);
    p.v_new.v[i] = FROM_A(v);
    p.h_new.v[i] = FROM_A(h);
    A moved = x - rate * (v / (sqrt(h) + A(p.epsilon)));
    p.x_new.v[i] = FROM_A((A(1) - A(p.norm_coefficient_post)) * moved);
}
