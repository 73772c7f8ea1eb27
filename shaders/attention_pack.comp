#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

// Attention's data movement before the attention kernel (ops/attention/gpu.rs): writes a
// [batch, heads, len, dim] tensor whose row t of (b, h) is
//   t <  past_b            the past cache's row t (present key/value),
//   t <  past_b + rows     new row s = t - past_b of the source, plus a bias, rotated,
//   otherwise              zero (GroupQueryAttention's present beyond the valid length).
// Rows are read from `src` at off + b*sb + h*sh + s*ss (a head's `dim` elements contiguous),
// so 3-D (BSNH), 4-D (BNSH) and packed QKV inputs need no transpose first. Without `into
// past` (a rotated query) row t is new row s = t. past_b is the causal offset: a fixed
// number, or per batch from the lengths input (GroupQueryAttention's seqlens_k + 1 - rows).
// Rotary embedding (RoPE) rotates the first 2 * half dims at position past_b + s, pairing
// d with d + half, or 2i with 2i + 1 when interleaved; cos and sin are [positions, half].
// Table words: 0 batch, 1 heads, 2 len, 3 dim, 4 rows, 5 past_len, 6 flags, 7 half,
// 8 off, 9 sb, 10 sh, 11 ss, 12 bias_off, 13 fixed offset (int), 14 lens words per entry,
// 15 lens plus (int), 16 positions.
// flags: 1 past present, 2 into past, 4 bias, 8 rotary, 16 interleaved, 32 offset from lens.
// In place (dst is the past's buffer: a bound cache, exec/bound.rs) only the new rows are
// written: the past rows are there already, and the rows after them are never read. Then
// invocation i < `fresh` (batch * heads * rows * dim) takes the new rows' element i, and the
// rest, most of a long cache's dispatch, return before reading anything: whether the
// buffers coincide is known only when the executor binds them, after the dispatch's size.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Ints { int v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(push_constant, scalar) uniform P {
    In src;
    In past;
    In bias;
    In cosc;
    In sinc;
    Ints lens;
    Words t;
    Out dst;
    uint n;
    uint fresh;
} p;

uint heads, len, dim, rows, past_len, flags, half_dim, off, sb, sh, ss, bias_off, positions;
// The head of the element: its bias sits at bias_off + head * dim.
uint head;

float load(uint base, uint d) {
    float x = float(p.src.v[base + d]);
    if ((flags & 4u) != 0u) x += float(p.bias.v[bias_off + head * dim + d]);
    return x;
}

float rotated(uint base, uint d, uint pos) {
    uint rd = 2u * half_dim;
    if ((flags & 8u) == 0u || d >= rd) return load(base, d);
    uint pair = (flags & 16u) != 0u ? d / 2u : d % half_dim;
    bool first = (flags & 16u) != 0u ? (d & 1u) == 0u : d < half_dim;
    uint d1 = (flags & 16u) != 0u ? 2u * pair : pair;
    uint d2 = (flags & 16u) != 0u ? 2u * pair + 1u : pair + half_dim;
    float x1 = load(base, d1);
    float x2 = load(base, d2);
    uint at = min(pos, positions - 1u) * half_dim + pair;
    float c = float(p.cosc.v[at]);
    float s = float(p.sinc.v[at]);
    return first ? x1 * c - x2 * s : x1 * s + x2 * c;
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    // The past's buffer is dst only where the present is written into it (flags 1 and 2).
    bool in_place = uvec2(p.past) == uvec2(p.dst) && (p.t.v[6] & 3u) == 3u;
    if (in_place && i >= p.fresh) return;
    heads = p.t.v[1];
    len = p.t.v[2];
    dim = p.t.v[3];
    rows = p.t.v[4];
    past_len = p.t.v[5];
    flags = p.t.v[6];
    half_dim = p.t.v[7];
    off = p.t.v[8];
    sb = p.t.v[9];
    sh = p.t.v[10];
    ss = p.t.v[11];
    bias_off = p.t.v[12];
    positions = p.t.v[16];
    // Rows of the element's (b, h): all `len` of dst's, or in place the new ones.
    uint span = in_place ? rows : len;
    uint d = i % dim;
    uint t = (i / dim) % span;
    uint h = (i / (dim * span)) % heads;
    head = h;
    uint b = i / (dim * span * heads);
    int offset = int(p.t.v[13]);
    if ((flags & 32u) != 0u) {
        offset = p.lens.v[b * p.t.v[14]] + int(p.t.v[15]) - int(rows);
    }
    // Lengths out of range were refused on the host when known; here they only must not
    // read outside the past cache.
    uint past_b = uint(clamp(offset, 0, int(past_len)));
    if (in_place) {
        t += past_b;
        if (t >= len) return;
        uint base = off + b * sb + h * sh + (t - past_b) * ss;
        p.dst.v[((b * heads + h) * len + t) * dim + d] = T(rotated(base, d, uint(max(offset, 0)) + t - past_b));
        return;
    }
    T y = T(0.0);
    if ((flags & 2u) != 0u && (flags & 1u) != 0u && t < past_b) {
        y = p.past.v[((b * heads + h) * past_len + t) * dim + d];
    } else {
        uint s = (flags & 2u) != 0u ? t - past_b : t;
        if ((flags & 2u) == 0u || t >= past_b) {
            if (s < rows) {
                uint base = off + b * sb + h * sh + s * ss;
                y = T(rotated(base, d, uint(max(offset, 0)) + s));
            }
        }
    }
    p.dst.v[i] = y;
}
