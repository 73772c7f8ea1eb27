// index.glsl: reading int32 or int64 index tensors (as raw words) in gather and scatter
// kernels. Include after the #extension lines; declares the buffer types Idx and Fault.
layout(buffer_reference, scalar) readonly buffer Idx { uint v[]; };

// An op's fault record (vkml_shaders::IndexFault, FAULT_RECORD_BYTES): word 0 is 0 until the
// op meets an index out of range; the first invocation to meet one sets it to 1 and writes the
// element of the index tensor (1), the index's low and high words as int64 (2, 3) and the size
// of its axis (4). The host zeroes the record and reads it once the run has finished.
layout(buffer_reference, scalar) buffer Fault { uint v[]; };

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

// An index into an axis of `dim` elements: negative counts from the back; out of range is
// clamped so that no access leaves the buffer (checked_index reports it as well).
uint axis_index(int i, uint dim) {
    int d = int(dim);
    if (i < 0) i += d;
    return uint(clamp(i, 0, max(d - 1, 0)));
}

// Element j of the index tensor `b` as an index into an axis of `dim` elements, as
// axis_index; one outside [-dim, dim - 1] is also recorded in `f`, which fails the run.
uint checked_index(Idx b, uint j, uint words, uint dim, Fault f) {
    int i = index_at(b, j, words);
    int d = int(dim);
    int r = i < 0 ? i + d : i;
    // A saturated int64 is out of range of any axis the kernels take (dims fit an int).
    if (r < 0 || r >= d) {
        if (atomicCompSwap(f.v[0], 0u, 1u) == 0u) {
            f.v[1] = j;
            f.v[2] = words == 1u ? uint(i) : b.v[2u * j];
            f.v[3] = words == 1u ? uint(i >> 31) : b.v[2u * j + 1u];
            f.v[4] = dim;
        }
    }
    return uint(clamp(r, 0, max(d - 1, 0)));
}
