#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// unary_tanh: y = tanh(x) over f32, elementwise (ops/elementwise/unary.rs).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;
} p;

float op(float x) {
    // Built-in tanh may be (e^x - e^-x) / (e^x + e^-x), which overflows to NaN for large |x|
    // and loses relative precision near 0. Instead: a series near 0, and for larger |x|
    // (1 - e^-2|x|) / (1 + e^-2|x|), whose exp only underflows.
    float ax = abs(x);
    float r;
    if (ax < 0.05) {
        float x2 = x * x;
        r = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0)));
    } else {
        float t = exp(-2.0 * ax);
        r = (1.0 - t) / (1.0 + t);
    }
    // NaN fails both tests above and flows through r unchanged.
    return x < 0.0 ? -r : r;
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    p.y.v[i] = op(p.x.v[i]);
}
