#version 460
// test_chain_add.comp under the Vulkan memory model (timing_report): the flag is read with
// acquire and written with release semantics at queue-family scope, in place of volatile
// accesses and full fences, and the data is `nonprivate` rather than `coherent`, so it may be
// cached until an acquire. (A version in which every invocation spun on the flag, with no
// workgroup barrier after it, hung on lavapipe.)
#pragma use_vulkan_memory_model
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x = 64) in;
layout(buffer_reference, scalar) nonprivate buffer F { float v[]; };
layout(buffer_reference, scalar) buffer Flags { uint f[]; };
layout(push_constant, scalar) uniform P { F src; F dst; Flags flags; uint index; uint n; float value; } p;
void main() {
    uint r = atomicLoad(p.flags.f[p.index], gl_ScopeQueueFamily, 0, gl_SemanticsRelaxed) + 1;
    if (p.index > 0 && gl_LocalInvocationIndex == 0) {
        while (atomicLoad(p.flags.f[p.index - 1], gl_ScopeQueueFamily, gl_StorageSemanticsBuffer,
                          gl_SemanticsAcquire) != r) {
        }
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer,
                   gl_SemanticsAcquireRelease);
    uint i = gl_LocalInvocationIndex;
    if (i < p.n) {
        p.dst.v[i] = p.src.v[i] + p.value;
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer,
                   gl_SemanticsAcquireRelease);
    if (gl_LocalInvocationIndex == 0) {
        atomicStore(p.flags.f[p.index], r, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer,
                    gl_SemanticsRelease);
    }
}
