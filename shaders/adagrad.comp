#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"
#include "optim.glsl"

// ai.onnx.preview.training Adagrad (ops/training.rs) on one (X, G, H) group; a node with
// several groups dispatches this once per group.

layout(push_constant, scalar) uniform P {
    Vals r;
    Step t;
    Vals x;
    Vals g;
    Vals h;
    Outs x_new;
    Outs h_new;
    uint n;
    float norm_coefficient;
    float epsilon;
    float decay_factor;
} p;

void main() {
    uint i = optim_index();
    if (i >= p.n) return;
    A rate = TO_A(p.r.v[0]) / (A(1) + step_value(p.t) * A(p.decay_factor));
    A x = TO_A(p.x.v[i]);
    A g = A(p.norm_coefficient) * x + TO_A(p.g.v[i]);
    A h = TO_A(p.h.v[i]) + g * g;
    p.h_new.v[i] = FROM_A(h);
    p.x_new.v[i] = FROM_A(x - rate * g / (sqrt(h) + A(p.epsilon)));
}
