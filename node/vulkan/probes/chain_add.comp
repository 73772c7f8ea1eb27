#version 460
// Test kernel for the Vulkan layer (timing_report): dst = src + value over n <= 64 floats, one
// workgroup, ordered after the previous link of a chain by a flag in memory rather than by a
// pipeline barrier. Link k waits until flag k-1 holds this run's number, then stores its own.
// A run's number is one more than the link's own flag at its start (only the link writes it).
// This leans on the GPU starting dispatches in submission order, which Vulkan does not
// promise: it measures what a barrier-free dependency could cost, nothing uses it.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
// @variant coherent COHERENT
// @variant cached CACHED
layout(local_size_x = 64) in;
#ifdef COHERENT
layout(buffer_reference, scalar) coherent buffer F { float v[]; };
#else
layout(buffer_reference, scalar) buffer F { float v[]; };
#endif
layout(buffer_reference, scalar) coherent volatile buffer Flags { uint f[]; };
layout(push_constant, scalar) uniform P { F src; F dst; Flags flags; uint index; uint n; float value; } p;
shared uint run;
void main() {
    if (gl_LocalInvocationIndex == 0) {
        uint r = p.flags.f[p.index] + 1;
        if (p.index > 0) {
            while (p.flags.f[p.index - 1] != r) {
            }
        }
        run = r;
    }
    memoryBarrierBuffer();
    barrier();
    uint i = gl_LocalInvocationIndex;
    if (i < p.n) {
        p.dst.v[i] = p.src.v[i] + p.value;
    }
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0) {
        atomicExchange(p.flags.f[p.index], run);
    }
}
