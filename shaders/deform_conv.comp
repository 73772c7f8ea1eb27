#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

// DeformConv (ops/deform_conv), f32, 2-D: one invocation per output element of
// [N, OC, oH, oW], an implicit deformed im2col. For each kernel tap, the input channels of the
// output's group are walked in order; the tap's sampling point (its place, moved by its
// offset) and its four bilinear corners (weights times the mask, 0 outside the input) are
// computed once per offset group those channels fall into.

layout(local_size_x = 128) in;

layout(buffer_reference, scalar) readonly buffer In { float v[]; };
layout(buffer_reference, scalar) writeonly buffer Out { float v[]; };
layout(buffer_reference, scalar) readonly buffer Table { uint v[]; };

layout(push_constant, scalar) uniform P {
    In x;
    In w;
    In offset;
    In b;
    In mask;    // read only when T_MASK is 1
    Out y;
    Table t;
    uint n;     // output elements
} p;

const uint T_C = 0, T_IH = 1, T_IW = 2, T_OC = 3, T_OH = 4, T_OW = 5, T_KH = 6, T_KW = 7,
           T_SH = 8, T_SW = 9, T_DH = 10, T_DW = 11, T_PH = 12, T_PW = 13, T_CG = 14,
           T_OCG = 15, T_CPOG = 16, T_MASK = 17;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    uint C = p.t.v[T_C], IH = p.t.v[T_IH], IW = p.t.v[T_IW], OC = p.t.v[T_OC];
    uint OH = p.t.v[T_OH], OW = p.t.v[T_OW], KH = p.t.v[T_KH], KW = p.t.v[T_KW];
    uint CG = p.t.v[T_CG], OCG = p.t.v[T_OCG], CPOG = p.t.v[T_CPOG];
    bool has_mask = p.t.v[T_MASK] != 0u;

    uint pixels = OH * OW;
    uint pix = i % pixels;
    uint noc = i / pixels;
    uint oc = noc % OC;
    uint n = noc / OC;
    uint oh = pix / OW, ow = pix % OW;
    uint g = oc / OCG;
    uint taps = KH * KW;
    uint plane = IH * IW;
    uint groups = C / CPOG;
    int y0 = int(oh * p.t.v[T_SH]) - int(p.t.v[T_PH]);
    int x0 = int(ow * p.t.v[T_SW]) - int(p.t.v[T_PW]);

    float acc = p.b.v[oc];
    for (uint t = 0u; t < taps; ++t) {
        uint kh = t / KW, kw = t % KW;
        uint og = 0xffffffffu;
        uint idx[4];
        float wt[4];
        for (uint cg = 0u; cg < CG; ++cg) {
            uint c = g * CG + cg;
            if (c / CPOG != og) {
                og = c / CPOG;
                uint pair = ((n * groups + og) * taps + t) * 2u;
                float y = float(y0 + int(kh * p.t.v[T_DH])) + p.offset.v[pair * pixels + pix];
                float x = float(x0 + int(kw * p.t.v[T_DW])) + p.offset.v[(pair + 1u) * pixels + pix];
                float m = has_mask ? p.mask.v[((n * groups + og) * taps + t) * pixels + pix] : 1.0;
                float fy = floor(y), fx = floor(x);
                float ty = y - fy, tx = x - fx;
                for (uint k = 0u; k < 4u; ++k) {
                    float yy = fy + float(k >> 1), xx = fx + float(k & 1u);
                    bool inside = yy >= 0.0 && yy < float(IH) && xx >= 0.0 && xx < float(IW);
                    float w = ((k >> 1) == 0u ? 1.0 - ty : ty) * ((k & 1u) == 0u ? 1.0 - tx : tx);
                    wt[k] = inside ? w * m : 0.0;
                    idx[k] = inside ? uint(yy) * IW + uint(xx) : 0u;
                }
            }
            uint base = (n * C + c) * plane;
            float s = wt[0] * p.x.v[base + idx[0]] + wt[1] * p.x.v[base + idx[1]]
                    + wt[2] * p.x.v[base + idx[2]] + wt[3] * p.x.v[base + idx[3]];
            acc = fma(p.w.v[(oc * CG + cg) * taps + t], s, acc);
        }
    }
    p.y.v[i] = acc;
}
