#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// binary_mul_i32: y = a * b over int32 with numpy broadcasting (ops/elementwise/binary.rs).
// mode 0: a, b and y have one shape; 1: b is a single element; 2: a is; 3: general broadcast
// through the output dims (rank padded to 6 with leading 1s) and each input's element strides
// (0 on broadcast axes).
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) readonly buffer In { int v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { int v[]; };
layout(push_constant, scalar) uniform P {
    In a;
    In b;
    Out y;
    uint mode;
    uint n;
    uint dims[6];
    uint sa[6];
    uint sb[6];
} p;

// Integer overflow wraps (SPIR-V integer arithmetic is modular).
int op(int x, int y) { return x * y; }

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint ia = i;
    uint ib = i;
    if (p.mode == 1u) {
        ib = 0u;
    } else if (p.mode == 2u) {
        ia = 0u;
    } else if (p.mode == 3u) {
        ia = 0u;
        ib = 0u;
        uint r = i;
        for (int ax = 5; ax >= 0; --ax) {
            uint c = r % p.dims[ax];
            r /= p.dims[ax];
            ia += c * p.sa[ax];
            ib += c * p.sb[ax];
        }
    }
    p.y.v[i] = op(p.a.v[ia], p.b.v[ib]);
}
