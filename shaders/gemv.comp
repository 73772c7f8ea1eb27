#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant wide_f32 DT_F32 WIDE
// @variant wide_f16 DT_F16 WIDE
// @variant row_f32 DT_F32 ROW
// @variant row_f16 DT_F16 ROW
#include "types.glsl"

// MatMul for a few rows of A (decode: one token, a few beams) against a B whose rows are
// contiguous, ops/matmul/gemv.rs: Y[M, N] = A[M, K] x B[K, N]. Memory-bound on B, which is
// read once, 16 bytes (one uvec4: 8 halves or 4 floats, a "vector") per load. A workgroup
// owns `lanes` adjacent vectors of columns and all of K: invocation t takes vector t % lanes
// and rows k = t / lanes, t / lanes + THREADS / lanes, ... (a "strand"), so that consecutive
// invocations read consecutive 16 bytes of one row of B and the loads of a warp cover whole
// rows' segments. UNROLL loads are issued before their arithmetic: a product is a few rounds
// of memory latency, and the loads in flight per round set how many rounds there are. The
// strands' partial sums of one vector are added across the subgroup by shuffles, then across
// subgroups in shared memory. The wide variant (one row of A) has four times the invocations
// per workgroup, so that one workgroup per multiprocessor keeps four times the loads in
// flight; it keeps one row's sums, not ROWS', within the register budget of 1,024 invocations.
// The row variant (one row of A, 256 invocations) keeps one row's sums too, in few enough
// registers that several of its workgroups share a multiprocessor: while one adds its sums up
// across strands, the others' loads keep the memory busy.
// Vector groups fold into y past 65,535 workgroups; rows of Y past ROWS go to workgroup z (B
// is read once per ROWS rows).
//
// K may be split (`splits` > 1): workgroup z = row group * splits + split reads only rows
// [split * slice, (split + 1) * slice) of B, so that a product with few columns still makes
// enough workgroups to fill the GPU while each reads whole 256- or 512-byte segments of B's
// rows (more lanes). Each writes its partial sums to `part`; the last workgroup of a vector
// group to finish (a counter per group tells, reset by that workgroup for the next run) adds
// the splits' partials in split order, so the result does not depend on which finished last.
//
// With flag 1 (NormMatMul, ops/matmul/norm.rs) A is an RMS norm's input rather than its
// output: each workgroup first finds inv_r = 1 / sqrt(mean_k(v[r][k]^2) + eps) of its rows,
// v = A (+ skip, flag 2, laid out as A), and then reads A[r][k] as v[r][k] * inv_r * gamma[k]
// (in float, not rounded to T as the separate norm's output would be); with flag 4 the first
// workgroup also writes v, the residual sum a SkipSimplifiedLayerNormalization passes on, so
// that the norm needs no dispatch of its own at all. A row of A is a few KB,
// read again by every workgroup from the cache, and the norm no longer waits for its own
// dispatch and barrier before the product.
//
// The invocation index is made from the subgroup's (gl_SubgroupID * gl_SubgroupSize +
// gl_SubgroupInvocationID) so that the shuffles' partners are known; THREADS is a multiple of
// every power-of-two subgroup size, so every subgroup is full and the index covers 0..THREADS.
#if defined(WIDE)
layout(local_size_x = 1024) in;
const uint THREADS = 1024u;
const uint ROWS = 1u;
#elif defined(ROW)
layout(local_size_x = 256) in;
const uint THREADS = 256u;
const uint ROWS = 1u;
#else
layout(local_size_x = 256) in;
const uint THREADS = 256u;
const uint ROWS = 4u;
#endif
const uint UNROLL = 8u;
// Sums leave the registers CHUNK values of a vector at a time, which bounds shared memory.
const uint CHUNK = 4u;
#if defined(DT_F16)
const uint VEC = 8u;
#else
const uint VEC = 4u;
#endif

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer Vecs { uvec4 v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
// Coherent: the last workgroup of a vector group reads the others' partial sums.
layout(buffer_reference, scalar) coherent buffer Part { float v[]; };
layout(buffer_reference, scalar) coherent buffer Counts { uint v[]; };

layout(push_constant, scalar) uniform P {
    In a;
    Vecs b;
    Out y;
    In skip;
    In gamma;
    Out sum;
    Part part;
    Counts count;
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
    // Column vectors per workgroup: a power of two up to 32.
    uint lanes;
    float eps;
    // 1: A's rows are normalised first; 2: with skip added; 4: the first workgroup of each
    // row group writes v (A + skip) to `sum`, laid out as A; 8: A is read as
    // silu(A) * skip (SwiGluMatMul, `skip` then holding the up projection); 16 (the wide
    // variant): A's row made into shared memory once, before the loads of B.
    uint flags;
    // K's splits, and rows of B per split.
    uint splits;
    uint slice;
} p;

shared float red[THREADS * CHUNK];
shared bool last;
#if defined(WIDE)
// Flag 16 (K at most THREADS * CHUNK): A's row as the product reads it (normalised,
// activated), made once per workgroup into `red`, which the sums use only after the loads,
// so that a round of loads of B waits on no loads of A, gamma or skip.
#define staged red
#endif

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

// 1 / sqrt(mean square + eps) of A's rows m0.. (with skip added), 1 without flag 1.
float inv[ROWS];

// v = A (+ skip) at A's element i.
float value(uint i) {
    float v = float(p.a.v[i]);
    if ((p.flags & 2u) != 0u) {
        v += float(p.skip.v[i]);
    }
    return v;
}

// A's element (m0 + r, k) as the product reads it.
float a_at(uint r, uint k, uint m0) {
    uint i = p.offA + (m0 + r) * p.rsA + k * p.csA;
    if ((p.flags & 8u) != 0u) {
        float g = float(p.a.v[i]);
        return g / (1.0 + exp(-g)) * float(p.skip.v[i]);
    }
    if ((p.flags & 1u) == 0u) {
        return float(p.a.v[i]);
    }
    return value(i) * inv[r] * float(p.gamma.v[k]);
}

// inv of the rows r < rows; `tid` is the invocation index (see main). Uniform control flow.
void norms(uint tid, uint m0, uint rows) {
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        inv[r] = 1.0;
        if ((p.flags & 1u) == 0u || r >= rows) {
            continue;
        }
        float sq = 0.0;
        for (uint k = tid; k < p.K; k += THREADS) {
            float v = value(p.offA + (m0 + r) * p.rsA + k * p.csA);
            sq += v * v;
        }
        sq = subgroupAdd(sq);
        if (subgroupElect()) {
            red[gl_SubgroupID] = sq;
        }
        barrier();
        float total = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; ++g) {
            total += red[g];
        }
        barrier();
        inv[r] = 1.0 / sqrt(total / float(p.K) + p.eps);
    }
}

// acc[r][j] += A[m0 + r][k] * B[k][vector's column j], for the rows r < rows.
void accumulate(uvec4 w, uint k, uint m0, uint rows, inout float acc[ROWS][VEC]) {
    float b[VEC];
    unpack(w, b);
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        if (r < rows) {
#if defined(WIDE)
            float a = (p.flags & 16u) != 0u ? staged[k] : a_at(r, k, m0);
#else
            float a = a_at(r, k, m0);
#endif
            [[unroll]] for (uint j = 0u; j < VEC; ++j) {
                acc[r][j] = fma(a, b[j], acc[r][j]);
            }
        }
    }
}

// Counts this workgroup's partials in; the last of the vector group's splits to arrive adds
// them up in split order into y. Uniform control flow.
void merge(uint tid, uint group, uint rg, uint m0, uint rows) {
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        uint groups = (p.N / VEC + p.lanes - 1u) / p.lanes;
        uint at = rg * groups + group;
        last = atomicAdd(p.count.v[at], 1u) == p.splits - 1u;
        if (last) {
            p.count.v[at] = 0u;
        }
    }
    barrier();
    if (!last) {
        return;
    }
    memoryBarrierBuffer();
    uint cols = p.lanes * VEC;
    for (uint i = tid; i < rows * cols; i += THREADS) {
        uint col = group * cols + i % cols;
        if (col >= p.N) {
            continue;
        }
        uint at = (m0 + i / cols) * p.splits * p.N + col;
        float s = 0.0;
        // Eight loads in flight, added in order.
        for (uint q = 0u; q < p.splits; q += 8u) {
            float x[8];
            [[unroll]] for (uint u = 0u; u < 8u; ++u) {
                x[u] = q + u < p.splits ? p.part.v[at + (q + u) * p.N] : 0.0;
            }
            [[unroll]] for (uint u = 0u; u < 8u; ++u) {
                s += x[u];
            }
        }
        p.y.v[(m0 + i / cols) * p.N + col] = T(s);
    }
}

void main() {
    uint tid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    uint lanes = p.lanes;
    uint lane = tid % lanes;
    uint strand = tid / lanes;
    uint step = THREADS / lanes;
    uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint vec = group * lanes + lane;
    uint vecs = p.N / VEC;
    // Uniform over the workgroup: one past the last vector group (y's fold) has nothing to do.
    if (group * lanes >= vecs) {
        return;
    }
    uint rg = gl_WorkGroupID.z / p.splits;
    uint sp = gl_WorkGroupID.z % p.splits;
    uint m0 = rg * ROWS;
    uint rows = min(ROWS, p.M - m0);
    uint k_end = min(p.K, (sp + 1u) * p.slice);
    norms(tid, m0, rows);
    if ((p.flags & 4u) != 0u && group == 0u && sp == 0u) {
        for (uint r = 0u; r < rows; ++r) {
            for (uint k = tid; k < p.K; k += THREADS) {
                uint i = p.offA + (m0 + r) * p.rsA + k * p.csA;
                p.sum.v[i] = T(value(i));
            }
        }
    }
#if defined(WIDE)
    if ((p.flags & 16u) != 0u) {
        for (uint k = tid; k < p.K; k += THREADS) {
            staged[k] = a_at(0u, k, m0);
        }
        barrier();
    }
#endif
    float acc[ROWS][VEC];
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        [[unroll]] for (uint j = 0u; j < VEC; ++j) {
            acc[r][j] = 0.0;
        }
    }
    if (vec < vecs) {
        uint col = p.offB + vec;
        uint k = sp * p.slice + strand;
        for (; k + (UNROLL - 1u) * step < k_end; k += UNROLL * step) {
            uvec4 w[UNROLL];
            [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
                w[u] = p.b.v[col + (k + u * step) * p.rsB];
            }
            [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
                accumulate(w[u], k + u * step, m0, rows, acc);
            }
        }
        // The rest, fewer than UNROLL rows a strand, still issued together.
        if (k < k_end) {
            uvec4 w[UNROLL];
            [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
                uint ku = k + u * step;
                w[u] = ku < k_end ? p.b.v[col + ku * p.rsB] : uvec4(0u);
            }
            [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
                if (k + u * step < k_end) {
                    accumulate(w[u], k + u * step, m0, rows, acc);
                }
            }
        }
    }
#if defined(WIDE)
    if ((p.flags & 16u) != 0u) {
        // Every strand is done reading A from `red` before the sums go into it.
        barrier();
    }
#endif
    // Within a subgroup the strands of one vector are `lanes` invocations apart: a butterfly
    // over those distances leaves each the subgroup's sum, and the first strand of each
    // subgroup (or every strand, where a subgroup is narrower than `lanes`) keeps it in a slot.
    uint width = gl_SubgroupSize;
    uint per = max(width / lanes, 1u);
    uint slots = step / per;
    bool keeper = strand % per == 0u;
    uint slot = strand / per;
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        if (r >= rows) {
            break;
        }
        [[unroll]] for (uint c = 0u; c < VEC; c += CHUNK) {
            float v[CHUNK];
            [[unroll]] for (uint i = 0u; i < CHUNK; ++i) {
                v[i] = acc[r][c + i];
            }
            for (uint o = lanes; o < width; o <<= 1u) {
                [[unroll]] for (uint i = 0u; i < CHUNK; ++i) {
                    v[i] += subgroupShuffleXor(v[i], o);
                }
            }
            if (keeper) {
                [[unroll]] for (uint i = 0u; i < CHUNK; ++i) {
                    red[(slot * lanes + lane) * CHUNK + i] = v[i];
                }
            }
            barrier();
            // Entry e of the first `s` slots adds its partner s slots on (up to CHUNK entries
            // an invocation, where subgroups narrower than `lanes` leave a slot per strand).
            uint row = lanes * CHUNK;
            for (uint s = slots / 2u; s > 0u; s >>= 1u) {
                for (uint e = tid; e < s * row; e += THREADS) {
                    red[e] += red[e + s * row];
                }
                barrier();
            }
            if (tid < row) {
                uint v = group * lanes + tid / CHUNK;
                if (v < vecs) {
                    uint col = v * VEC + c + tid % CHUNK;
                    if (p.splits == 1u) {
                        p.y.v[(m0 + r) * p.N + col] = T(red[tid]);
                    } else {
                        p.part.v[((m0 + r) * p.splits + sp) * p.N + col] = red[tid];
                    }
                }
            }
            barrier();
        }
    }
    if (p.splits > 1u) {
        merge(tid, group, rg, m0, rows);
    }
}
