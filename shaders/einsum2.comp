#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 NIN=2
// @variant f16 DT_F16 NIN=2
// @variant f64 DT_F64 NIN=2
#include "types.glsl"

// einsum2: Einsum of two inputs (ops/einsum/): one invocation per output element, summing over
// the labels not in the output the product of the inputs at per-label strides; float
// accumulation. Table: [n_out, n_sum, sizes (output labels, then summed), strides of input 0
// over all labels, strides of input 1]. The body is einsum.glsl, shared with einsum1.comp.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    In b;
    Out y;
    Tab t;
    uint nout;
    uint nsum;
} p;

#include "einsum.glsl"
