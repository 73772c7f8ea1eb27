#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant main DT_F64
#include "types.glsl"
#include "opcodes.glsl"

// unary_f64: y = f(x) over f64 in double (GPUs with shaderFloat64; ops/elementwise/unary.rs)
// for the formulas GLSL's double arithmetic and f64math.glsl's exp and log give at f64's
// precision; unary.rs keeps the rest on the CPU. alpha carries LeakyRelu's slope and
// ThresholdedRelu's threshold.

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { double v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { double v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
    uint op;
    float alpha;
} p;

#define POS_INF double(uintBitsToFloat(0x7f800000u))
#define NEG_INF double(uintBitsToFloat(0xff800000u))
#include "f64math.glsl"

double f(double x) {
    double a = double(p.alpha);
    switch (p.op) {
        case UN_RELU: return x > 0.0LF ? x : (isnan(x) ? x : 0.0LF);
        case UN_SQRT: return sqrt(x);
        case UN_EXP: return exp_d(x);
        case UN_LOG: return log_d(x);
        case UN_NEG: return -x;
        case UN_ABS: return abs(x);
        case UN_RECIPROCAL: return 1.0LF / x;
        case UN_FLOOR: return floor(x);
        case UN_CEIL: return ceil(x);
        case UN_ROUND: return roundEven(x);
        case UN_SIGN: return isnan(x) ? x : sign(x);
        case UN_SIGMOID: {
            // Neither branch's exp can overflow.
            if (x >= 0.0LF) return 1.0LF / (1.0LF + exp_d(-x));
            double e = exp_d(x);
            return e / (1.0LF + e);
        }
        case UN_LEAKY_RELU: return x >= 0.0LF ? x : a * x;
        case UN_THRESHOLDED_RELU: return x > a ? x : 0.0LF;
        default: return x;
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = f(p.x.v[i]);
}
