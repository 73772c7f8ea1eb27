// Remap: the one data-movement kernel behind Slice, Split, Expand, Tile, Pad, DepthToSpace,
// SpaceToDepth and the element-sized fallbacks of Transpose, Concat and the view ops. One
// invocation per output element walked; see node/src/ops/remap.rs for the table's meaning.
// Table: [constant lo, constant hi, then per axis (outermost first): out_dim, out_stride,
// in_dim, in_stride, start, step, border]. Source coordinate on an axis = start + o * step;
// outside [0, in_dim) the border decides: 0 constant, 1 edge, 2 reflect, 3 wrap.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant b1 EB=1
// @variant b2 EB=2
// @variant b4 EB=4
// @variant b8 EB=8
#include "elem.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer In { E v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { E v[]; };
layout(buffer_reference, scalar) readonly buffer Table { int v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    Table t;
    Out y;
    uint n;        // elements walked
    uint rank;
    uint in_base;  // element offsets added to every source and destination index
    uint out_base;
} p;

// The source coordinate for `i` on an axis of size `d`, or -1 for "the constant".
int resolve(int i, int d, int border) {
    if (i >= 0 && i < d) return i;
    if (d <= 0 || border == 0) return -1;
    if (border == 1) return clamp(i, 0, d - 1);
    // GLSL leaves % undefined for negative operands (NVIDIA and lavapipe disagree), so wrap
    // from below with non-negative operands only.
    if (border == 3) return i >= 0 ? i % d : d - 1 - (-i - 1) % d;
    if (d == 1) return 0;
    int period = 2 * (d - 1);
    int r = abs(i) % period;
    return r >= d ? period - r : r;
}

void main() {
    uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (g >= p.n) return;
    uint e = g;
    uint dst = p.out_base;
    uint src = p.in_base;
    bool constant = false;
    for (int a = int(p.rank) - 1; a >= 0; --a) {
        int b = 2 + 7 * a;
        uint d = uint(p.t.v[b]);
        uint o = e % d;
        e /= d;
        dst += o * uint(p.t.v[b + 1]);
        int i = resolve(p.t.v[b + 4] + int(o) * p.t.v[b + 5], p.t.v[b + 2], p.t.v[b + 6]);
        if (i < 0) constant = true;
        else src += uint(i) * uint(p.t.v[b + 3]);
    }
    p.y.v[dst] = constant ? E_WORDS(uint(p.t.v[0]), uint(p.t.v[1])) : p.x.v[src];
}
