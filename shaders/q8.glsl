// QLinearConv's requantization, shared by conv_q8.comp and conv_q8_reduce.comp.

// M = fl(fl(sa * sb) / sy), as the CPU kernel rounds it: one correction step makes the
// quotient the correctly rounded one.
float q8_multiplier(float sa, float sb, float sy) {
    float ab = sa * sb;
    float q = ab / sy;
    return q + fma(-q, sy, ab) / sy;
}

// The zero point byte `zb` as an integer of y's type.
int q8_zero(uint zb, bool y_signed) {
    return y_signed ? int(zb) - (zb >= 128u ? 256 : 0) : int(zb);
}

// clamp(round_half_even(v * M) + zy) to y's range, as the byte y holds.
uint8_t q8_requant(int v, float mult, int zy, bool y_signed) {
    float lo = y_signed ? -128.0 : 0.0;
    float hi = y_signed ? 127.0 : 255.0;
    float y = clamp(roundEven(float(v) * mult) + float(zy), lo, hi);
    return uint8_t(uint(int(y)) & 255u);
}
