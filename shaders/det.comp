#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"

// Det (ops/det.rs): one invocation per m x m matrix (m <= MAX_M), LU with partial pivoting in
// private memory; the determinant is the product of the pivots, negated once per row swap. A
// zero pivot column means a singular matrix: 0, as the CPU kernel gives.

#define MAX_M 16

layout(local_size_x = 64) in;

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint n;  // matrices
    uint m;  // rows (= columns) of each
} p;

void main() {
    uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (g >= p.n) return;
    uint m = p.m;
    A a[MAX_M * MAX_M];
    uint base = g * m * m;
    for (uint i = 0; i < m * m; ++i) a[i] = TO_A(p.x.v[base + i]);
    A det = A(1);
    for (uint k = 0; k < m; ++k) {
        uint piv = k;
        A best = abs(a[k * m + k]);
        for (uint r = k + 1; r < m; ++r) {
            A v = abs(a[r * m + k]);
            if (v > best) { best = v; piv = r; }
        }
        if (best == A(0)) { det = A(0); break; }
        if (piv != k) {
            for (uint c = k; c < m; ++c) {
                A t = a[k * m + c];
                a[k * m + c] = a[piv * m + c];
                a[piv * m + c] = t;
            }
            det = -det;
        }
        A d = a[k * m + k];
        det *= d;
        for (uint r = k + 1; r < m; ++r) {
            A f = a[r * m + k] / d;
            for (uint c = k + 1; c < m; ++c) a[r * m + c] -= f * a[k * m + c];
        }
    }
    p.y.v[g] = FROM_A(det);
}
