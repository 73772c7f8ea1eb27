#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// GridSample (ops/grid_sample.rs), f32, one to three spatial axes: output element i of
// [N, C, points] sums, over the taps of every axis (1 nearest, 2 linear, 4 cubic), the
// product of the axes' weights times the input at the padded tap (0 outside, for zeros
// padding). The taps and their padding follow the CPU kernel step by step.

layout(local_size_x = 128) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    In grid;
    Out y;
    uint n;
    uint points;   // output points per (batch, channel)
    uint channels;
    uint axes;
    uint d0;       // input sizes, outermost first (1 past `axes`)
    uint d1;
    uint d2;
    uint mode;     // 0 nearest, 1 linear, 2 cubic
    uint padding;  // 0 zeros, 1 border, 2 reflection
    uint align;
} p;

float reflect_into(float x, float lo, float hi) {
    float range = hi - lo;
    if (x < lo) {
        float dx = lo - x;
        float k = trunc(dx / range);
        float r = dx - k * range;
        return mod(k, 2.0) == 0.0 ? lo + r : hi - r;
    }
    if (x > hi) {
        float dx = x - hi;
        float k = trunc(dx / range);
        float r = dx - k * range;
        return mod(k, 2.0) == 0.0 ? hi - r : lo + r;
    }
    return x;
}

float far_w(float x) { return ((-0.75 * x + 3.75) * x - 6.0) * x + 3.0; }
float near_w(float x) { return (1.25 * x - 2.25) * x * x + 1.0; }

uint dim(uint a) { return a == 0u ? p.d0 : (a == 1u ? p.d1 : p.d2); }

// Tap t's index (before padding) and weight along axis a for normalized coordinate g.
void tap(float g, uint len, uint t, out int idx, out float w) {
    float fl = float(len);
    float x = p.align != 0u ? (g + 1.0) / 2.0 * (fl - 1.0) : ((g + 1.0) * fl - 1.0) / 2.0;
    if (p.mode == 0u) x = roundEven(x);
    float lo = p.align != 0u ? 0.0 : -0.5;
    float hi = p.align != 0u ? fl - 1.0 : fl - 0.5;
    if (x < lo || x > hi) {
        if (p.padding == 1u) x = clamp(x, 0.0, fl - 1.0);
        else if (p.padding == 2u) x = reflect_into(x, lo, hi);
    }
    if (p.mode == 0u) { idx = int(trunc(x)); w = 1.0; return; }
    float x0 = floor(x);
    float f = x - x0;
    if (p.mode == 1u) {
        idx = int(x0) + int(t);
        w = t == 0u ? 1.0 - f : f;
        return;
    }
    idx = int(x0) - 1 + int(t);
    w = t == 0u ? far_w(f + 1.0) : (t == 1u ? near_w(f) : (t == 2u ? near_w(1.0 - f) : far_w(2.0 - f)));
}

// A tap's index after padding; -1 for a zero.
int padded(int i, uint len) {
    int d = int(len);
    if (p.padding == 0u) return (i >= 0 && i < d) ? i : -1;
    if (p.padding == 1u) return clamp(i, 0, d - 1);
    float lo = p.align != 0u ? 0.0 : -0.5;
    float hi = p.align != 0u ? float(len) - 1.0 : float(len) - 0.5;
    return clamp(int(reflect_into(float(i), lo, hi)), 0, d - 1);
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint pt = i % p.points;
    uint bc = i / p.points;
    uint b = bc / p.channels;
    uint taps = p.mode == 0u ? 1u : (p.mode == 1u ? 2u : 4u);
    int idx[3][4];
    float wt[3][4];
    for (uint a = 0u; a < p.axes; ++a) {
        // Grid entries run x first; axes run outermost first.
        float g = p.grid.v[(b * p.points + pt) * p.axes + (p.axes - 1u - a)];
        for (uint t = 0u; t < taps; ++t) {
            int raw;
            float w;
            tap(g, dim(a), t, raw, w);
            idx[a][t] = padded(raw, dim(a));
            wt[a][t] = w;
        }
    }
    uint plane = p.d0 * p.d1 * p.d2;
    uint base = bc * plane;
    uint combos = 1u;
    for (uint a = 0u; a < p.axes; ++a) combos *= taps;
    float sum = 0.0;
    for (uint c = 0u; c < combos; ++c) {
        uint rest = c;
        uint off = 0u;
        float w = 1.0;
        bool zero = false;
        for (uint a = 0u; a < p.axes; ++a) {
            uint t = rest % taps;
            rest /= taps;
            int j = idx[a][t];
            zero = zero || j < 0;
            off = off * dim(a) + uint(max(j, 0));
            w *= wt[a][t];
        }
        if (!zero) sum += p.x.v[base + off] * w;
    }
    p.y.v[i] = sum;
}
