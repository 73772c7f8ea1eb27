#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// LRN (ops/lrn.rs), f32 over [N, C, inner]: y = x / (bias + alpha / size x the sum of squares
// of the channels from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2))^beta.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;        // elements
    uint channels;
    uint inner;
    uint size;
    float alpha;
    float beta;
    float bias;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    int c = int((i / p.inner) % p.channels);
    uint base = i - uint(c) * p.inner;
    int lo = max(0, c - int((p.size - 1u) / 2u));
    int hi = min(int(p.channels) - 1, c + int(p.size / 2u));
    float sum = 0.0;
    for (int k = lo; k <= hi; ++k) {
        float v = p.x.v[base + uint(k) * p.inner];
        sum += v * v;
    }
    p.y.v[i] = p.x.v[i] / pow(p.bias + p.alpha / float(p.size) * sum, p.beta);
}
