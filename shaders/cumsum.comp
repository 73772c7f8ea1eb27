#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant f64 DT_F64 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant f32_row DT_F32 IS_FLOAT ROW
// @variant f16_row DT_F16 IS_FLOAT ROW
// @variant f64_row DT_F64 IS_FLOAT ROW
// @variant i32_row DT_I32 ROW
// @variant i64_row DT_I64 ROW
#include "types.glsl"

// CumSum and CumProd (`product`; ops/cumsum.rs): one invocation per line of `len` elements `inner` apart; with ROW
// (long lines) a workgroup per line, scanning blocks of 256 in shared memory (Hillis-Steele)
// and carrying each block's total into the next. Floats accumulate in float, integers in
// int64 (wrapping like ONNX's); f64 (GPUs with shaderFloat64) in double, as the CPU does.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    uint lines;
    uint len;
    uint inner;
    uint exclusive;
    uint reverse;
    uint product;
} p;

#if defined(DT_F64)
#define ACC double
#elif defined(IS_FLOAT)
#define ACC float
#else
#define ACC int64_t
#endif

// The scan's operation and its identity, uniform over a dispatch.
ACC unit() { return p.product != 0u ? ACC(1) : ACC(0); }
ACC op(ACC a, ACC b) { return p.product != 0u ? a * b : a + b; }

#ifdef ROW
const uint WG = 256;
shared ACC buf[WG];

void main() {
    uint line = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so every barrier is reached by all or none.
    if (line >= p.lines) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = (line / p.inner) * p.len * p.inner + line % p.inner;
    ACC carry = unit();
    for (uint b0 = 0u; b0 < p.len; b0 += WG) {
        uint s = b0 + tid;
        uint j = p.reverse != 0u ? p.len - 1u - s : s;
        ACC v = s < p.len ? ACC(TO_A(p.x.v[base + j * p.inner])) : unit();
        buf[tid] = v;
        barrier();
        for (uint d = 1u; d < WG; d <<= 1u) {
            ACC add = tid >= d ? buf[tid - d] : unit();
            barrier();
            buf[tid] = op(buf[tid], add);
            barrier();
        }
        // Exclusive: the previous position's inclusive sum (not incl - v, which an infinite
        // element would turn into NaN).
        ACC mine = p.exclusive != 0u ? (tid > 0u ? buf[tid - 1u] : unit()) : buf[tid];
        if (s < p.len) {
            p.y.v[base + j * p.inner] = FROM_A(A(op(carry, mine)));
        }
        carry = op(carry, buf[WG - 1u]);
        barrier();
    }
}
#else
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.lines) return;
    uint base = (i / p.inner) * p.len * p.inner + i % p.inner;
    ACC acc = unit();
    for (uint s = 0u; s < p.len; ++s) {
        uint j = p.reverse != 0u ? p.len - 1u - s : s;
        uint k = base + j * p.inner;
        ACC v = ACC(p.x.v[k]);
        if (p.exclusive != 0u) {
            p.y.v[k] = T(acc);
            acc = op(acc, v);
        } else {
            acc = op(acc, v);
            p.y.v[k] = T(acc);
        }
    }
}
#endif
