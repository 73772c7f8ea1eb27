// The low-precision types' values (ops/lowp.rs): `fmt` is the type's code (lowp.rs,
// `gpu_code`): 0 e4m3fn, 1 e4m3fnuz, 2 e5m2, 3 e5m2fnuz, 4 e2m1, 5 e8m0, 6 int4, 7 uint4,
// 8 int2, 9 uint2; one byte an element, the narrow integers sign- or zero-extended. Decoding
// and encoding follow the CPU's rules bit for bit (shaders/tests, ops/cast.rs).

// (exponent bits, mantissa bits, bias) of the float formats 0-4.
ivec3 layout_of(uint fmt) {
    switch (fmt) {
    case 0u: return ivec3(4, 3, 7);
    case 1u: return ivec3(4, 3, 8);
    case 2u: return ivec3(5, 2, 15);
    case 3u: return ivec3(5, 2, 16);
    default: return ivec3(2, 1, 1);
    }
}

uint max_bits(uint fmt) {
    switch (fmt) {
    case 0u: return 0x7eu;
    case 2u: return 0x7bu;
    case 4u: return 0x7u;
    default: return 0x7fu;
    }
}

// What a NaN becomes; float4 has none and takes the zero of the other sign (ml_dtypes).
uint nan_bits(uint fmt, bool neg) {
    switch (fmt) {
    case 0u: return 0x7fu | (neg ? 0x80u : 0u);
    case 2u: return 0x7eu | (neg ? 0x80u : 0u);
    case 4u: return neg ? 0u : 8u;
    default: return 0x80u;
    }
}

bool is_nan(uint b, uint fmt) {
    switch (fmt) {
    case 0u: return (b & 0x7fu) == 0x7fu;
    case 2u: return (b & 0x7fu) > 0x7cu;
    case 1u:
    case 3u: return b == 0x80u;
    case 5u: return b == 0xffu;
    default: return false;
    }
}

float decode(uint b, uint fmt) {
    if (fmt >= 6u) {
        bool signed_ = fmt == 6u || fmt == 8u;
        return signed_ ? float(int(b << 24) >> 24) : float(b);
    }
    if (is_nan(b, fmt)) return uintBitsToFloat(0x7fc00000u);
    if (fmt == 5u) return ldexp(1.0, int(b) - 127);
    ivec3 l = layout_of(fmt);
    bool neg = ((b >> uint(l.x + l.y)) & 1u) == 1u;
    int e = int((b >> uint(l.y)) & ((1u << uint(l.x)) - 1u));
    float m = float(b & ((1u << uint(l.y)) - 1u));
    if (fmt == 2u && e == 31) return neg ? -1.0 / 0.0 : 1.0 / 0.0;
    float v = e == 0 ? m * ldexp(1.0, 1 - l.z - l.y)
                     : (1.0 + m * ldexp(1.0, -l.y)) * ldexp(1.0, e - l.z);
    return neg ? -v : v;
}

// `a` (finite, > 0) rounded to nearest even with `m` mantissa bits, smallest normal exponent
// `emin`: scaling by powers of two is exact, so only roundEven rounds.
float round_to(float a, int m, int emin) {
    int e;
    frexp(a, e);
    float q = ldexp(1.0, max(e - 1, emin) - m);
    return roundEven(a / q) * q;
}

uint encode_float(float x, uint fmt, bool sat) {
    bool neg = (floatBitsToUint(x) >> 31) != 0u;
    if (isnan(x)) return nan_bits(fmt, neg);
    ivec3 l = layout_of(fmt);
    uint sign = neg ? (1u << uint(l.x + l.y)) : 0u;
    float a = abs(x);
    float r = (isinf(a) || a == 0.0) ? a : round_to(a, l.y, 1 - l.z);
    if (r > decode(max_bits(fmt), fmt)) {
        if (sat || fmt == 4u) return sign | max_bits(fmt);
        if (fmt == 2u) return sign | 0x7cu;
        return nan_bits(fmt, neg);
    }
    // The fnuz formats have no negative zero (its bits are their NaN).
    if (r == 0.0) return (fmt == 1u || fmt == 3u) ? 0u : sign;
    int e;
    frexp(r, e);
    e = max(e - 1, 1 - l.z);
    uint units = uint(r * ldexp(1.0, l.y - e));
    uint one = 1u << uint(l.y);
    uint bits = units < one ? units : (uint(e + l.z) << uint(l.y)) | (units - one);
    return sign | bits;
}

// ONNX's to_float8e8m0: the f32 exponent, rounded by the mantissa bits; no sign.
uint encode_e8m0(float x, bool sat, uint round) {
    uint b = floatBitsToUint(x);
    uint e = (b >> 23) & 0xffu;
    if (e == 0xffu) return 0xffu;
    bool up = false;
    if (round == 0u) {
        up = (b & 0x7fffffu) != 0u;
    } else if (round == 2u) {
        bool guard = (b & 0x400000u) != 0u;
        bool rest = (b & 0x3fffffu) != 0u;
        up = guard && (rest || e > 0u);
    }
    if (sat && e == 0xfeu) up = false;
    return e + (up ? 1u : 0u);
}

// Truncated toward zero to an int64 as the CPU does (NaN to 0, beyond its range to its
// limit), then wrapped: past 2^31 every f32 is a multiple of 256, so its low bits are zero,
// except int64's largest value, all ones, that infinity and the largest floats become.
uint encode_int(float x, uint fmt) {
    int bits = fmt <= 7u ? 4 : 2;
    bool signed_ = fmt == 6u || fmt == 8u;
    uint mask = (1u << uint(bits)) - 1u;
    uint low;
    if (isnan(x)) {
        low = 0u;
    } else if (x >= 9223372036854775807.0) {
        low = mask;
    } else if (abs(x) >= 2147483648.0) {
        low = 0u;
    } else {
        low = uint(int(trunc(x))) & mask;
    }
    return signed_ ? (uint(int(low << uint(32 - bits)) >> (32 - bits)) & 0xffu) : low;
}

