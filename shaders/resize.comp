// Resize: one invocation per output element. For each resized axis the source coordinate and
// the taps (nearest 2 with one weight 1, linear 2, cubic 4; antialiased linear and cubic
// widen with the shrink factor, up to MAX_TAPS, which the op side checks) are computed here
// from the scales or sizes buffer, in float, following node/src/ops/resize/taps.rs (the CPU
// reference computes the same in f64); the output is the weighted sum over the product of the
// axes' taps. Table per axis (outermost first): in_dim, out_dim, in_stride, slot (the axis's
// entry in scales / sizes / roi, or 0xFFFFFFFF for an axis left alone).
// Variants: f32, f16, and u8 / i8 (images), all computed in float.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant u8 DT_U8
// @variant i8 DT_I8
#include "types.glsl"

// Integers round half to even and saturate, as ONNX's reference does.
#if defined(DT_U8)
#define STORE(x) T(clamp(roundEven(x), 0.0, 255.0))
#elif defined(DT_I8)
#define STORE(x) T(int(clamp(roundEven(x), -128.0, 127.0)))
#else
#define STORE(x) T(x)
#endif

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };
layout(buffer_reference, scalar) readonly buffer Floats { float v[]; };
layout(buffer_reference, scalar) readonly buffer Words { int v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Table t;
    Floats scales;
    Words sizes;   // int64 as pairs of words
    Floats roi;    // [starts..., ends...] over the listed axes
    Out y;
    uint n;
    uint rank;
    uint mode;       // 0 nearest, 1 linear, 2 cubic
    uint nearest;    // 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil, 4 simple
    uint transform;  // 0 half_pixel, 1 half_pixel_symmetric, 2 pytorch_half_pixel,
                     // 3 align_corners, 4 asymmetric, 5 tf_crop_and_resize
    uint source;     // 0 scales, 1 sizes
    uint policy;     // 0 stretch, 1 not_larger, 2 not_smaller
    uint listed;     // entries of scales / sizes
    uint exclude;    // exclude_outside
    float cubic_a;
    float extrapolation;
    uint antialias;
} p;

#define MAX_TAPS 16

float scale_of(uint a, uint slot) {
    if (p.source == 0u) return p.scales.v[slot];
    float s = float(p.sizes.v[2u * slot]) / float(p.t.v[4u * a]);
    if (p.policy == 0u) return s;
    for (uint b = 0u; b < p.rank; ++b) {
        uint sb = p.t.v[4u * b + 3u];
        if (sb == 0xFFFFFFFFu) continue;
        float r = float(p.sizes.v[2u * sb]) / float(p.t.v[4u * b]);
        s = p.policy == 1u ? min(s, r) : max(s, r);
    }
    return s;
}

float cubic(float x) {
    float a = p.cubic_a;
    x = abs(x);
    if (x <= 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

void main() {
    uint e = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (e >= p.n) return;
    // Per axis: up to 4 taps (source offsets already times the stride) and their weights.
    uint off[8][MAX_TAPS];
    float w[8][MAX_TAPS];
    uint cnt[8];
    uint rest = e;
    for (int a = int(p.rank) - 1; a >= 0; --a) {
        uint in_d = p.t.v[4 * a];
        uint out_d = p.t.v[4 * a + 1];
        uint stride = p.t.v[4 * a + 2];
        uint slot = p.t.v[4 * a + 3];
        uint o = rest % out_d;
        rest /= out_d;
        if (slot == 0xFFFFFFFFu) {
            cnt[a] = 1u;
            off[a][0] = o * stride;
            w[a][0] = 1.0;
            continue;
        }
        float sc = scale_of(uint(a), slot);
        float in_f = float(in_d);
        float out_f = sc * in_f;
        float y = float(o);
        float x;
        if (p.transform == 3u) x = out_f == 1.0 ? 0.0 : y * (in_f - 1.0) / (out_f - 1.0);
        else if (p.transform == 4u) x = y / sc;
        else if (p.transform == 5u) {
            float r0 = p.roi.v[slot];
            float r1 = p.roi.v[p.listed + slot];
            x = out_f == 1.0 ? (r1 - r0) * (in_f - 1.0) / 2.0 : y * (r1 - r0) * (in_f - 1.0) / (out_f - 1.0);
            x += r0 * (in_f - 1.0);
            if (x < 0.0 || x > in_f - 1.0) {
                p.y.v[e] = STORE(p.extrapolation);
                return;
            }
        } else if (p.transform == 2u) x = out_f == 1.0 ? -0.5 : (y + 0.5) / sc - 0.5;
        else if (p.transform == 1u) {
            float adjustment = float(out_d) / out_f;
            x = in_f / 2.0 * (1.0 - adjustment) + (y + 0.5) / sc - 0.5;
        } else x = (y + 0.5) / sc - 0.5;
        if (p.mode == 0u) {
            // GPU division is not correctly rounded (up to 2.5 ulp in Vulkan; NVIDIA uses it):
            // a coordinate a hair off a tie or an integer would pick the other neighbour than
            // the CPU's f64 does. The ties and integers that matter come from scales with small
            // denominators, so snap to them within 1e-5.
            float h = round(x * 2.0) * 0.5;
            if (abs(x - h) <= 1e-5 * max(1.0, abs(x))) x = h;
        }
        int base = int(ceil(x)) - 1;
        float ratio = x - float(base);
        int first = 0;
        float ww[MAX_TAPS];
        uint k = 2u;
        if (p.antialias == 1u && p.mode != 0u) {
            // The kernel stretched by 1 / scale when shrinking, normalised to sum 1.
            float s1 = min(sc, 1.0);
            float support = p.mode == 1u ? 1.0 : 2.0;
            first = int(floor(-support / s1)) + 1;
            k = min(uint(2 - 2 * first), uint(MAX_TAPS));
            float total = 0.0;
            for (uint j = 0u; j < k; ++j) {
                float d = (float(first + int(j)) - ratio) * s1;
                ww[j] = p.mode == 1u ? clamp(1.0 - abs(d), 0.0, 1.0) : cubic(d);
                total += ww[j];
            }
            if (total != 0.0) {
                for (uint j = 0u; j < k; ++j) ww[j] /= total;
            }
        } else if (p.mode == 0u) {
            bool right;
            if (ratio == 1.0) right = true;
            else if (p.nearest == 0u) right = ratio > 0.5;
            else if (p.nearest == 1u) right = ratio >= 0.5;
            else if (p.nearest == 2u) right = false;
            else if (p.nearest == 3u) right = true;
            else right = sc < 1.0;
            ww[0] = right ? 0.0 : 1.0;
            ww[1] = right ? 1.0 : 0.0;
        } else if (p.mode == 1u) {
            ww[0] = 1.0 - ratio;
            ww[1] = ratio;
        } else {
            k = 4u;
            first = -1;
            ww[0] = cubic(ratio + 1.0);
            ww[1] = cubic(ratio);
            ww[2] = cubic(1.0 - ratio);
            ww[3] = cubic(2.0 - ratio);
        }
        float sum = 0.0;
        for (uint j = 0u; j < k; ++j) {
            int i = base + first + int(j);
            if (p.exclude == 1u && (i < 0 || i >= int(in_d))) ww[j] = 0.0;
            sum += ww[j];
        }
        for (uint j = 0u; j < k; ++j) {
            int i = clamp(base + first + int(j), 0, int(in_d) - 1);
            off[a][j] = uint(i) * stride;
            w[a][j] = (p.exclude == 1u && sum != 0.0) ? ww[j] / sum : ww[j];
        }
        cnt[a] = k;
    }
    // Sum over every combination of the axes' taps (an odometer over tap numbers).
    uint pick[8];
    uint total = 1u;
    for (uint a = 0u; a < p.rank; ++a) {
        pick[a] = 0u;
        total *= cnt[a];
    }
    float acc = 0.0;
    for (uint c = 0u; c < total; ++c) {
        float wt = 1.0;
        uint src = 0u;
        for (uint a = 0u; a < p.rank; ++a) {
            wt *= w[a][pick[a]];
            src += off[a][pick[a]];
        }
        if (wt != 0.0) acc += wt * float(p.x.v[src]);
        for (int a = int(p.rank) - 1; a >= 0; --a) {
            pick[a] += 1u;
            if (pick[a] < cnt[a]) break;
            pick[a] = 0u;
        }
    }
    p.y.v[e] = STORE(acc);
}
