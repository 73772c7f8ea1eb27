#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
#include "index.glsl"

// RoiAlign (ops/roi_align), f32: one invocation per output element of [R, C, out_h, out_w],
// averaging (or taking the maximum of) its bin's grid of bilinear samples. The region, the
// grid and each sample follow the CPU kernel step by step, max mode's weighted corners too.

layout(local_size_x = 128) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    In rois;
    Idx batch;
    Out y;
    Fault fault;
    uint n;          // output elements
    uint images;
    uint channels;
    uint height;
    uint width;
    uint out_h;
    uint out_w;
    uint sampling_ratio;  // 0: ceil(bin size) samples per bin side
    uint index_words;     // 1: int32 batch indices, 2: int64
    uint flags;           // 1: half_pixel, 2: max mode
    float spatial_scale;
} p;

// Region r's image, recorded as a fault (and clamped so reads stay inside) when out of range.
uint image_of(uint r) {
    int b = index_at(p.batch, r, p.index_words);
    if (b < 0 || b >= int(p.images)) {
        if (atomicCompSwap(p.fault.v[0], 0u, 1u) == 0u) {
            p.fault.v[1] = r;
            p.fault.v[2] = p.index_words == 1u ? uint(b) : p.batch.v[2u * r];
            p.fault.v[3] = p.index_words == 1u ? uint(b >> 31) : p.batch.v[2u * r + 1u];
            p.fault.v[4] = p.images;
        }
        return 0u;
    }
    return uint(b);
}

// A coordinate clamped as the CPU kernel does: its low and high taps and the high tap's weight.
void taps(float v, uint len, out uint lo, out uint hi, out float t) {
    lo = uint(v);
    if (lo >= len - 1u) {
        lo = len - 1u;
        hi = lo;
        t = 0.0;
    } else {
        hi = lo + 1u;
        t = v - float(lo);
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint bins = p.out_h * p.out_w;
    uint bin = i % bins;
    uint rc = i / bins;
    uint c = rc % p.channels;
    uint r = rc / p.channels;
    bool half_pixel = (p.flags & 1u) != 0u;
    bool max_mode = (p.flags & 2u) != 0u;

    float shift = half_pixel ? 0.5 : 0.0;
    float x1 = p.rois.v[4u * r] * p.spatial_scale - shift;
    float y1 = p.rois.v[4u * r + 1u] * p.spatial_scale - shift;
    float x2 = p.rois.v[4u * r + 2u] * p.spatial_scale - shift;
    float y2 = p.rois.v[4u * r + 3u] * p.spatial_scale - shift;
    float roi_w = x2 - x1, roi_h = y2 - y1;
    if (!half_pixel) {
        roi_w = max(roi_w, 1.0);
        roi_h = max(roi_h, 1.0);
    }
    float bin_h = roi_h / float(p.out_h), bin_w = roi_w / float(p.out_w);
    uint grid_h = p.sampling_ratio > 0u ? p.sampling_ratio : uint(max(ceil(bin_h), 0.0));
    uint grid_w = p.sampling_ratio > 0u ? p.sampling_ratio : uint(max(ceil(bin_w), 0.0));

    uint H = p.height, W = p.width;
    uint base = (image_of(r) * p.channels + c) * H * W;
    float fh = float(H), fw = float(W);
    float y0 = y1 + float(bin / p.out_w) * bin_h;
    float x0 = x1 + float(bin % p.out_w) * bin_w;
    float acc = 0.0;
    bool first = true;
    for (uint iy = 0u; iy < grid_h; ++iy) {
        float y = y0 + (float(iy) + 0.5) * bin_h / float(grid_h);
        for (uint ix = 0u; ix < grid_w; ++ix) {
            float x = x0 + (float(ix) + 0.5) * bin_w / float(grid_w);
            float v = 0.0;
            if (!(y < -1.0 || y > fh || x < -1.0 || x > fw)) {
                uint ylo, yhi, xlo, xhi;
                float ly, lx;
                taps(max(y, 0.0), H, ylo, yhi, ly);
                taps(max(x, 0.0), W, xlo, xhi, lx);
                float a = (1.0 - ly) * (1.0 - lx) * p.x.v[base + ylo * W + xlo];
                float b = (1.0 - ly) * lx * p.x.v[base + ylo * W + xhi];
                float d = ly * (1.0 - lx) * p.x.v[base + yhi * W + xlo];
                float e = ly * lx * p.x.v[base + yhi * W + xhi];
                v = max_mode ? max(max(a, b), max(d, e)) : a + b + d + e;
            }
            acc = max_mode ? (first ? v : max(acc, v)) : acc + v;
            first = false;
        }
    }
    if (!max_mode) acc /= float(max(grid_h * grid_w, 1u));
    p.y.v[i] = acc;
}
