"""Vector exp, log, tanh and erf of f32 in portable vector code (GCC/Clang vector types: any lane
count, any target), the helpers `dojo_exp_f32x16`, ... that codegen/vector_helpers.py defines.

exp, log and tanh are Cephes' range reductions and polynomials, within 1-2 ulp of the correctly
rounded result, with numpy's special values: exp(-inf) = 0, exp(inf) = inf, overflow to inf and
gradual underflow to subnormals and 0; log(0) = -inf, log(negative) = NaN, log(inf) = inf, subnormal
arguments; tanh(+-inf) = +-1; NaN gives NaN.

erf is within 1 ulp of the correctly rounded result (the largest error, over every 16th float32 and
the tails, is in bench/results/erf.md), as glibc's erff is: three polynomials on |x|, chosen per lane,
fitted with float32 coefficients to erf in high precision (a least-squares fit on dense points, each
coefficient rounded to float32 and the later ones refitted around it): x + x P(x^2) below 0.921875,
then a polynomial about a point whose erf is nearly a float32, on [0.921875, 2) and on
[2, 3.9192059), and exactly 1 from 3.9192059 on, the least float whose erf rounds to 1. It is odd
(computed on |x|, the sign copied back), so erf(-0) = -0, erf(+-inf) = +-1, and NaN stays NaN. With or
without fused multiply-adds the error stays under 1 ulp: 0.83 measured with them (every 16th float32,
x86), 0.96 in a simulation without.

Lanes are chosen by masks (a comparison's all-ones lanes), never by a loop over lanes, which GCC
leaves scalar. The helpers are always inlined: GCC otherwise calls one from two places (a loop it
versions), and a vector wider than the target's registers (16 lanes on AVX2) then goes through
memory both ways, which made an erf nest 1.45x slower on AVX2.

`{V}` is the vector type, `{M}` the int32 vector of its lanes' masks, `{N}` the lanes.
"""

# The helpers that compare floats (lanes chosen by masks), which a target whose registers are
# narrower than the vector computes in halves (vector_helpers' `_halved`); erf's masks are integer
# arithmetic, which the compiler splits itself.
F32_MATH_COMPARING = ("exp", "log", "tanh")

# The vector operations one evaluation of each function takes, as the helpers below are written (a
# lane select counts one, a division four), or one where a single instruction does it. A roofline
# counts a call as one flop; the cost model (agent/costmodel/features.py) counts these, for scalar
# calls too, since a call keeps the FMA pipes busy that long: glibc's expf, erff and tanhf took 3.3,
# 9.0 and 11.6 ns an element on a Zen 4, 1.3-2 times these counts at one lane of its peak.
OPERATIONS = {"exp": 18, "log": 40, "tanh": 40, "erf": 55, "sqrt": 6, "abs": 1, "max": 1, "min": 1}

# The helper's C text by function, formatted with V, M and N.
F32_MATH = {
    "exp": """
#if defined(__AVX512F__) && {N} == 16
#include <immintrin.h>
#endif
static inline __attribute__((always_inline)) {V} dojo_exp_f32x{N}({V} x)
{{
#if defined(__AVX512F__) && {N} == 16
    /* the same steps in AVX-512's own instructions: vscalefps multiplies by 2^n, rounding once */
    __m512 v = (__m512)x;
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    n = _mm512_min_ps(_mm512_max_ps(n, _mm512_set1_ps(-150.0f)), _mm512_set1_ps(128.0f)); /* NaN -> -150 */
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.9875691500e-4f), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512 y = _mm512_scalef_ps(p, n);
    __mmask16 tiny = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-104.0f), _CMP_LT_OQ);
    return ({V})_mm512_mask_mov_ps(y, tiny, _mm512_setzero_ps());
#else
    {V} n = x * 1.44269504088896341f + 12582912.0f;
    n = n - 12582912.0f; /* round(x / ln 2) */
    /* 2^n between 2^-150 (0) and 2^128 (inf); a NaN n becomes -150 and its r stays NaN */
    const {V} zero = {{0}};
    n = ({V})((({M})n & (n > -150.0f)) | (({M})(zero - 150.0f) & ~(n > -150.0f)));
    n = ({V})((({M})n & (n < 128.0f)) | (({M})(zero + 128.0f) & ~(n < 128.0f)));
    {V} r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    {V} p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f; /* inf for x = inf or beyond the clamp */
    /* times 2^n as two factors, each a normal float: overflow and subnormals round once */
    {M} k = __builtin_convertvector(n, {M}), k1 = k >> 1, k2 = k - k1;
    {V} y = p * ({V})((k1 + 127) << 23) * ({V})((k2 + 127) << 23);
    return ({V})(({M})y & ~(x < -104.0f)); /* 0 below half the least subnormal, -inf included */
#endif
}}""",
    "log": """
static inline __attribute__((always_inline)) {V} dojo_log_f32x{N}({V} x)
{{
    const {V} zero = {{0}};
    {M} tiny = x < 1.17549435e-38f;
    {V} s = ({V})((({M})(x * 8388608.0f) & tiny) | (({M})x & ~tiny)); /* subnormals scaled by 2^23 */
    {M} bits = ({M})s;
    {M} e = ((bits >> 23) & 0xff) - 126 - (tiny & 23);
    {V} m = ({V})((bits & 0x007fffff) | 0x3f000000); /* s = m 2^e, m in [0.5, 1) */
    {M} low = m < 0.707106781186547524f;
    e = e + low; /* low is -1 where true */
    m = m + ({V})(({M})m & low) - 1.0f;
    {V} z = m * m;
    {V} p = m * 7.0376836292e-2f - 1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m - 1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m - 1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m - 2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    {V} fe = __builtin_convertvector(e, {V});
    {V} y = p * m * z;
    y = y - fe * 2.12194440e-4f;
    y = y - z * 0.5f;
    {V} r = m + y;
    r = r + fe * 0.693359375f;
    {M} special = (x <= 0.0f) | (x != x) | (x == (zero + __builtin_inff()));
    /* log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, log(NaN) = NaN */
    {V} edge = ({V})((({M})(zero - __builtin_inff()) & (x == 0.0f)) | (({M})(zero + __builtin_nanf("")) & (x < 0.0f))
                     | (({M})x & ((x != x) | (x > 0.0f))));
    return ({V})((({M})edge & special) | (({M})r & ~special));
}}""",
    "tanh": """
static inline __attribute__((always_inline)) {V} dojo_tanh_f32x{N}({V} x)
{{
    const {V} zero = {{0}};
    {M} sign = ({M})x & (({M})zero | (int32_t)0x80000000);
    {V} a = ({V})(({M})x & ~sign); /* |x| */
    {V} z = x * x;
    {V} p = z * -5.70498872745e-3f + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    {V} near = p * z * x + x; /* |x| < 0.625 */
    {V} far = 1.0f - 2.0f / (dojo_exp_f32x{N}(a + a) + 1.0f); /* 1 for large |x|, inf included */
    far = ({V})(({M})far | sign);
    {M} small = a < 0.625f;
    {M} keep = small | (x != x); /* NaN stays NaN */
    return ({V})((({M})near & keep) | (({M})far & ~keep));
}}""",
    "erf": """
static inline __attribute__((always_inline)) {V} dojo_erf_f32x{N}({V} x)
{{
    /* odd: computed on a = |x|, the sign put back, so erf(-x) = -erf(x) and erf(-0) = -0 */
    {M} sign = ({M})x & (int32_t)0x80000000;
    {V} a = ({V})(({M})x ^ sign);
    /* a < 0.921875: a + a P(a^2), the small correction added last (subnormals round once or twice) */
    {V} u = a * a;
    {V} p = u * 8.36814579e-05f - 0.000813953229f;
    p = p * u + 0.00520041212f;
    p = p * u - 0.0268589389f;
    p = p * u + 0.112836808f;
    p = p * u - 0.376126319f;
    p = p * u + 0.128379166f;
    {V} small = a * p + a;
    /* 0.921875 <= a < 2: a polynomial in t = a - m, erf(m) within 0.001 ulp of its float (the leading
       coefficient), so the constant term adds no rounding error of its own */
    {V} t = a - 1.45936024f;
    {V} q = t * 8.26644682e-05f + 0.00150763965f;
    q = q * t - 0.00301050325f;
    q = q * t - 0.00381227839f;
    q = q * t + 0.0205596592f;
    q = q * t - 0.0197413322f;
    q = q * t - 0.041088853f;
    q = q * t + 0.145730436f;
    q = q * t - 0.195743144f;
    q = q * t + 0.13412942f;
    q = q * t + 0.960967779f;
    /* 2 <= a < 3.9192059: the same about m = 2.9119122 */
    {V} s = a - 2.9119122f;
    {V} r = s * -1.0303158e-05f + 3.13611308e-05f;
    r = r * s - 9.5045325e-06f;
    r = r * s - 0.000141846293f;
    r = r * s + 0.000490694016f;
    r = r * s - 0.00100767799f;
    r = r * s + 0.00147471717f;
    r = r * s - 0.00158812897f;
    r = r * s + 0.00124702149f;
    r = r * s - 0.000682562648f;
    r = r * s + 0.000234404084f;
    r = r * s + 0.999961793f;
    /* The masks compare a's bits as integers (a >= 0, so they order as the floats do), by the sign of
       a difference: GCC compares a vector wider than the registers (16 lanes on AVX2) lane by lane
       with branches, which random inputs mispredict (3x slower), but it splits shifts and subtractions. */
    {M} bits = ({M})a;
    {M} low = (bits - 0x3f6c0000) >> 31;       /* a < 0.921875 */
    {M} middle = (bits - 0x40000000) >> 31;    /* a < 2 */
    {M} saturated = ~((bits - 0x407ad445) >> 31); /* a >= 3.9192059, the least float whose erf rounds to 1 */
    {M} nan = (0x7f800000 - bits) >> 31;       /* a > inf */
    const {V} zero = {{0}};
    r = ({V})((({M})(zero + 1.0f) & saturated) | (({M})r & ~saturated));
    r = ({V})((({M})q & middle) | (({M})r & ~middle));
    r = ({V})((({M})small & low) | (({M})r & ~low));
    r = ({V})((({M})(a + a) & nan) | (({M})r & ~nan)); /* NaN stays NaN, made quiet as erff does */
    return ({V})(({M})r | sign);
}}""",
}
