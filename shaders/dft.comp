#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
// @variant complex
// @variant windowed WINDOWED
// @variant real_out REAL_OUT

// DFT and STFT (ops/signal/), f32: a direct transform, one invocation per output element.
// The input is read as lines of `len` samples (real, or complex pairs), `inner * channels`
// floats apart, a line starting at batch * batch_stride + frame * frame_stride + the inner
// position; samples past `len` count as zero (a dft_length longer than the signal).
// Output element (line, bin k, inner i) is
//   complex, windowed:  scale * sum_j x[j] (w[j]) e^(sign * 2 pi i k j / n_fft), as a pair;
//   real_out (IRFFT):   scale * the real part of the same sum over a conjugate-symmetric
//                       spectrum of which the line holds bins 0..len-1: bins other than 0
//                       and n_fft / 2 stand for their mirror image too, so count twice.

layout(local_size_x = 64) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    In w;              // the window (windowed); the other variants never read it
    Out y;
    uint n;            // output elements: lines x bins x inner
    uint frames;       // lines per batch
    uint bins;
    uint inner;
    uint channels;     // 1 for a real input, 2 for a complex one
    uint batch_stride; // floats
    uint frame_stride; // floats
    uint len;
    uint n_fft;
    float sign;        // -1 forward, +1 inverse
    float scale;       // 1 forward, 1 / n_fft inverse
} p;

// (cos, sin) of 2 pi t / n_fft for t < n_fft. The turn is cut into quarters in integers so
// that the angle given to cos and sin stays under pi / 2, and multiples of a quarter turn
// come out exact: a bin whose imaginary part is zero in exact arithmetic stays zero, which a
// test comparing against 1e-7 absolute needs.
vec2 twiddle(uint t) {
    uint r = 4u * t;
    uint q = r / p.n_fft;
    uint rem = r - q * p.n_fft;
    float a = 1.5707963267948966 * float(rem) / float(p.n_fft);
    float c = rem == 0u ? 1.0 : cos(a);
    float s = rem == 0u ? 0.0 : sin(a);
    if (q == 0u) return vec2(c, s);
    if (q == 1u) return vec2(-s, c);
    if (q == 2u) return vec2(-c, -s);
    return vec2(s, -c);
}

void main() {
    uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (id >= p.n) return;
    uint i = id % p.inner;
    uint line = id / p.inner;
    uint k = line % p.bins;
    uint o = line / p.bins;
    uint base = (o / p.frames) * p.batch_stride + (o % p.frames) * p.frame_stride + i * p.channels;
    uint step = p.inner * p.channels;
    float re = 0.0;
    float im = 0.0;
    // k * j mod n_fft, kept by adding k (< n_fft) each step: no product can overflow.
    uint t = 0u;
    for (uint j = 0u; j < p.len; ++j) {
        uint at = base + j * step;
        float xr = p.x.v[at];
        float xi = p.channels == 2u ? p.x.v[at + 1u] : 0.0;
#ifdef WINDOWED
        float wj = p.w.v[j];
        xr *= wj;
        xi *= wj;
#endif
        vec2 e = twiddle(t);
#ifdef REAL_OUT
        float weight = (j == 0u || 2u * j == p.n_fft) ? 1.0 : 2.0;
        re += weight * (xr * e.x - xi * e.y);
#else
        float s = p.sign * e.y;
        re += xr * e.x - xi * s;
        im += xi * e.x + xr * s;
#endif
        t += k;
        if (t >= p.n_fft) t -= p.n_fft;
    }
#ifdef REAL_OUT
    p.y.v[id] = re * p.scale;
#else
    p.y.v[2u * id] = re * p.scale;
    p.y.v[2u * id + 1u] = im * p.scale;
#endif
}
