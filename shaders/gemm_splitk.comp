#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 SPLIT_K

// gemm_splitk: gemm.comp's product, split along K (ops/splitk.rs) when there are too few
// tiles to fill the GPU and K is long. Workgroup z is then slice * batch + z: slice `slice`
// covers k in [slice * KSLICE, +KSLICE) (a multiple of BK) and writes its raw sums (no alpha,
// C or beta) to y, a float scratch laid out [slices][batch][M][N];
// shaders/gemm_splitk_reduce.comp adds the slices and applies the rest. C is unused; SPLITS
// and KSLICE take the place of its strides rsC and csC. See gemm.comp for everything else.
layout(local_size_x = 16, local_size_y = 16) in;
layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    In b;
    In c;
    Out y;
    uint M;
    uint N;
    uint K;
    uint nb1;
    uint nb2;
    uint rsA;
    uint csA;
    uint bA0;
    uint bA1;
    uint bA2;
    uint rsB;
    uint csB;
    uint bB0;
    uint bB1;
    uint bB2;
    uint SPLITS;
    uint KSLICE;
    float alpha;
    float beta;
    uint has_c;
    uint offA;
    uint offB;
    uint offY;
} p;

#include "gemm.glsl"
