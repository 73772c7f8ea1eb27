// matmul_nbits.glsl: what matmul_nbits_gemv.comp and matmul_nbits_gemm.comp share: the
// buffers and push constants of com.microsoft MatMulNBits (ops/matmul_nbits/), and reading
// its packed weights. Include after types.glsl (T is A's type: f32 or f16).
//
// Y[m, n] = bias[n] + sum_k A[m, k] * (q(n, k) - zp(n, k / blockSize)) * scale(n, k / blockSize)
// A is M x K and Y M x N, both row-major. Row n of B is rowWords 32-bit words holding K
// (padded to kBlocks * blockSize) values of `bits` bits, value k at bit (k * bits) % 32 of word
// k / (32 / bits); every word lies inside one block, since a block is at least 16 values and
// a word holds at most 16. scales (and float zero points) are [N, kBlocks] in T; packed
// zero points are uint8, zpRowBytes per row, block b's at bit b * bits of the row.
// flags: bits 0-1 the zero points (0: 2^(bits - 1), 1: packed uint8 zpq, 2: float zpf),
// bit 2 a bias, bits 3-8 (matmul_nbits_gemv4.comp) invocations per column. Absent buffers are stood in for by present ones that flags keep unread.

#extension GL_EXT_shader_8bit_storage : require

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Bytes { uint8_t v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
// A shader may read A and B through other views of the same addresses (the 16-byte loads of
// matmul_nbits_gemv4.comp): it defines NBITS_A / NBITS_B as its types before the include.
#ifndef NBITS_A
#define NBITS_A In
#endif
#ifndef NBITS_B
#define NBITS_B Words
#endif
layout(push_constant, scalar) uniform P {
    NBITS_A a;
    NBITS_B b;
    In scales;
    Bytes zpq;
    In zpf;
    In bias;
    Out y;
    uint M;
    uint N;
    uint K;
    uint kBlocks;
    uint rowWords;
    uint bits;
    uint blockSize;
    uint zpRowBytes;
    uint flags;
} p;

float zero_point(uint n, uint blk) {
    uint mode = p.flags & 3u;
    if (mode == 1u) {
        uint bit = blk * p.bits;
        uint byte_ = uint(p.zpq.v[n * p.zpRowBytes + bit / 8u]);
        return float((byte_ >> (bit % 8u)) & ((1u << p.bits) - 1u));
    }
    if (mode == 2u) {
        return float(p.zpf.v[n * p.kBlocks + blk]);
    }
    return float(1u << (p.bits - 1u));
}

float block_scale(uint n, uint blk) {
    return float(p.scales.v[n * p.kBlocks + blk]);
}

float bias_of(uint n) {
    return (p.flags & 4u) != 0u ? float(p.bias.v[n]) : 0.0;
}
