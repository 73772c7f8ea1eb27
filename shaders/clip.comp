#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require

// clip: y = min(max(x, lo), hi) (ops/elementwise/unary.rs, Clip), as numpy.clip: hi wins when
// lo > hi, NaN stays NaN. mode bits: 1 = lo is input 1's single element, 2 = hi is input 2's,
// 4 = lo and hi are the float parameters (opset < 11 attributes). An absent bound's buffer slot
// holds input 0 and is not read.
// @variant f32 DT_F32
// @variant f16 DT_F16
// @variant i32 DT_I32
// @variant i64 DT_I64
// @variant i8 DT_I8
// @variant u8 DT_U8
// @variant i16 DT_I16
// @variant u16 DT_U16
// @variant u32 DT_U32
// @variant u64 DT_U64
#include "types.glsl"

layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(push_constant, scalar) uniform P {
    In x;
    In lo;
    In hi;
    Out y;
    uint n;
    uint mode;
    float flo;
    float fhi;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    T r = p.x.v[i];
    if ((p.mode & 4u) != 0u) {
        // Only float variants are given this mode.
        float f = float(r);
        if (f < p.flo) f = p.flo;
        if (f > p.fhi) f = p.fhi;
        p.y.v[i] = T(f);
        return;
    }
    if ((p.mode & 1u) != 0u && r < p.lo.v[0]) r = p.lo.v[0];
    if ((p.mode & 2u) != 0u && r > p.hi.v[0]) r = p.hi.v[0];
    p.y.v[i] = r;
}
