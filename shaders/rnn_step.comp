#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// One time step of RNN, GRU or LSTM (ops/recurrent), every direction at once: invocation
// (j, b, d) computes hidden unit j of batch row b in direction d. Step t of the reverse
// direction is time len - 1 - t of its row, so both directions advance together; a row past
// its length holds its state and writes zeros to Y.
//
// state (floats, n = dirs x batch x hidden): the hidden state in two slots [2][n] (step t
// reads slot t % 2 and writes the other), the cell state [n] (LSTM, updated in place), and
// GRU's gates [2][n]: z, then r x H (linear_before_reset 0) or r. A GRU step is two
// dispatches: phase 0 writes the gates, phase 1 the state, as the candidate of unit j needs
// r of every unit.
//
// Gates follow ONNX's order in W, R and B: LSTM i, o, f, c; GRU z, r, h.

layout(local_size_x = 64) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) readonly buffer Words { uint v[]; };
layout(buffer_reference, scalar) buffer State { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    In w;
    In r;
    In bias;
    In peep;
    Words lens;
    State state;
    Out y;
    Out yh;
    Out yc;
    Words acts;   // per direction and activation: alpha and beta (float bits)
    uint batch;
    uint inputs;
    uint hidden;
    uint seq;
    uint t;
    // bits 0-1 cell (0 RNN, 1 GRU, 2 LSTM), 2 B, 3 P, 4 sequence_lens, 5 Y_h, 6 Y_c,
    // 7 layout 1, 8 linear_before_reset, 9 input_forget, 10 phase 1, 11 two directions,
    // 12 reverse (one direction), 13 clip
    uint flags;
    float clip;
    uint codes;   // activation codes, 4 bits each, direction-major (3 per direction)
} p;

bool flag(uint bit) { return (p.flags & (1u << bit)) != 0u; }

float logistic(float x) {
    float e = exp(-abs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

// Activation k of direction d (ONNX's list: Relu, Tanh, Sigmoid, Affine, LeakyRelu,
// ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus).
float act(uint d, uint k, float x) {
    uint slot = d * 3u + k;
    uint code = (p.codes >> (4u * slot)) & 15u;
    float a = uintBitsToFloat(p.acts.v[2u * slot]);
    float b = uintBitsToFloat(p.acts.v[2u * slot + 1u]);
    switch (code) {
        case 0u: return max(x, 0.0);
        case 1u: return tanh(x);
        case 2u: return logistic(x);
        case 3u: return a * x + b;
        case 4u: return x >= 0.0 ? x : a * x;
        case 5u: return x > a ? x : 0.0;
        case 6u: return a * tanh(b * x);
        case 7u: return clamp(a * x + b, 0.0, 1.0);
        case 8u: return x >= 0.0 ? x : a * (exp(x) - 1.0);
        case 9u: return x / (1.0 + abs(x));
        default: return max(x, 0.0) + log(1.0 + exp(-abs(x)));
    }
}

float clipped(float v) { return flag(13u) ? clamp(v, -p.clip, p.clip) : v; }

void main() {
    uint j = gl_GlobalInvocationID.x;
    uint b = gl_GlobalInvocationID.y;
    uint d = gl_GlobalInvocationID.z;
    if (j >= p.hidden) return;
    uint cell = p.flags & 3u;
    uint gates = cell == 0u ? 1u : (cell == 1u ? 3u : 4u);
    uint dirs = flag(11u) ? 2u : 1u;
    bool reverse = flag(11u) ? d == 1u : flag(12u);
    uint n = dirs * p.batch * p.hidden;
    uint at = (d * p.batch + b) * p.hidden + j;
    uint row0 = (d * p.batch + b) * p.hidden;
    uint cur = (p.t & 1u) * n;
    uint nxt = n - cur;
    uint len = flag(4u) ? min(p.lens.v[b], p.seq) : p.seq;
    bool live = p.t < len;
    uint time = reverse ? len - 1u - p.t : p.t;
    bool last = p.t + 1u == p.seq;
    uint phase1 = flag(10u) ? 1u : 0u;

    if (!live) {
        if (cell != 1u || phase1 == 1u) {
            p.state.v[nxt + at] = p.state.v[cur + at];
            uint yt = flag(7u) ? ((b * p.seq + p.t) * dirs + d) * p.hidden + j
                               : ((p.t * dirs + d) * p.batch + b) * p.hidden + j;
            p.y.v[yt] = 0.0;
            if (last) {
                uint o = flag(7u) ? (b * dirs + d) * p.hidden + j : at;
                if (flag(5u)) p.yh.v[o] = p.state.v[cur + at];
                if (flag(6u)) p.yc.v[o] = p.state.v[2u * n + at];
            }
        }
        return;
    }

    uint xrow = flag(7u) ? (b * p.seq + time) * p.inputs : (time * p.batch + b) * p.inputs;
    // Dot products of this unit's rows of W and R with x_t and H_{t-1}, gate by gate; for
    // GRU's candidate in phase 1 (linear_before_reset 0) R multiplies r x H instead.
    float sx[4];
    float sh[4];
    uint g0 = cell == 1u ? (phase1 == 1u ? 2u : 0u) : 0u;
    uint g1 = cell == 1u ? (phase1 == 1u ? 3u : 2u) : gates;
    bool reset_h = cell == 1u && phase1 == 1u && !flag(8u);
    for (uint g = g0; g < g1; ++g) {
        uint wr = (d * gates + g) * p.hidden + j;
        float ax = 0.0;
        for (uint k = 0u; k < p.inputs; ++k) ax += p.x.v[xrow + k] * p.w.v[wr * p.inputs + k];
        float ah = 0.0;
        uint hsrc = reset_h ? 3u * n + n + row0 : cur + row0;
        for (uint k = 0u; k < p.hidden; ++k) ah += p.state.v[hsrc + k] * p.r.v[wr * p.hidden + k];
        if (flag(2u)) {
            uint bw = d * 2u * gates * p.hidden + g * p.hidden + j;
            ax += p.bias.v[bw];
            ah += p.bias.v[bw + gates * p.hidden];
        }
        sx[g] = ax;
        sh[g] = ah;
    }
    float h_prev = p.state.v[cur + at];
    float h_new;
    if (cell == 0u) {
        h_new = act(d, 0u, clipped(sx[0] + sh[0]));
    } else if (cell == 1u) {
        if (phase1 == 0u) {
            float z = act(d, 0u, clipped(sx[0] + sh[0]));
            float r = act(d, 0u, clipped(sx[1] + sh[1]));
            p.state.v[3u * n + at] = z;
            p.state.v[4u * n + at] = flag(8u) ? r : r * h_prev;
            return;
        }
        float z = p.state.v[3u * n + at];
        float pre = flag(8u) ? sx[2] + p.state.v[4u * n + at] * sh[2] : sx[2] + sh[2];
        float c = act(d, 1u, clipped(pre));
        h_new = (1.0 - z) * c + z * h_prev;
    } else {
        float c_prev = p.state.v[2u * n + at];
        float pi = 0.0, po = 0.0, pf = 0.0;
        if (flag(3u)) {
            uint pr = d * 3u * p.hidden + j;
            pi = p.peep.v[pr];
            po = p.peep.v[pr + p.hidden];
            pf = p.peep.v[pr + 2u * p.hidden];
        }
        float i = act(d, 0u, clipped(sx[0] + sh[0] + pi * c_prev));
        float f = flag(9u) ? 1.0 - i : act(d, 0u, clipped(sx[2] + sh[2] + pf * c_prev));
        float c = act(d, 1u, clipped(sx[3] + sh[3]));
        float c_new = f * c_prev + i * c;
        float o = act(d, 0u, clipped(sx[1] + sh[1] + po * c_new));
        h_new = o * act(d, 2u, c_new);
        p.state.v[2u * n + at] = c_new;
        if (last && flag(6u)) p.yc.v[flag(7u) ? (b * dirs + d) * p.hidden + j : at] = c_new;
    }
    p.state.v[nxt + at] = h_new;
    uint yt = flag(7u) ? ((b * p.seq + time) * dirs + d) * p.hidden + j
                       : ((time * dirs + d) * p.batch + b) * p.hidden + j;
    p.y.v[yt] = h_new;
    if (last && flag(5u)) p.yh.v[flag(7u) ? (b * dirs + d) * p.hidden + j : at] = h_new;
}
