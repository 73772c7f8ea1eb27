// Transpose of one-word elements through 32 x 32 shared-memory tiles, for walks whose last
// output axis b is not the input's contiguous axis a: each tile is read along a and written
// along b, so both sides touch consecutive words. Up to four more axes form the batch.
// The op side (node/src/ops/transpose/gpu.rs) lays out the parameters; one workgroup per tile.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

layout(local_size_x = 32, local_size_y = 8) in;

layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) writeonly buffer OutWords { uint v[]; };

layout(push_constant, scalar) uniform P {
    Words x;
    OutWords y;
    uint groups;    // tiles in all (workgroups that have work)
    uint tiles_a;
    uint tiles_b;
    uint da;        // extent of axis a (input stride 1)
    uint db;        // extent of axis b (output stride 1)
    uint sb;        // input stride of b
    uint oa;        // output stride of a
    uint bdims[4];  // batch axes, padded with 1
    uint bin[4];    // their input strides
    uint bout[4];   // their output strides
} p;

// 33 columns so that reading a column hits 32 different banks. 4.2 KiB.
shared uint tile[32][33];

void main() {
    uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Uniform across the workgroup, so every invocation or none reaches the barrier.
    if (g >= p.groups) return;
    uint tb = g % p.tiles_b;
    uint t = g / p.tiles_b;
    uint ta = t % p.tiles_a;
    uint bi = t / p.tiles_a;
    uint in_base = 0u;
    uint out_base = 0u;
    for (int k = 3; k >= 0; --k) {
        uint d = p.bdims[k];
        uint c = bi % d;
        bi /= d;
        in_base += c * p.bin[k];
        out_base += c * p.bout[k];
    }
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint ia = ta * 32u + tx;
    for (uint r = 0u; r < 32u; r += 8u) {
        uint ib = tb * 32u + ty + r;
        if (ia < p.da && ib < p.db) tile[ty + r][tx] = p.x.v[in_base + ia + ib * p.sb];
    }
    barrier();
    uint ob = tb * 32u + tx;
    for (uint r = 0u; r < 32u; r += 8u) {
        uint oa = ta * 32u + ty + r;
        if (oa < p.da && ob < p.db) p.y.v[out_base + oa * p.oa + ob] = tile[tx][ty + r];
    }
}
