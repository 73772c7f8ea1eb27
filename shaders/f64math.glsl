// f64math.glsl: exp and log for double, which GLSL lacks (reduce.comp, unary_f64.comp).
// Include after types.glsl with T = double; expects POS_INF and NEG_INF as doubles.
// GLSL has no exp or log for double: these keep f64's precision (what the CPU computes), by
// range reduction and series that converge well past 1e-17 on the reduced ranges.
const double LN2_HI = 6.93147180369123816490e-01LF;
const double LN2_LO = 1.90821492927058770002e-10LF;

double exp_d(double x) {
    if (isnan(x)) return x;
    if (x > 709.78LF) return POS_INF;
    if (x < -745.2LF) return 0.0LF;
    double k = floor(x / (LN2_HI + LN2_LO) + 0.5LF);
    double r = (x - k * LN2_HI) - k * LN2_LO;
    // |r| <= ln2 / 2: Taylor to r^14 / 14!.
    double term = 1.0LF;
    double sum = 1.0LF;
    for (int n = 1; n <= 14; ++n) {
        term *= r / double(n);
        sum += term;
    }
    return ldexp(sum, int(k));
}

double log_d(double x) {
    if (isnan(x) || x < 0.0LF) return NEG_INF - NEG_INF;
    if (x == 0.0LF) return NEG_INF;
    if (isinf(x)) return x;
    int e;
    double m = frexp(x, e);
    if (m < 0.70710678118654752LF) {
        m *= 2.0LF;
        e -= 1;
    }
    // log m = 2 atanh(z), z = (m - 1) / (m + 1), |z| < 0.172: odd powers to z^25.
    double z = (m - 1.0LF) / (m + 1.0LF);
    double z2 = z * z;
    double pw = z;
    double sum = 0.0LF;
    for (int n = 0; n < 13; ++n) {
        sum += pw / double(2 * n + 1);
        pw *= z2;
    }
    return double(e) * LN2_HI + (double(e) * LN2_LO + 2.0LF * sum);
}
