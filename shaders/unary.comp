#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// unary: y = f(x) elementwise over floats (ops/elementwise/unary.rs). One pipeline per element
// type; the formula is chosen by a push-constant op code (UnKind's discriminant), uniform across
// the dispatch so the switch costs no divergence. alpha, beta, gamma carry the attributes.
// f16 computes in float and rounds once on the store.
// @variant f32 DT_F32
// @variant f16 DT_F16
// The cls_* variants classify into bools: IsNaN (op 40), IsInf (41; alpha = detect_negative,
// beta = detect_positive).
// @variant cls_f32 DT_F32 BOOL_OUT
// @variant cls_f16 DT_F16 BOOL_OUT
#include "types.glsl"
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
    case 0u: return x < 0.0 ? 0.0 : x;                        // Relu
    case 1u: return sigmoid(x);
    case 2u: return tanh_(x);
    case 3u: return sqrt(x);
    case 4u: return exp(x);
    case 5u: return log(x);
    case 6u: return erf_(x);
    case 7u: return clamp(p.alpha * x + p.beta, 0.0, 1.0);    // HardSigmoid
    case 8u: return x * clamp(x / 6.0 + 0.5, 0.0, 1.0);       // HardSwish
    case 9u: return x < 0.0 ? p.alpha * x : x;                // LeakyRelu
    case 10u: return x < 0.0 ? p.alpha * exp_m1(x) : x;       // Elu
    case 11u: return 0.5 * x * (1.0 + erf_(x * 0.70710678118654752));
    case 12u: return 0.5 * x * (1.0 + tanh_(0.79788456080286536 * (x + 0.044715 * x * x * x)));
    case 13u: return -x;
    case 14u: return abs(x);
    case 15u: return 1.0 / x;
    case 16u: return floor(x);
    case 17u: return ceil(x);
    case 18u: return roundEven(x);
    case 19u: return isnan(x) ? x : sign(x);
    case 20u: return sin(x);
    case 21u: return cos(x);
    case 22u: return tan(x);
    // lavapipe's asin/acos are off by ~2e-4; the two-argument atan is accurate.
    case 23u: return abs(x) > 1.0 ? NAN : atan(x, sqrt((1.0 - x) * (1.0 + x)));
    case 24u: return abs(x) > 1.0 ? NAN : atan(sqrt((1.0 - x) * (1.0 + x)), x);
    case 25u: return atan(x);
    // The hyperbolic built-ins are fine for the moderate arguments models feed them.
    case 26u: return sinh(x);
    case 27u: return cosh(x);
    case 28u: return asinh(x);
    case 29u: return x < 1.0 ? NAN : acosh(x);
    case 30u: return abs(x) > 1.0 ? NAN : (abs(x) == 1.0 ? x * INF : atanh(x));
    case 31u: return softplus(x);
    case 32u: return x / (1.0 + abs(x));                      // Softsign
    case 33u: return x > 0.0 ? p.beta * x : p.beta * p.alpha * exp_m1(x);   // Selu
    case 34u: return max(x, 0.0) + min(0.0, p.alpha * exp_m1(x / p.alpha)); // Celu
    case 35u: return x > p.alpha ? x : 0.0;                   // ThresholdedRelu
    case 36u: return x * tanh_(softplus(x));                  // Mish
    case 37u: return x < -p.alpha ? x + p.beta : (x > p.alpha ? x - p.beta : 0.0); // Shrink
    default: return x;
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    float x = float(p.x.v[i]);
#ifdef BOOL_OUT
    bool r = p.op == 40u ? isnan(x)
                         : (isinf(x) && ((x > 0.0 && p.beta != 0.0) || (x < 0.0 && p.alpha != 0.0)));
    p.y.v[i] = uint8_t(r ? 1u : 0u);
#else
    p.y.v[i] = T(apply(x));
#endif
}
