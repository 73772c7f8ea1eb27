#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// fused_elementwise: a chain of elementwise steps in one pass (ops/elementwise/fused.rs, made by
// graph/fuse.rs). Each thread loads its element of x once, runs the program in float and
// stores once; the interior values never reach memory.
// The program is in push constants, uniform across the dispatch (no divergence): up to 8 steps
// of 16 bits, two per word in prog[]:
//   bits 0-4   op code (STEP_*: shaders/opcodes.toml; STEP_END ends the program)
//   bits 5-7   operand source (SRC_*): none, scalar sc[si] (Clip: sc[si], sc[si+1]), the chain's
//              start value x, operand buffer b<j>
//   bit 8      the running value is the second operand (c - v, c / v, c ^ v)
//   bits 9-11  si, the first scalar's index
// Operand buffer j is read at (i / inner[j]) % count[j]: a full tensor, a bias, a per-channel
// vector, a single element (fused.rs block_broadcast). Unused slots point at x and are not read.
// The formulas are unary.comp's and pow.comp's, so a fused chain agrees with the unfused one;
// f16 computes in float and rounds once on the store (the unfused chain rounds per step).
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"
#include "opcodes.glsl"

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    In b0;
    In b1;
    In b2;
    In b3;
    uint n;
    uint inner[4];
    uint count[4];
    uint prog[4];
    float sc[7];
} p;

float tanh_(float x) {
    float ax = abs(x);
    float r;
    if (ax < 0.05) {
        float x2 = x * x;
        r = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0)));
    } else {
        float t = exp(-2.0 * ax);
        r = (1.0 - t) / (1.0 + t);
    }
    return x < 0.0 ? -r : r;
}

float sigmoid(float x) {
    float e = exp(-abs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

float erf_(float x) {
    float ax = abs(x);
    float t = 1.0 / (1.0 + 0.3275911 * ax);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    float r = 1.0 - poly * exp(-ax * ax);
    if (ax < 1e-2) r = ax * (1.1283791670955126 - 0.37612638903183754 * ax * ax);
    return isnan(x) ? x : (x < 0.0 ? -r : r);
}

float fpow(float x, float y) {
    // GLSL's pow is undefined for x < 0 and for x = 0, y <= 0: C's rules, as pow.comp.
    if (y == 0.0) return 1.0;
    if (isnan(x) || isnan(y)) return x + y;
    float r = pow(abs(x), y);
    if (x == 0.0) r = y < 0.0 ? 1.0 / 0.0 : 0.0;
    if (x < 0.0 || (x == 0.0 && sign(1.0 / x) < 0.0)) {
        if (floor(y) != y) return 0.0 / 0.0;
        if (mod(abs(y), 2.0) == 1.0) r = -r;
    }
    return r;
}

float operand(uint src, uint si, uint i, float x0) {
    switch (src) {
    case SRC_SCALAR: return p.sc[si];
    case SRC_START: return x0;
    case SRC_BUFFER0: return float(p.b0.v[(i / p.inner[0]) % p.count[0]]);
    case SRC_BUFFER1: return float(p.b1.v[(i / p.inner[1]) % p.count[1]]);
    case SRC_BUFFER2: return float(p.b2.v[(i / p.inner[2]) % p.count[2]]);
    case SRC_BUFFER3: return float(p.b3.v[(i / p.inner[3]) % p.count[3]]);
    default: return 0.0;  // SRC_NONE
    }
}

float step_(uint code, float v, float o, bool right, uint si) {
    float a = right ? o : v;
    float b = right ? v : o;
    switch (code) {
    case STEP_RELU: return v < 0.0 ? 0.0 : v;
    case STEP_SIGMOID: return sigmoid(v);
    case STEP_TANH: return tanh_(v);
    case STEP_EXP: return exp(v);
    case STEP_LOG: return log(v);
    case STEP_NEG: return -v;
    case STEP_ABS: return abs(v);
    case STEP_SQRT: return sqrt(v);
    case STEP_ERF: return erf_(v);
    case STEP_CLIP: {  // as numpy: NaN stays
        float r = v;
        if (r < p.sc[si]) r = p.sc[si];
        if (r > p.sc[si + 1u]) r = p.sc[si + 1u];
        return r;
    }
    case STEP_ADD: return a + b;
    case STEP_SUB: return a - b;
    case STEP_MUL: return a * b;
    case STEP_DIV: return a / b;
    case STEP_POW: return fpow(a, b);
    default: return v;
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    float x0 = float(p.x.v[i]);
    float v = x0;
    for (uint s = 0u; s < 8u; ++s) {
        uint w = (p.prog[s >> 1u] >> (16u * (s & 1u))) & 0xFFFFu;
        uint code = w & 31u;
        if (code == STEP_END) break;
        uint si = (w >> 9u) & 7u;
        float o = operand((w >> 5u) & 7u, si, i, x0);
        v = step_(code, v, o, ((w >> 8u) & 1u) != 0u, si);
    }
    p.y.v[i] = T(v);
}
