// scatter_common.glsl: the buffers and the reduction of the scatter kernels (after types.glsl).
layout(buffer_reference, scalar) readonly buffer In { T v[]; };
layout(buffer_reference, scalar) buffer Out { T v[]; };

// ONNX's reductions: 1 add, 2 mul, 3 max, 4 min.
A combine(A a, A b, uint reduction) {
    if (reduction == 1u) return a + b;
    if (reduction == 2u) return a * b;
    if (reduction == 3u) return max(a, b);
    return min(a, b);
}
