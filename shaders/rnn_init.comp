#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
#include "index.glsl"

// RNN, GRU and LSTM (ops/recurrent): the state before the first step. Element i of
// [dirs, batch, hidden] takes initial_h (and initial_c) or 0 into slot 0 of the hidden state
// and into the cell state (the state layout is rnn_step.comp's). One invocation per batch row
// also checks its sequence length: outside [0, seq] it is recorded in the fault record.

layout(local_size_x = 64) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer State { float v[]; };

layout(push_constant, scalar) uniform P {
    In h0;
    In c0;
    Idx lens;
    State state;
    Fault fault;
    uint n;       // dirs x batch x hidden
    uint batch;
    uint hidden;
    uint dirs;
    uint seq;
    uint flags;   // 1: initial_h, 2: initial_c, 4: sequence_lens, 8: layout 1 (batch first)
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint j = i % p.hidden;
    uint b = (i / p.hidden) % p.batch;
    uint d = i / (p.hidden * p.batch);
    // initial_h/c are [dirs, batch, hidden], or [batch, dirs, hidden] with layout 1.
    uint src = (p.flags & 8u) != 0u ? (b * p.dirs + d) * p.hidden + j : i;
    p.state.v[i] = (p.flags & 1u) != 0u ? p.h0.v[src] : 0.0;
    p.state.v[2u * p.n + i] = (p.flags & 2u) != 0u ? p.c0.v[src] : 0.0;
    if ((p.flags & 4u) != 0u && d == 0u && j == 0u) {
        int len = int(p.lens.v[b]);
        if (len < 0 || len > int(p.seq)) {
            if (atomicCompSwap(p.fault.v[0], 0u, 1u) == 0u) {
                p.fault.v[1] = b;
                p.fault.v[2] = uint(len);
                p.fault.v[3] = len < 0 ? 0xffffffffu : 0u;
                p.fault.v[4] = p.seq;
            }
        }
    }
}
