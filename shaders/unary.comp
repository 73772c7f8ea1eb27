#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// unary: y = f(x) elementwise over floats (ops/elementwise/unary.rs). One pipeline per element
// type; the formula is chosen by a push-constant op code (UN_*: shaders/opcodes.toml), uniform
// across the dispatch so the switch costs no divergence. alpha, beta, gamma carry the attributes.
// f16 computes in float and rounds once on the store.
// @variant f32 DT_F32
// @variant f16 DT_F16
// The cls_* variants classify into bools: UN_IS_NAN, UN_IS_INF (alpha = detect_negative,
// beta = detect_positive).
// @variant cls_f32 DT_F32 BOOL_OUT
// @variant cls_f16 DT_F16 BOOL_OUT
#include "types.glsl"
#include "opcodes.glsl"
#ifdef BOOL_OUT
#extension GL_EXT_shader_8bit_storage : require
#define TY uint8_t
#else
#define TY T
#endif

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { TY v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    uint op;
    float alpha;
    float beta;
    float gamma;
} p;

#define NAN uintBitsToFloat(0x7fc00000u)
#define INF uintBitsToFloat(0x7f800000u)

float exp_m1(float x) {
    // exp(x) - 1 loses everything near 0; two series terms are exact enough there for f32.
    return abs(x) < 1e-3 ? x * (1.0 + x * (0.5 + x / 6.0)) : exp(x) - 1.0;
}

float tanh_(float x) {
    // Built-in tanh may be (e^x - e^-x) / (e^x + e^-x), which overflows to NaN for large |x|
    // and loses relative precision near 0. Instead: a series near 0, and for larger |x|
    // (1 - e^-2|x|) / (1 + e^-2|x|), whose exp only underflows. NaN flows through.
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
    // exp of a positive argument may overflow; of a negative one it only underflows to 0.
    float e = exp(-abs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

float erf_(float x) {
    // Abramowitz & Stegun 7.1.26: absolute error below 1.5e-7; odd symmetry.
    float ax = abs(x);
    float t = 1.0 / (1.0 + 0.3275911 * ax);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    float r = 1.0 - poly * exp(-ax * ax);
    // Near 0 the formula's relative error grows; the series is better there.
    if (ax < 1e-2) r = ax * (1.1283791670955126 - 0.37612638903183754 * ax * ax);
    return isnan(x) ? x : (x < 0.0 ? -r : r);
}

float log_1p(float e) {
    // log(1 + e) loses e's low bits when 1 + e is rounded: for small e a series is exact
    // enough (error below e^4 / 4), which is what Mish needs for very negative inputs.
    return e < 1e-2 ? e * (1.0 - e * (0.5 - e / 3.0)) : log(1.0 + e);
}

float softplus(float x) {
    return max(x, 0.0) + log_1p(exp(-abs(x)));
}

float apply(float x) {
    switch (p.op) {
    case UN_RELU: return x < 0.0 ? 0.0 : x;
    case UN_SIGMOID: return sigmoid(x);
    case UN_TANH: return tanh_(x);
    case UN_SQRT: return sqrt(x);
    case UN_EXP: return exp(x);
    case UN_LOG: return log(x);
    case UN_ERF: return erf_(x);
    case UN_HARD_SIGMOID: return clamp(p.alpha * x + p.beta, 0.0, 1.0);
    case UN_HARD_SWISH: return x * clamp(x / 6.0 + 0.5, 0.0, 1.0);
    case UN_LEAKY_RELU: return x < 0.0 ? p.alpha * x : x;
    case UN_ELU: return x < 0.0 ? p.alpha * exp_m1(x) : x;
    case UN_GELU: return 0.5 * x * (1.0 + erf_(x * 0.70710678118654752));
    case UN_GELU_TANH: return 0.5 * x * (1.0 + tanh_(0.79788456080286536 * (x + 0.044715 * x * x * x)));
    case UN_NEG: return -x;
    case UN_ABS: return abs(x);
    case UN_RECIPROCAL: return 1.0 / x;
    case UN_FLOOR: return floor(x);
    case UN_CEIL: return ceil(x);
    case UN_ROUND: return roundEven(x);
    case UN_SIGN: return isnan(x) ? x : sign(x);
    case UN_SIN: return sin(x);
    case UN_COS: return cos(x);
    case UN_TAN: return tan(x);
    // lavapipe's asin/acos are off by ~2e-4; the two-argument atan is accurate.
    case UN_ASIN: return abs(x) > 1.0 ? NAN : atan(x, sqrt((1.0 - x) * (1.0 + x)));
    case UN_ACOS: return abs(x) > 1.0 ? NAN : atan(sqrt((1.0 - x) * (1.0 + x)), x);
    case UN_ATAN: return atan(x);
    // The hyperbolic built-ins are fine for the moderate arguments models feed them.
    case UN_SINH: return sinh(x);
    case UN_COSH: return cosh(x);
    case UN_ASINH: return asinh(x);
    case UN_ACOSH: return x < 1.0 ? NAN : acosh(x);
    case UN_ATANH: return abs(x) > 1.0 ? NAN : (abs(x) == 1.0 ? x * INF : atanh(x));
    case UN_SOFTPLUS: return softplus(x);
    case UN_SOFTSIGN: return x / (1.0 + abs(x));
    case UN_SELU: return x > 0.0 ? p.beta * x : p.beta * p.alpha * exp_m1(x);
    case UN_CELU: return max(x, 0.0) + min(0.0, p.alpha * exp_m1(x / p.alpha));
    case UN_THRESHOLDED_RELU: return x > p.alpha ? x : 0.0;
    case UN_MISH: return x * tanh_(softplus(x));
    case UN_SWISH: return x * sigmoid(p.alpha * x);
    case UN_SHRINK: return x < -p.alpha ? x + p.beta : (x > p.alpha ? x - p.beta : 0.0);
    default: return x;
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    float x = float(p.x.v[i]);
#ifdef BOOL_OUT
    bool r = p.op == UN_IS_NAN ? isnan(x)
                         : (isinf(x) && ((x > 0.0 && p.beta != 0.0) || (x < 0.0 && p.alpha != 0.0)));
    p.y.v[i] = uint8_t(r ? 1u : 0u);
#else
    p.y.v[i] = T(apply(x));
#endif
}
