#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 IS_FLOAT
// @variant f16 DT_F16 IS_FLOAT
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant u32 DT_U32
// @variant u64 DT_U64
// @variant f32_row DT_F32 IS_FLOAT ROW
// @variant f16_row DT_F16 IS_FLOAT ROW
// @variant i32_row DT_I32 ROW
// @variant i64_row DT_I64 ROW
// @variant u32_row DT_U32 ROW
// @variant u64_row DT_U64 ROW
#include "types.glsl"

// TopK (ops/topk.rs) by ranking: one invocation per input element counts the elements of its
// row that come before it (better, or equal with a lower index; NaN above every number), and
// writes itself to output position `rank` when rank < k. O(len) per element, so only for
// short rows. With ROW (long rows, small k), a workgroup per row picks the k elements in
// order, each round taking the first element of the order that comes after the previous
// pick (so nothing needs marking): O(k * len / 256) per invocation.
// Rows: `len` elements `inner` apart; `n` is the element count, or with ROW the row count.
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

#ifdef ROW
const uint WG = 256;
shared T sv[WG];
shared uint si[WG];
shared bool sfound[WG];

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform over the workgroup, so every barrier is reached by all or none.
    if (row >= p.n) return;
    uint tid = gl_LocalInvocationID.x;
    uint base = (row / p.inner) * p.len * p.inner + row % p.inner;
    uint obase = (row / p.inner) * p.k * p.inner + row % p.inner;
    T prev = p.x.v[base];
    uint prev_i = 0u;
    for (uint r = 0u; r < p.k; ++r) {
        bool found = false;
        T best = prev;
        uint best_i = 0u;
        for (uint j = tid; j < p.len; j += WG) {
            T v = p.x.v[base + j * p.inner];
            if (r > 0u && !before(prev, prev_i, v, j)) continue;
            if (!found || before(v, j, best, best_i)) {
                best = v;
                best_i = j;
                found = true;
            }
        }
        sv[tid] = best;
        si[tid] = best_i;
        sfound[tid] = found;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1u) {
            if (tid < s && sfound[tid + s]
                && (!sfound[tid] || before(sv[tid + s], si[tid + s], sv[tid], si[tid]))) {
                sv[tid] = sv[tid + s];
                si[tid] = si[tid + s];
                sfound[tid] = true;
            }
            barrier();
        }
        prev = sv[0];
        prev_i = si[0];
        if (tid == 0u) {
            p.y.v[obase + r * p.inner] = prev;
            p.idx.v[obase + r * p.inner] = int64_t(prev_i);
        }
        barrier();
    }
}
#else
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
#endif
