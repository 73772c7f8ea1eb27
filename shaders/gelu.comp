#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "opcodes.glsl"

// com.microsoft's GELUs (ops/gelu.rs): y = f(x + bias[i % bias_n]), the bias (1-D, the last
// axis) only when bias_n > 0, so the bias add costs no pass of its own. The formula is a
// push-constant mode (GELU_*: shaders/opcodes.toml), uniform across the dispatch. Float math,
// one rounding on the store.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In bias;
    Out y;
    uint n;
    uint bias_n;
    uint mode;
    float alpha;
} p;

// 1 / (1 + e^-x) without overflow: the exp only ever sees a non-positive argument.
float logistic(float x) {
    float e = exp(-abs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

// 1 + erf(x): for x < 0 this is erfc(|x|), computed directly so nothing cancels. erfc by
// Abramowitz & Stegun 7.1.26 (absolute error under 1.5e-7), and erf's Maclaurin series near 0
// where that formula's relative error is poor.
float one_plus_erf(float x) {
    float a = abs(x);
    if (a < 0.01) return 1.0 + x * (1.1283791670955126 - 0.37612638903183754 * a * a);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float c = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
              + t * (-1.453152027 + t * 1.061405429)))) * exp(-a * a);
    return x < 0.0 ? c : 2.0 - c;
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    float x = float(p.x.v[i]);
    if (p.bias_n > 0u) x += float(p.bias.v[i % p.bias_n]);
    float y;
    switch (p.mode) {
    case GELU_ERF: y = 0.5 * x * one_plus_erf(x * 0.70710678118654752); break;
    // 0.5 (1 + tanh(u)) is logistic(2u), which never cancels for negative u.
    case GELU_TANH: y = x * logistic(1.5957691216057308 * (x + 0.044715 * x * x * x)); break;
    default: y = x * logistic(p.alpha * x); break;
    }
    p.y.v[i] = T(y);
}
