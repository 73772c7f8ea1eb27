#version 460
// Conv as an implicit GEMM, per group g: Y[m][oc] = sum_k A[m][k] * W[oc][k], where m runs
// over (batch, output pixel), oc over the group's output channels and k over (input channel
// of the group, kernel tap). A is never materialised: each tile of it is gathered from X
// (zero where the window reads padding) into shared memory. 1-D and 2-D convolutions arrive
// as 3-D ones with leading size-1 axes.
//
// One workgroup computes a 64 x 64 tile of Y; each of its 256 threads a 4 x 4 block.
// K is streamed in slices of 16 through 8 KiB of shared memory; the next slice is loaded
// into registers while the current one is multiplied.
//
// SPLIT_K variants: when there are too few tiles to fill the GPU (late layers of a CNN: few
// pixels, long K), each tile's K range is cut into P_SPLITS slices of P_KSLICE (a multiple of
// BK) and one workgroup computes one (slice, tile): it writes its partial sums, in float, to
// y viewed as SPLITS x (N x OC x OD x OH x OW); shaders/conv_splitk_reduce.comp then adds the
// slices and the bias in a fixed order, so results do not depend on scheduling.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant f32_splitk DT_F32 SPLIT_K
// @variant f16_splitk DT_F16 SPLIT_K
#include "types.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
#ifdef SPLIT_K
layout(buffer_reference, scalar) writeonly buffer FOut { float v[]; };
#else
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };
#endif
layout(buffer_reference, scalar) readonly buffer UIn { uint v[]; };

// x: N x C x ID x IH x IW; w: OC x CG x KD x KH x KW; b: OC; y: N x OC x OD x OH x OW;
// t: the parameter table written by node/src/ops/conv/gpu.rs. With SPLIT_K, b is unused and
// y is the float scratch of partial sums.
layout(push_constant, scalar) uniform P { FIn x; FIn w; FIn b; FOut y; UIn t; } p;

const uint P_N = 0, P_C = 1, P_ID = 2, P_IH = 3, P_IW = 4, P_OC = 5, P_OD = 6, P_OH = 7,
           P_OW = 8, P_KD = 9, P_KH = 10, P_KW = 11, P_SD = 12, P_SH = 13, P_SW = 14,
           P_DD = 15, P_DH = 16, P_DW = 17, P_PD = 18, P_PH = 19, P_PW = 20, P_G = 21,
           P_CG = 22, P_OCG = 23, P_TILES_M = 24, P_TILES_N = 25, P_SPLITS = 26,
           P_KSLICE = 27;

const uint BM = 64, BN = 64, BK = 16;

shared float As[BK][BM];
shared float Bs[BK][BN];

uint ID, IH, IW, KH, KW, DD, DH, DW, K, KVOL, KHW, IN_PLANE, OCG;

// Element k of this thread's row of A: the input value under tap k of pixel m's window.
float load_a(bool m_ok, uint xbase, int d0, int h0, int w0, uint k) {
    if (!m_ok || k >= K) return 0.0;
    uint c = k / KVOL;
    uint tap = k - c * KVOL;
    uint kd = tap / KHW;
    uint r = tap - kd * KHW;
    uint kh = r / KW;
    uint kw = r - kh * KW;
    int id = d0 + int(kd * DD);
    int ih = h0 + int(kh * DH);
    int iw = w0 + int(kw * DW);
    // Negative coordinates wrap to huge unsigned values, so one compare per axis suffices.
    if (uint(id) >= ID || uint(ih) >= IH || uint(iw) >= IW) return 0.0;
    return float(p.x.v[xbase + c * IN_PLANE + (uint(id) * IH + uint(ih)) * IW + uint(iw)]);
}

float load_b(uint g, uint ocl, uint k) {
    if (ocl >= OCG || k >= K) return 0.0;
    return float(p.w.v[(g * OCG + ocl) * K + k]);
}

void main() {
    uint N = p.t.v[P_N], C = p.t.v[P_C], OC = p.t.v[P_OC];
    ID = p.t.v[P_ID]; IH = p.t.v[P_IH]; IW = p.t.v[P_IW];
    uint OD = p.t.v[P_OD], OH = p.t.v[P_OH], OW = p.t.v[P_OW];
    uint KD = p.t.v[P_KD];
    KH = p.t.v[P_KH]; KW = p.t.v[P_KW];
    uint SD = p.t.v[P_SD], SH = p.t.v[P_SH], SW = p.t.v[P_SW];
    DD = p.t.v[P_DD]; DH = p.t.v[P_DH]; DW = p.t.v[P_DW];
    uint PD = p.t.v[P_PD], PH = p.t.v[P_PH], PW = p.t.v[P_PW];
    uint G = p.t.v[P_G], CG = p.t.v[P_CG];
    OCG = p.t.v[P_OCG];
    uint TILES_M = p.t.v[P_TILES_M], TILES_N = p.t.v[P_TILES_N];

    KHW = KH * KW;
    KVOL = KD * KHW;
    K = CG * KVOL;
    IN_PLANE = ID * IH * IW;
    uint OHW = OH * OW;
    uint PLANE = OD * OHW;
    uint M = N * PLANE;

    // Tiles in the order (group, channel tile, pixel tile), pixel tiles fastest, so that
    // neighbouring workgroups share a slice of W.
    uint tile = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint tiles_mn = TILES_M * TILES_N;
    uint k_begin = 0, k_end = K;
#ifdef SPLIT_K
    // Slices outermost: the workgroups of one slice share its part of W.
    uint slice = tile / (tiles_mn * G);
    if (slice >= p.t.v[P_SPLITS]) return;
    tile -= slice * tiles_mn * G;
    uint KSLICE = p.t.v[P_KSLICE];
    k_begin = slice * KSLICE;
    k_end = min(K, k_begin + KSLICE);
#else
    if (tile >= tiles_mn * G) return;
#endif
    uint g = tile / tiles_mn;
    uint rest = tile - g * tiles_mn;
    uint tn = rest / TILES_M;
    uint tm = rest - tn * TILES_M;

    uint lid = gl_LocalInvocationID.x;

    // A loads: this thread owns pixel a_m of the tile and k rows a_k, a_k + 4, ...
    uint a_m = lid & 63u;
    uint a_k = lid >> 6;
    uint m = tm * BM + a_m;
    bool m_ok = m < M;
    int d0 = 0, h0 = 0, w0 = 0;
    uint xbase = 0;
    if (m_ok) {
        uint n = m / PLANE;
        uint sp = m - n * PLANE;
        uint od = sp / OHW;
        uint r = sp - od * OHW;
        uint oh = r / OW;
        uint ow = r - oh * OW;
        d0 = int(od * SD) - int(PD);
        h0 = int(oh * SH) - int(PH);
        w0 = int(ow * SW) - int(PW);
        xbase = (n * C + g * CG) * IN_PLANE;
    }
    // B loads: k row b_k, output channels b_n, b_n + 16, ... (16 neighbours read 16
    // consecutive floats of one W row).
    uint b_k = lid & 15u;
    uint b_n = lid >> 4;
    uint ocl0 = tn * BN;

    float ra[4];
    float rb[4];
    for (uint j = 0; j < 4; j++) {
        ra[j] = load_a(m_ok, xbase, d0, h0, w0, k_begin + a_k + 4 * j);
        rb[j] = load_b(g, ocl0 + b_n + 16 * j, k_begin + b_k);
    }

    uint tx = lid & 15u;
    uint ty = lid >> 4;
    float acc[4][4];
    for (uint i = 0; i < 4; i++)
        for (uint j = 0; j < 4; j++) acc[i][j] = 0.0;

    // Slices start at multiples of BK, so only the last one reads past its end, where the
    // loads' k >= K checks give zeros.
    for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
        for (uint j = 0; j < 4; j++) {
            As[a_k + 4 * j][a_m] = ra[j];
            Bs[b_k][b_n + 16 * j] = rb[j];
        }
        barrier();
        uint kn = k0 + BK;
        if (kn < k_end) {
            for (uint j = 0; j < 4; j++) {
                ra[j] = load_a(m_ok, xbase, d0, h0, w0, kn + a_k + 4 * j);
                rb[j] = load_b(g, ocl0 + b_n + 16 * j, kn + b_k);
            }
        }
        for (uint kk = 0; kk < BK; kk++) {
            float a[4];
            float bb[4];
            for (uint i = 0; i < 4; i++) a[i] = As[kk][tx + 16 * i];
            for (uint j = 0; j < 4; j++) bb[j] = Bs[kk][ty + 16 * j];
            for (uint i = 0; i < 4; i++)
                for (uint j = 0; j < 4; j++) acc[i][j] = fma(a[i], bb[j], acc[i][j]);
        }
        barrier();
    }

#ifdef SPLIT_K
    uint y0 = slice * N * OC * PLANE;
#endif
    for (uint i = 0; i < 4; i++) {
        uint mo = tm * BM + tx + 16 * i;
        if (mo >= M) continue;
        uint n = mo / PLANE;
        uint sp = mo - n * PLANE;
        for (uint j = 0; j < 4; j++) {
            uint ocl = ocl0 + ty + 16 * j;
            if (ocl >= OCG) continue;
            uint oc = g * OCG + ocl;
#ifdef SPLIT_K
            p.y.v[y0 + (n * OC + oc) * PLANE + sp] = acc[i][j];
#else
            p.y.v[(n * OC + oc) * PLANE + sp] = T(acc[i][j] + float(p.b.v[oc]));
#endif
        }
    }
}
