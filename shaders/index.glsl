// index.glsl: reading int32 or int64 index tensors (as raw words) in gather and scatter
// kernels. Include after the #extension lines; declares the buffer type Idx.
layout(buffer_reference, scalar) readonly buffer Idx { uint v[]; };

// Element j of an index tensor of `words` words per index (1: int32, 2: int64), saturated to
// the int range so that the clamping below keeps every access inside its buffer.
int index_at(Idx b, uint j, uint words) {
    if (words == 1u) return int(b.v[j]);
    uint lo = b.v[2u * j];
    int hi = int(b.v[2u * j + 1u]);
    if (hi == 0 && lo < 0x80000000u) return int(lo);
    if (hi == -1 && lo >= 0x80000000u) return int(lo);
    return hi < 0 ? -2147483647 - 1 : 2147483647;
}

// An index into an axis of `dim` elements: negative counts from the back; out of range is an
// error the CPU kernel reports, clamped here so no access leaves the buffer.
uint axis_index(int i, uint dim) {
    int d = int(dim);
    if (i < 0) i += d;
    return uint(clamp(i, 0, max(d - 1, 0)));
}
