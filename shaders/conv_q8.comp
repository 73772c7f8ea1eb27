#version 460
// Integer convolution (ops/qlinear/conv_gpu.rs): ConvInteger's int32 product, or
// QLinearConv's product requantized to 8 bits. Per group g, as conv_gemm.comp's implicit
// GEMM: Y[m][oc] = sum_k (X[m][k] - zx) * (W[oc][k] - zw[oc]) over K = CG x kernel taps, with
// a window tap on padding reading zx (so it adds nothing). The bytes are multiplied as they
// are, four at a time (dotPacked4x8EXT on devices with VK_KHR_shader_integer_dot_product:
// one instruction for four products), accumulated in int32, and the zero points applied
// after the loop:
//   sum (x - zx)(w - zw) = sum x w - zw sum x - zx sum w + K zx zw,
// where the row sums of X (needed when zw is not zero) and the column sums of W (when zx is
// not zero) come from the same packed words. int32 wraps on overflow, as ONNX Runtime's does.
// Requantizing (table flag 1): y = clamp(round_half_even((acc + bias) * M) + zy), M = fl(fl(
// sa * sb[oc]) / sy) as QLinearConv's CPU kernel rounds it (q8.glsl).
//
// MatMul layout (table flag 32: MatMulInteger, QLinearMatMul): A is M x K and B K x N, row
// major, as a 1x1 convolution of one image whose M pixels are A's rows (its table: N = 1, C = K,
// OW = M, OC = N); Y is M x N.
//
// Split-K (table words 26, 27: slices, K per slice, a multiple of 32): when there are too few
// tiles to fill the GPU, one workgroup computes one (slice, tile) and writes its int32 partial
// sums (zero-point terms of its slice included; slice 0 adds the bias and K zx zw) to y viewed
// as SPLITS x (N x OC x OD x OH x OW); conv_q8_reduce.comp adds them and requantizes.
//
// One workgroup computes a 64 x 64 tile of Y, each of its 256 threads a 4 x 4 block; K is
// streamed in slices of 32 (8 packed words per pixel and channel) through 4 KiB of shared
// memory, the next slice loaded into registers while the current one is multiplied.
// Variants: X and W each unsigned or signed (XS, WS); DOT: the dot-product instructions
// (else the same arithmetic unpacked, for devices without them).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_GOOGLE_include_directive : require
// @variant uu
// @variant us WS
// @variant su XS
// @variant ss XS WS
// @variant uu_dot DOT
// @variant us_dot WS DOT
// @variant su_dot XS DOT
// @variant ss_dot XS WS DOT
#ifdef DOT
#extension GL_EXT_integer_dot_product : require
#endif
#include "q8.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Ints { int v[]; };
layout(buffer_reference, scalar) readonly buffer Floats { float v[]; };
layout(buffer_reference, scalar) writeonly buffer OutBytes { uint8_t v[]; };
layout(buffer_reference, scalar) writeonly buffer OutInts { int v[]; };

// x: N x C x ID x IH x IW; w: OC x CG x KD x KH x KW; b: OC int32 (zeros when absent);
// xz, wz, yz: zero points (wz one or OC); sa, sb, sy: scales (sb one or OC); y: the output,
// int32 or 8-bit; t: conv_gemm.comp's table, then the flags.
layout(push_constant, scalar) uniform P {
    Bytes x;
    Bytes w;
    Ints b;
    Bytes xz;
    Bytes wz;
    Bytes yz;
    Floats sa;
    Floats sb;
    Floats sy;
    Words y;
    Words t;
} p;

const uint P_N = 0, P_C = 1, P_ID = 2, P_IH = 3, P_IW = 4, P_OC = 5, P_OD = 6, P_OH = 7,
           P_OW = 8, P_KD = 9, P_KH = 10, P_KW = 11, P_SD = 12, P_SH = 13, P_SW = 14,
           P_DD = 15, P_DH = 16, P_DW = 17, P_PD = 18, P_PH = 19, P_PW = 20, P_G = 21,
           P_CG = 22, P_OCG = 23, P_TILES_M = 24, P_TILES_N = 25, P_SPLITS = 26,
           P_KSLICE = 27, P_FLAGS = 28;
// Flags: requantize to 8 bits (else int32 out), y signed, wz per channel, sb per channel, K
// walked tap-major, MatMul layout, B of the MatMul layout stored N x K (Gemm's transB).
const uint F_REQUANT = 1u, F_Y_SIGNED = 2u, F_WZ_PER = 4u, F_SB_PER = 8u, F_TAP_MAJOR = 16u,
           F_MATMUL = 32u, F_B_NK = 64u;

const uint BM = 64, BN = 64, BQ = 8;

shared uint As[BQ][BM];
shared uint Bs[BQ][BN];

uint ID, IH, IW, KH, KW, DD, DH, DW, K, KVOL, KHW, IN_PLANE, OCG, CG;
uint ZX_BYTE;
// K in the order (tap, channel) rather than W's (channel, tap): with CG a multiple of 4, the
// four bytes of a packed word are four channels under one tap, so a word of A costs one
// window decomposition and one padding check instead of four.
bool TAP_MAJOR;
bool MATMUL;
// B's rows are its output columns, as W's are its output channels: the convolution's read.
bool B_NK;

#ifdef XS
#define XT int
int sext_x(uint v) { return int(v) - (v >= 128u ? 256 : 0); }
#else
#define XT uint
int sext_x(uint v) { return int(v); }
#endif
#ifdef WS
#define WT int
int sext_w(uint v) { return int(v) - (v >= 128u ? 256 : 0); }
#else
#define WT uint
int sext_w(uint v) { return int(v); }
#endif

// Four products of packed bytes, summed.
int dot4(uint a, uint b) {
#ifdef DOT
    return int(dotPacked4x8EXT(XT(a), WT(b)));
#else
    int s = 0;
    for (uint i = 0u; i < 32u; i += 8u) s += sext_x((a >> i) & 255u) * sext_w((b >> i) & 255u);
    return s;
#endif
}

int sum_x(uint a) {
#ifdef DOT
    return int(dotPacked4x8EXT(XT(a), 0x01010101u));
#else
    int s = 0;
    for (uint i = 0u; i < 32u; i += 8u) s += sext_x((a >> i) & 255u);
    return s;
#endif
}

int sum_w(uint b) {
#ifdef DOT
    return int(dotPacked4x8EXT(0x01010101u, WT(b)));
#else
    int s = 0;
    for (uint i = 0u; i < 32u; i += 8u) s += sext_w((b >> i) & 255u);
    return s;
#endif
}

// Byte k of this thread's row of A: the input under tap k of pixel m's window, the zero
// point on padding, 0 past K.
uint load_a(bool m_ok, uint xbase, int d0, int h0, int w0, uint k) {
    if (!m_ok || k >= K) return 0u;
    uint c = k / KVOL;
    uint tap = k - c * KVOL;
    uint kd = tap / KHW;
    uint r = tap - kd * KHW;
    uint kh = r / KW;
    uint kw = r - kh * KW;
    int id = d0 + int(kd * DD);
    int ih = h0 + int(kh * DH);
    int iw = w0 + int(kw * DW);
    if (uint(id) >= ID || uint(ih) >= IH || uint(iw) >= IW) return ZX_BYTE;
    return uint(p.x.v[xbase + c * IN_PLANE + (uint(id) * IH + uint(ih)) * IW + uint(iw)]);
}

uint load_a4(bool m_ok, uint xbase, int d0, int h0, int w0, uint k) {
    if (MATMUL) {
        // xbase is the row's start; k is a multiple of 4.
        if (!m_ok || k >= K) return 0u;
        if ((K & 3u) == 0u) return Words(p.x).v[(xbase + k) >> 2];
        uint v = 0u;
        for (uint i = 0u; i < 4u; ++i) {
            if (k + i < K) v |= uint(p.x.v[xbase + k + i]) << (8u * i);
        }
        return v;
    }
    if (TAP_MAJOR) {
        if (!m_ok || k >= K) return 0u;
        uint tap = k / CG;
        uint c = k - tap * CG;
        uint kd = tap / KHW;
        uint r = tap - kd * KHW;
        uint kh = r / KW;
        uint kw = r - kh * KW;
        int id = d0 + int(kd * DD);
        int ih = h0 + int(kh * DH);
        int iw = w0 + int(kw * DW);
        if (uint(id) >= ID || uint(ih) >= IH || uint(iw) >= IW) return ZX_BYTE * 0x01010101u;
        uint at = xbase + c * IN_PLANE + (uint(id) * IH + uint(ih)) * IW + uint(iw);
        return uint(p.x.v[at]) | uint(p.x.v[at + IN_PLANE]) << 8
            | uint(p.x.v[at + 2u * IN_PLANE]) << 16 | uint(p.x.v[at + 3u * IN_PLANE]) << 24;
    }
    return load_a(m_ok, xbase, d0, h0, w0, k) | load_a(m_ok, xbase, d0, h0, w0, k + 1u) << 8
        | load_a(m_ok, xbase, d0, h0, w0, k + 2u) << 16
        | load_a(m_ok, xbase, d0, h0, w0, k + 3u) << 24;
}

// Bytes k..k+3 of W's row for channel ocl of group g, zeros past K.
uint load_b4(uint g, uint ocl, uint k) {
    if (ocl >= OCG || k >= K) return 0u;
    if (MATMUL && !B_NK) {
        uint v = 0u;
        for (uint i = 0u; i < 4u; ++i) {
            if (k + i < K) v |= uint(p.w.v[(k + i) * OCG + ocl]) << (8u * i);
        }
        return v;
    }
    // With one tap the two orders are one: W's rows are read as words below.
    if (TAP_MAJOR && KVOL > 1u) {
        uint tap = k / CG;
        uint at = (g * OCG + ocl) * K + (k - tap * CG) * KVOL + tap;
        return uint(p.w.v[at]) | uint(p.w.v[at + KVOL]) << 8 | uint(p.w.v[at + 2u * KVOL]) << 16
            | uint(p.w.v[at + 3u * KVOL]) << 24;
    }
    uint at = (g * OCG + ocl) * K + k;
    if ((K & 3u) == 0u) return Words(p.w).v[at >> 2];
    uint v = 0u;
    for (uint i = 0u; i < 4u; ++i) {
        if (k + i < K) v |= uint(p.w.v[at + i]) << (8u * i);
    }
    return v;
}

void main() {
    uint N = p.t.v[P_N], C = p.t.v[P_C], OC = p.t.v[P_OC];
    ID = p.t.v[P_ID]; IH = p.t.v[P_IH]; IW = p.t.v[P_IW];
    uint OD = p.t.v[P_OD], OH = p.t.v[P_OH], OW = p.t.v[P_OW];
    KH = p.t.v[P_KH]; KW = p.t.v[P_KW];
    uint SD = p.t.v[P_SD], SH = p.t.v[P_SH], SW = p.t.v[P_SW];
    DD = p.t.v[P_DD]; DH = p.t.v[P_DH]; DW = p.t.v[P_DW];
    uint PD = p.t.v[P_PD], PH = p.t.v[P_PH], PW = p.t.v[P_PW];
    uint G = p.t.v[P_G];
    CG = p.t.v[P_CG];
    OCG = p.t.v[P_OCG];
    uint TILES_M = p.t.v[P_TILES_M], TILES_N = p.t.v[P_TILES_N];
    uint flags = p.t.v[P_FLAGS];
    TAP_MAJOR = (flags & F_TAP_MAJOR) != 0u;
    MATMUL = (flags & F_MATMUL) != 0u;
    B_NK = (flags & F_B_NK) != 0u;

    KHW = KH * KW;
    KVOL = p.t.v[P_KD] * KHW;
    K = CG * KVOL;
    IN_PLANE = ID * IH * IW;
    uint OHW = OH * OW;
    uint PLANE = OD * OHW;
    uint M = N * PLANE;
    ZX_BYTE = uint(p.xz.v[0]);
    int zx = sext_x(ZX_BYTE);

    uint tile = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint tiles_mn = TILES_M * TILES_N;
    uint SPLITS = p.t.v[P_SPLITS];
    // Slices outermost: the workgroups of one slice share its part of W.
    uint slice = tile / (tiles_mn * G);
    if (slice >= SPLITS) return;
    tile -= slice * tiles_mn * G;
    uint k_begin = slice * p.t.v[P_KSLICE];
    uint k_end = min(K, k_begin + p.t.v[P_KSLICE]);
    uint g = tile / tiles_mn;
    uint rest = tile - g * tiles_mn;
    uint tn = rest / TILES_M;
    uint tm = rest - tn * TILES_M;
    uint lid = gl_LocalInvocationID.x;

    // A loads: pixel a_m of the tile, packed words a_q and a_q + 4 of the slice.
    uint a_m = lid & 63u;
    uint a_q = lid >> 6;
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
        xbase = MATMUL ? m * K : (n * C + g * CG) * IN_PLANE;
    }
    // B loads: word b_q of the slice for channels b_n and b_n + 32 (eight neighbours read
    // one channel's 32 consecutive bytes).
    uint b_q = lid & 7u;
    uint b_n = lid >> 3;
    uint ocl0 = tn * BN;

    uint ra[2];
    uint rb[2];
    for (uint j = 0; j < 2u; j++) {
        ra[j] = load_a4(m_ok, xbase, d0, h0, w0, k_begin + 4u * (a_q + 4u * j));
        rb[j] = load_b4(g, ocl0 + b_n + 32u * j, k_begin + 4u * b_q);
    }

    uint tx = lid & 15u;
    uint ty = lid >> 4;
    // The zero points of this thread's four channels decide which sums it needs.
    int zw[4];
    bool need_sx = false;
    for (uint j = 0; j < 4u; j++) {
        uint oc = g * OCG + min(ocl0 + ty + 16u * j, OCG - 1u);
        zw[j] = sext_w(uint(p.wz.v[(flags & F_WZ_PER) != 0u ? oc : 0u]));
        need_sx = need_sx || zw[j] != 0;
    }
    bool need_sw = zx != 0;
    int acc[4][4];
    int sx[4];
    int sw[4];
    for (uint i = 0; i < 4u; i++) {
        sx[i] = 0;
        sw[i] = 0;
        for (uint j = 0; j < 4u; j++) acc[i][j] = 0;
    }

    // Slices start at multiples of 32, so only the last one reads past its end, where the
    // loads' k >= K checks give zeros.
    for (uint k0 = k_begin; k0 < k_end; k0 += 4u * BQ) {
        for (uint j = 0; j < 2u; j++) {
            As[a_q + 4u * j][a_m] = ra[j];
            Bs[b_q][b_n + 32u * j] = rb[j];
        }
        barrier();
        uint kn = k0 + 4u * BQ;
        if (kn < k_end) {
            for (uint j = 0; j < 2u; j++) {
                ra[j] = load_a4(m_ok, xbase, d0, h0, w0, kn + 4u * (a_q + 4u * j));
                rb[j] = load_b4(g, ocl0 + b_n + 32u * j, kn + 4u * b_q);
            }
        }
        for (uint q = 0u; q < BQ; q++) {
            uint a[4];
            uint bb[4];
            for (uint i = 0; i < 4u; i++) a[i] = As[q][tx + 16u * i];
            for (uint j = 0; j < 4u; j++) bb[j] = Bs[q][ty + 16u * j];
            for (uint i = 0; i < 4u; i++)
                for (uint j = 0; j < 4u; j++) acc[i][j] += dot4(a[i], bb[j]);
            if (need_sx) for (uint i = 0; i < 4u; i++) sx[i] += sum_x(a[i]);
            if (need_sw) for (uint j = 0; j < 4u; j++) sw[j] += sum_w(bb[j]);
        }
        barrier();
    }

    bool split = SPLITS > 1u;
    bool requant = !split && (flags & F_REQUANT) != 0u;
    bool y_signed = (flags & F_Y_SIGNED) != 0u;
    int zy = requant ? q8_zero(uint(p.yz.v[0]), y_signed) : 0;
    uint y0 = split ? slice * N * OC * PLANE : 0u;
    for (uint j = 0; j < 4u; j++) {
        uint ocl = ocl0 + ty + 16u * j;
        if (ocl >= OCG) continue;
        uint oc = g * OCG + ocl;
        float mult = requant
            ? q8_multiplier(p.sa.v[0], p.sb.v[(flags & F_SB_PER) != 0u ? oc : 0u], p.sy.v[0])
            : 0.0;
        int bias = slice == 0u ? p.b.v[oc] + int(K) * zx * zw[j] : 0;
        for (uint i = 0; i < 4u; i++) {
            uint mo = tm * BM + tx + 16u * i;
            if (mo >= M) continue;
            uint n = mo / PLANE;
            uint sp = mo - n * PLANE;
            int v = acc[i][j] - zw[j] * sx[i] - zx * sw[j] + bias;
            uint at = y0 + (MATMUL ? mo * OC + oc : (n * OC + oc) * PLANE + sp);
            if (requant) {
                OutBytes(p.y).v[at] = q8_requant(v, mult, zy, y_signed);
            } else {
                OutInts(p.y).v[at] = v;
            }
        }
    }
}
