// optim.glsl: what adagrad.comp, adam.comp and momentum.comp (ops/training.rs) share. Include
// after types.glsl. R and the tensors are T; the step count is ONNX's int64 scalar, read as two
// words so that the shaders need no 64-bit integer support on the device.

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer Step { uint w[]; };
layout(buffer_reference, scalar) readonly buffer Vals { T v[]; };
layout(buffer_reference, scalar) writeonly buffer Outs { T v[]; };

uint optim_index() {
    return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}

bool step_positive(Step t) {
    int hi = int(t.w[1]);
    return hi > 0 || (hi == 0 && t.w[0] != 0u);
}

A step_value(Step t) {
    return A(int(t.w[1])) * A(4294967296.0) + A(t.w[0]);
}

// b^T for T >= 0 by squaring: exact for T = 1 and a few roundings otherwise, where pow's
// exp2(T log2 b) would lose 1 - b^T (Adam's bias correction) to cancellation when b is near 1.
A pow_step(A b, Step t) {
    uint lo = t.w[0];
    uint hi = t.w[1];
    A r = A(1);
    A sq = b;
    while (lo != 0u || hi != 0u) {
        if ((lo & 1u) != 0u) r *= sq;
        lo = (lo >> 1) | (hi << 31);
        hi >>= 1;
        sq *= sq;
    }
    return r;
}
