// einsum.glsl: the body of einsum1.comp and einsum2.comp (NIN = 1 or 2 inputs), included
// after their push-constant blocks `p`; see those files for the table's layout.

// f64 accumulates in double (GPUs with shaderFloat64), as the CPU does; the others in float.
#ifdef DT_F64
#define EACC double
#else
#define EACC float
#endif

void main() {
    uint o = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (o >= p.nout) return;
    uint no = p.t.v[0];
    uint ns = p.t.v[1];
    uint nl = no + ns;
    uint sz = 2u;
    uint sa = 2u + nl;
    uint sb = 2u + 2u * nl;
    uint base_a = 0u;
    uint base_b = 0u;
    uint r = o;
    for (int l = int(no) - 1; l >= 0; --l) {
        uint i = r % p.t.v[sz + uint(l)];
        r /= p.t.v[sz + uint(l)];
        base_a += i * p.t.v[sa + uint(l)];
#if NIN == 2
        base_b += i * p.t.v[sb + uint(l)];
#endif
    }
    EACC acc = EACC(0);
    for (uint s = 0u; s < p.nsum; ++s) {
        uint oa = base_a;
        uint ob = base_b;
        uint q = s;
        for (int l = int(ns) - 1; l >= 0; --l) {
            uint k = no + uint(l);
            uint i = q % p.t.v[sz + k];
            q /= p.t.v[sz + k];
            oa += i * p.t.v[sa + k];
#if NIN == 2
            ob += i * p.t.v[sb + k];
#endif
        }
#if NIN == 2
        acc += EACC(p.a.v[oa]) * EACC(p.b.v[ob]);
#else
        acc += EACC(p.a.v[oa]);
#endif
    }
    p.y.v[o] = T(acc);
}
