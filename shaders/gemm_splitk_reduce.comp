#version 460
// The second pass of a split-K gemm (shaders/gemm.comp, SPLIT_K variant): with r = i mod M*N,
// m = r / N, n = r mod N,
//   y[i] = alpha * (sum over the slices s, in order, of part[s * total + i]) + beta * C[m, n],
// the C term only when has_c, C's element (m, n) at m * rsC + n * csC (0 strides broadcast).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In part;
    In c;
    Out y;
    uint total;
    uint splits;
    uint MN;
    uint N;
    uint rsC;
    uint csC;
    float alpha;
    float beta;
    uint has_c;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.total) return;
    float s = 0.0;
    for (uint k = 0u; k < p.splits; k++) s += p.part.v[k * p.total + i];
    float v = p.alpha * s;
    if (p.has_c != 0u) {
        uint r = i % p.MN;
        uint m = r / p.N;
        uint n = r - m * p.N;
        v += p.beta * p.c.v[m * p.rsC + n * p.csC];
    }
    p.y.v[i] = v;
}
