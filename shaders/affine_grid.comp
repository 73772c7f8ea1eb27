#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f64 DT_F64
#include "types.glsl"

// AffineGrid (ops/affine_grid.rs): one invocation per output point (n, d, h, w) of an
// [N, D, H, W] grid (D = 1 in 2-D), writing theta[n] x (x_w, y_h[, z_d], 1), `dims` values.
// theta is [N, dims, dims + 1]; the base coordinates span [-1, 1] over the corner pixels'
// centres (align_corners) or outer edges, and an axis of one pixel sits at 0, as PyTorch's.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };

layout(push_constant, scalar) uniform P {
    In theta;
    Out grid;
    uint points;  // N * D * H * W
    uint d;
    uint h;
    uint w;
    uint dims;    // 2 or 3
    uint align_corners;
} p;

A base(uint j, uint n) {
    if (n <= 1u) return A(0);
    if (p.align_corners != 0u) return A(-1) + A(j) * (A(2) / A(n - 1u));
    return A(2 * j + 1u) / A(n) - A(1);
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.points) return;
    uint wi = i % p.w;
    uint hi = (i / p.w) % p.h;
    uint di = (i / (p.w * p.h)) % p.d;
    uint n = i / (p.w * p.h * p.d);
    uint cols = p.dims + 1u;
    A pos[4] = A[4](base(wi, p.w), base(hi, p.h), p.dims == 3u ? base(di, p.d) : A(1), A(1));
    uint th = n * p.dims * cols;
    for (uint r = 0; r < p.dims; ++r) {
        A acc = A(0);
        for (uint c = 0; c < cols; ++c) acc += TO_A(p.theta.v[th + r * cols + c]) * pos[c];
        p.grid.v[i * p.dims + r] = FROM_A(acc);
    }
}
