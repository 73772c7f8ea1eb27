#version 460
// Conv with one thread per output element: for groups with few output channels (depthwise
// and narrow grouped convolutions), where the implicit GEMM's 64-channel tiles would idle.
// Same buffers and parameter table as conv_gemm.comp.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_GOOGLE_include_directive : require
// @variant f32 DT_F32
// @variant f16 DT_F16
#include "types.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, scalar) readonly buffer FIn { T v[]; };
layout(buffer_reference, scalar) writeonly buffer FOut { T v[]; };
layout(buffer_reference, scalar) readonly buffer UIn { uint v[]; };

layout(push_constant, scalar) uniform P { FIn x; FIn w; FIn b; FOut y; UIn t; } p;

const uint P_N = 0, P_C = 1, P_ID = 2, P_IH = 3, P_IW = 4, P_OC = 5, P_OD = 6, P_OH = 7,
           P_OW = 8, P_KD = 9, P_KH = 10, P_KW = 11, P_SD = 12, P_SH = 13, P_SW = 14,
           P_DD = 15, P_DH = 16, P_DW = 17, P_PD = 18, P_PH = 19, P_PW = 20, P_G = 21,
           P_CG = 22, P_OCG = 23;

void main() {
    uint N = p.t.v[P_N], C = p.t.v[P_C], OC = p.t.v[P_OC];
    uint ID = p.t.v[P_ID], IH = p.t.v[P_IH], IW = p.t.v[P_IW];
    uint OD = p.t.v[P_OD], OH = p.t.v[P_OH], OW = p.t.v[P_OW];
    uint KD = p.t.v[P_KD], KH = p.t.v[P_KH], KW = p.t.v[P_KW];
    uint SD = p.t.v[P_SD], SH = p.t.v[P_SH], SW = p.t.v[P_SW];
    uint DD = p.t.v[P_DD], DH = p.t.v[P_DH], DW = p.t.v[P_DW];
    uint PD = p.t.v[P_PD], PH = p.t.v[P_PH], PW = p.t.v[P_PW];
    uint CG = p.t.v[P_CG], OCG = p.t.v[P_OCG];

    uint OHW = OH * OW;
    uint PLANE = OD * OHW;
    uint total = N * OC * PLANE;
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= total) return;

    uint nc = i / PLANE;
    uint sp = i - nc * PLANE;
    uint n = nc / OC;
    uint oc = nc - n * OC;
    uint od = sp / OHW;
    uint r = sp - od * OHW;
    uint oh = r / OW;
    uint ow = r - oh * OW;
    uint g = oc / OCG;

    int d0 = int(od * SD) - int(PD);
    int h0 = int(oh * SH) - int(PH);
    int w0 = int(ow * SW) - int(PW);
    uint IN_PLANE = ID * IH * IW;
    uint KVOL = KD * KH * KW;

    float acc = 0.0;
    for (uint c = 0; c < CG; c++) {
        uint xc = (n * C + g * CG + c) * IN_PLANE;
        uint wc = (oc * CG + c) * KVOL;
        for (uint kd = 0; kd < KD; kd++) {
            int id = d0 + int(kd * DD);
            if (uint(id) >= ID) continue;
            for (uint kh = 0; kh < KH; kh++) {
                int ih = h0 + int(kh * DH);
                if (uint(ih) >= IH) continue;
                uint xrow = xc + (uint(id) * IH + uint(ih)) * IW;
                uint wrow = wc + (kd * KH + kh) * KW;
                for (uint kw = 0; kw < KW; kw++) {
                    int iw = w0 + int(kw * DW);
                    if (uint(iw) >= IW) continue;
                    acc = fma(float(p.x.v[xrow + uint(iw)]), float(p.w.v[wrow + kw]), acc);
                }
            }
        }
    }
    p.y.v[i] = T(acc + float(p.b.v[oc]));
}
