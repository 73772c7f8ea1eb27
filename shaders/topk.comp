#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
#include "types.glsl"

// TopK (ops/topk.rs) by ranking: one invocation per input element counts the elements of its
// row that come before it (better, or equal with a lower index; NaN above every number), and
// writes itself to output position `rank` when rank < k. O(len) per element, so the op offers
// this kernel only for short rows. Rows: `len` elements `inner` apart.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Idx { int64_t v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    Out y;
    Idx idx;
    uint n;
    uint len;
    uint inner;
    uint k;
    uint largest;
} p;

bool nan_of(T v) {
#ifdef IS_FLOAT
    return isnan(float(v));
#else
    return false;
#endif
}

// True when a (at index ia) comes before b (at index ib) in the output order.
bool before(T a, uint ia, T b, uint ib) {
    bool an = nan_of(a);
    bool bn = nan_of(b);
    if (an || bn) {
        if (an && bn) return ia < ib;
        // NaN is the largest value.
        return p.largest != 0u ? an : bn;
    }
    if (a == b) return ia < ib;
    return p.largest != 0u ? a > b : a < b;
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint row_stride = p.len * p.inner;
    uint o = i / row_stride;
    uint rem = i % row_stride;
    uint j = rem / p.inner;
    uint in_ = rem % p.inner;
    uint base = o * row_stride + in_;
    T v = p.x.v[i];
    uint rank = 0u;
    for (uint q = 0u; q < p.len && rank < p.k; ++q) {
        if (q != j && before(p.x.v[base + q * p.inner], q, v, j)) rank++;
    }
    if (rank < p.k) {
        uint at = (o * p.k + rank) * p.inner + in_;
        p.y.v[at] = v;
        p.idx.v[at] = int64_t(j);
    }
}
