#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32 NIN=1
// @variant f16 DT_F16 NIN=1
// @variant f64 DT_F64 NIN=1
#include "types.glsl"

// einsum1: Einsum of one input (ops/einsum/): one invocation per output element, summing the
// input over the labels not in the output; float accumulation (double for f64). Table: [n_out, n_sum, sizes
// (output labels, then summed), strides of the input over all labels]. The body is
// einsum.glsl, shared with einsum2.comp.
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { T v[]; };
layout(buffer_reference, scalar) readonly buffer Tab { uint v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    Out y;
    Tab t;
    uint nout;
    uint nsum;
} p;

#include "einsum.glsl"
