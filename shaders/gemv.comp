#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// MatMul for a few rows of A (decode: one token, a few beams) against a B whose rows are
// contiguous, ops/matmul/gemv.rs: Y[M, N] = A[M, K] x B[K, N]. Memory-bound on B, which is
// read once, 16 bytes (one uvec4: 8 halves or 4 floats, a "vector") per load. A workgroup
// owns `lanes` adjacent vectors of columns and all of K: invocation t takes vector t % lanes
// and rows k = t / lanes, t / lanes + 256 / lanes, ..., so that consecutive invocations read
// consecutive 16 bytes of one row of B and the loads of a warp cover whole rows' segments.
// Four loads are issued before their arithmetic so that enough of them are in flight to keep
// the memory busy. The partial sums over the invocations of one column vector are then added
// in shared memory. Vector groups fold into y past 65,535 workgroups; rows of Y past ROWS go to
// workgroup z (B is read once per ROWS rows).
layout(local_size_x = 256) in;

const uint THREADS = 256u;
const uint ROWS = 4u;
#if defined(DT_F16)
const uint VEC = 8u;
#else
const uint VEC = 4u;
#endif

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer Vecs { uvec4 v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };

layout(push_constant, scalar) uniform P {
    In a;
    Vecs b;
    Out y;
    uint M;
    uint N;
    uint K;
    // A's element (m, k) at offA + m * rsA + k * csA.
    uint rsA;
    uint csA;
    uint offA;
    // B's row k starts at vector offB + k * rsB.
    uint rsB;
    uint offB;
    // Column vectors per workgroup: 1, 2, 4 or 8.
    uint lanes;
} p;

shared float red[THREADS * VEC];

void unpack(uvec4 w, out float b[VEC]) {
#if defined(DT_F16)
    vec2 h;
    h = unpackHalf2x16(w.x); b[0] = h.x; b[1] = h.y;
    h = unpackHalf2x16(w.y); b[2] = h.x; b[3] = h.y;
    h = unpackHalf2x16(w.z); b[4] = h.x; b[5] = h.y;
    h = unpackHalf2x16(w.w); b[6] = h.x; b[7] = h.y;
#else
    b[0] = uintBitsToFloat(w.x);
    b[1] = uintBitsToFloat(w.y);
    b[2] = uintBitsToFloat(w.z);
    b[3] = uintBitsToFloat(w.w);
#endif
}

// acc[r][j] += A[m0 + r][k] * B[k][vector's column j], for the rows r < rows.
void accumulate(uvec4 w, uint k, uint m0, uint rows, inout float acc[ROWS][VEC]) {
    float b[VEC];
    unpack(w, b);
    for (uint r = 0u; r < ROWS; ++r) {
        if (r < rows) {
            float a = float(p.a.v[p.offA + (m0 + r) * p.rsA + k * p.csA]);
            for (uint j = 0u; j < VEC; ++j) {
                acc[r][j] = fma(a, b[j], acc[r][j]);
            }
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % p.lanes;
    uint kt = tid / p.lanes;
    uint step = THREADS / p.lanes;
    uint vec = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * p.lanes + lane;
    uint vecs = p.N / VEC;
    uint m0 = gl_WorkGroupID.z * ROWS;
    uint rows = min(ROWS, p.M - m0);
    float acc[ROWS][VEC];
    for (uint r = 0u; r < ROWS; ++r) {
        for (uint j = 0u; j < VEC; ++j) {
            acc[r][j] = 0.0;
        }
    }
    if (vec < vecs) {
        uint col = p.offB + vec;
        uint k = kt;
        for (; k + 3u * step < p.K; k += 4u * step) {
            uvec4 w0 = p.b.v[col + k * p.rsB];
            uvec4 w1 = p.b.v[col + (k + step) * p.rsB];
            uvec4 w2 = p.b.v[col + (k + 2u * step) * p.rsB];
            uvec4 w3 = p.b.v[col + (k + 3u * step) * p.rsB];
            accumulate(w0, k, m0, rows, acc);
            accumulate(w1, k + step, m0, rows, acc);
            accumulate(w2, k + 2u * step, m0, rows, acc);
            accumulate(w3, k + 3u * step, m0, rows, acc);
        }
        for (; k < p.K; k += step) {
            accumulate(p.b.v[col + k * p.rsB], k, m0, rows, acc);
        }
    }
    // Invocation kt * lanes + lane holds a partial sum of vector `lane`; a tree over kt adds
    // them (its partner for stride s is s * lanes invocations on).
    for (uint r = 0u; r < rows; ++r) {
        for (uint j = 0u; j < VEC; ++j) {
            red[tid * VEC + j] = acc[r][j];
        }
        barrier();
        for (uint s = step / 2u; s > 0u; s >>= 1u) {
            if (kt < s) {
                uint o = (tid + s * p.lanes) * VEC;
                for (uint j = 0u; j < VEC; ++j) {
                    red[tid * VEC + j] += red[o + j];
                }
            }
            barrier();
        }
        if (kt == 0u && vec < vecs) {
            uint base = (m0 + r) * p.N + vec * VEC;
            for (uint j = 0u; j < VEC; ++j) {
                p.y.v[base + j] = T(red[tid * VEC + j]);
            }
        }
        barrier();
    }
}
