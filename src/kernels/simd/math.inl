// Vectorised f32 transcendental functions, written once over a SIMD traits type V (avx2.inl,
// avx512.inl). Accuracy, checked against double-precision references in the tests: exp, log,
// tanh and sigmoid within about 2 ulp over the whole range; GELU within 1e-6 relative, tails
// included (see normal_parts). On |x| < 4, AVX-512 reads GELU, its derivative and tanh off
// short-range tables (table_polynomial), and log off a table of 32 intervals.
// Included after the traits, by ISA kernel files only.
#include "kernels/simd/math_tables.inl"

namespace cpudl::kernels {
namespace {

template <class V>
struct VectorMath {
  using F = typename V::F;
  using I = typename V::I;

  // x + 1.5 2^23 rounds x (|x| < 2^22) to an integer in the mantissa, round to nearest: the shift
  // is folded into the multiply before it, and one subtraction takes it off (VRNDSCALEPS is two
  // micro-operations).
  static F round_shift() { return V::set1(12582912.0f); }
  static F round_small(F shifted) { return V::sub(shifted, round_shift()); }

  // x = n ln2 + r with n integral and |r| <= ln2/2 (|x| < 2^22), ln2 in two parts (Cody and
  // Waite: n times the first is exact), the reduction of every exponential here.
  static constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  struct Ln2Reduced {
    F n, r;
    F shifted;  // n + round_shift(): n in the low mantissa bits (pow2_of_shifted)
  };
  static Ln2Reduced reduce_by_ln2(F x) {
    const F shifted = V::fma(x, V::set1(kLog2e), round_shift()), n = round_small(shifted);
    return {n, V::fnma(n, V::set1(kLn2Lo), V::fnma(n, V::set1(kLn2Hi), x)), shifted};
  }
  // 2^n for n in [-126, 127] from reduce_by_ln2's `shifted` (1.5 2^23 + n): shifted left by 23
  // only n is left, and the exponent bias makes it 2^n. Two integer operations, against AVX2's
  // nine-operation V::scale_by_pow2 (tanh 1.60 -> 1.84 G values/s in L1 on Zen 4; AVX-512's
  // VSCALEFPS measured the same either way). Where n may leave that range (exp, softmax, GELU's
  // tail), scale_by_pow2 stays: exp behind a range branch measured 0.82x on AVX-512.
  static F pow2_of_shifted(F shifted) {
    return V::bits_to_float(V::add_int(V::shift_left(V::float_to_bits(shifted), 23), V::set1_int(127 << 23)));
  }
  // The same for x = a b, a product never rounded: the rounded one only picks n, and
  // fma(a, b, -n ln2_hi) rounds once (n ln2_hi is exact: ln2_hi has 9 significant bits, |n| < 2^15).
  static Ln2Reduced reduce_product_by_ln2(F a, F b) {
    const F shifted = V::fma(V::mul(a, b), V::set1(kLog2e), round_shift()), n = round_small(shifted);
    return {n, V::fnma(n, V::set1(kLn2Lo), V::fma(a, b, V::mul(n, V::set1(-kLn2Hi)))), shifted};
  }

  // expm1(r) = r + r^2 P(r) on the reduced range |r| <= ln2/2, shared by exp and tanh: P is the
  // degree-4 Chebyshev interpolant of (e^r - 1 - r)/r^2 (scripts/fit-polynomials.py expm1), 8.5e-8
  // relative in float and 7.4e-8 for e^r = 1 + expm1(r), about the rounding itself. It replaced
  // Cephes' expf polynomial (degree 7) in exp and the Taylor series to r^7 in tanh, one FMA each,
  // as these kernels are bound by the FMA pipes on a Zen 4 core (docs/ARCHITECTURE.md, with the
  // speeds). exp over every float in [-87, 88.7]: at most 1.08 ulp (Cephes': 1.01).
  static F expm1_reduced(F r) {
    F p = V::set1(1.392617589e-03f);
    p = V::fma(p, r, V::set1(8.363173343e-03f));
    p = V::fma(p, r, V::set1(4.166655615e-02f));
    p = V::fma(p, r, V::set1(1.666657776e-01f));
    p = V::fma(p, r, V::set1(0.5f));
    return V::fma(p, V::mul(r, r), r);
  }

  // exp(x) = 2^n (1 + expm1(r)), x = n ln2 + r, |r| <= ln2/2, for x already in [-104, 89]. 2^n is
  // applied exactly for n from -150 (denormal results) to 128 (overflow to inf):
  // V::scale_by_pow2. NaN propagates through the arithmetic.
  static F exp_of_clamped(F x) {
    const Ln2Reduced reduced = reduce_by_ln2(x);
    return V::scale_by_pow2(V::add(expm1_reduced(reduced.r), V::set1(1.0f)), reduced.n);
  }
  // The clamp keeps NaN: MAX and MIN return their second operand when either is NaN.
  static F exp(F x) { return exp_of_clamped(V::min(V::set1(89.0f), V::max(V::set1(-104.0f), x))); }
  // exp(x) for x <= 0 (or NaN), the shape of sigmoid's exp(-|x|): only the lower clamp applies.
  static F exp_of_nonpositive(F x) { return exp_of_clamped(V::max(V::set1(-104.0f), x)); }

  // log(x) = e ln2 + log(m), m in [sqrt(1/2), sqrt(2)) (Cephes logf polynomial).
  static F log_polynomial(F e, F m) {
    const F f = V::sub(m, V::set1(1.0f));
    F p = V::set1(7.0376836292e-2f);
    p = V::fma(p, f, V::set1(-1.1514610310e-1f));
    p = V::fma(p, f, V::set1(1.1676998740e-1f));
    p = V::fma(p, f, V::set1(-1.2420140846e-1f));
    p = V::fma(p, f, V::set1(1.4249322787e-1f));
    p = V::fma(p, f, V::set1(-1.6668057665e-1f));
    p = V::fma(p, f, V::set1(2.0000714765e-1f));
    p = V::fma(p, f, V::set1(-2.4999993993e-1f));
    p = V::fma(p, f, V::set1(3.3333331174e-1f));
    const F f2 = V::mul(f, f);
    F y = V::mul(V::mul(p, f2), f);
    y = V::fma(e, V::set1(-2.12194440e-4f), y);
    y = V::fnma(f2, V::set1(0.5f), y);
    return V::fma(e, V::set1(0.693359375f), V::add(f, y));
  }

  // log of vectors whose lanes are all normal, positive and finite (the common case, one
  // predictable branch): the bits less those of sqrt(1/2) give e in their exponent field
  // (arithmetic shift) and m's mantissa, with no fold and no special-value selects (about 26
  // operations a vector where the general path takes 42).
  static F log(F x) {
    // x above the largest denormal and below inf; both compares are false for NaN.
    if (!V::all(V::mask_and(V::greater(x, V::bits_to_float(V::set1_int(0x007fffff))),
                            V::less(x, V::set1(__builtin_inff())))))
      return log_general(x);
    const I t = V::sub_int(V::float_to_bits(x), V::set1_int(0x3f3504f3));  // sqrt(1/2)
    const F e = V::to_float(V::shift_right_arith(t, 23));
    const I mantissa = V::and_int(t, V::set1_int(0x007fffff));
    const F m = V::bits_to_float(V::add_int(mantissa, V::set1_int(0x3f3504f3)));
    if constexpr (V::kLookup32) {
      // m in one of 32 intervals by its top mantissa bits, each with a centre c (1 for the one
      // holding 1, so log keeps its relative accuracy there): log m = log1p(m/c - 1) - log(1/c),
      // |m/c - 1| < 1/64, from math_tables.inl (scripts/fit-polynomials.py tables; each 1/c
      // chosen so that log(1/c) is nearly a float). Two lookups and 7 FMA-pipe operations against
      // log_polynomial's 14 (the speed-up: docs/ARCHITECTURE.md); every normal float within
      // 1.14 ulp, where log_polynomial measures 0.80.
      const I j = V::shift_right_logical(mantissa, 18);
      const F r = V::fma(m, V::lookup32(kLogInverseTable, j), V::set1(-1.0f));  // m/c - 1, one rounding
      F p = V::fma(V::set1(kLog1pPolynomial[2]), r, V::set1(kLog1pPolynomial[1]));
      p = V::fma(p, r, V::set1(kLog1pPolynomial[0]));
      const F log1p_r = V::fma(p, V::mul(r, r), r);
      // e ln2_hi is exact (ln2_hi has 9 significant bits): the sum rounds once more at the end.
      const F low = V::add(V::fma(e, V::set1(kLn2Lo), V::lookup32(kLogOfCentreTable, j)), log1p_r);
      return V::fma(e, V::set1(kLn2Hi), low);
    }
    return log_polynomial(e, m);
  }

  // Any input: denormals are scaled into the normal range first; log(0) = -inf, log(x<0) = NaN,
  // log(inf) = inf, NaN stays NaN.
  static F log_general(F x) {
    const F input = x;
    const typename V::M tiny = V::less(x, V::set1(1.17549435e-38f));
    x = V::select(tiny, V::mul(x, V::set1(8388608.0f)), x);  // 2^23
    const I bits = V::float_to_bits(x);
    I exponent = V::sub_int(V::shift_right_logical(bits, 23), V::set1_int(127));
    F m = V::bits_to_float(V::or_int(V::and_int(bits, V::set1_int(0x007fffff)), V::set1_int(0x3f800000)));
    // m in [1, 2): fold to [sqrt(1/2), sqrt(2)).
    const typename V::M big = V::greater(m, V::set1(1.41421356237f));
    m = V::select(big, V::mul(m, V::set1(0.5f)), m);
    exponent =
        V::add_int(exponent, V::float_to_bits(V::select(big, V::bits_to_float(V::set1_int(1)), V::zero())));
    F e = V::to_float(exponent);
    e = V::select(tiny, V::sub(e, V::set1(23.0f)), e);
    F result = log_polynomial(e, m);
    result = V::select(V::equal(input, V::zero()), V::set1(-__builtin_inff()), result);
    result = V::select(V::less(input, V::zero()), V::set1(__builtin_nanf("")), result);
    result = V::select(V::equal(input, V::set1(__builtin_inff())), input, result);
    return V::select(V::is_nan(input), input, result);
  }

  // Short-range tables. Where V has a 32-entry lookup (kLookup32) and every lane of a vector lies
  // in |x| < 4, which holds for nearly every activation, GELU, its derivative and tanh skip the
  // exponential and the division: each is read off one degree-5 polynomial per interval of width
  // 1/8 (math_tables.inl, from scripts/fit-polynomials.py tables, which prints their errors in
  // float: GELU's tail 1.1e-7 relative, its derivative 2.7e-8 absolute, tanh 1.3e-7 relative).
  // That is 6 lookups and 5 FMAs, which a Zen 4 core runs on its FMA pipes at one a cycle, against
  // about 31 operations there for GELU's normal_parts and 24 for tanh; the interval's index and
  // midpoint come from the bits of |x| + 4 by integer operations and FADDs, which run beside them.
  // Sigmoid has no table: its general path measured as fast as one (docs/ARCHITECTURE.md). A vector with any
  // lane outside (or NaN) takes the general path. The bound stays below 4 so that |x| + 4 never rounds up to
  // 8, whose exponent would break the index. GELU and its derivative branch to the tables in themselves, not
  // inside half_erfc_of_abs and normal_parts, because the table path needs no clamp of |x| to 15, which
  // measurably slowed it (docs/ARCHITECTURE.md).
  static constexpr float kTableEnd = 3.998f;
  static bool within_table(F ax) { return V::all(V::less(ax, V::set1(kTableEnd))); }
  static F table_polynomial(const float (&table)[6][32], F ax) {
    // |x| + 4 lies in [4, 8): the top 5 bits of its mantissa (bits 18-22) are j = floor(8 |x|), and
    // lookup32 reads only the low 5 bits of the shifted word.
    const I bits = V::float_to_bits(V::add(ax, V::set1(4.0f)));
    const I j = V::shift_right_logical(bits, 18);
    // The midpoint (j + 1/2)/8, exactly: 4 + it has j's bits and bit 17 set. s = ax - midpoint is
    // exact too (within a factor of 2, Sterbenz) but in the first interval, where its rounding is
    // far below the functions' own.
    const F mid =
        V::sub(V::bits_to_float(V::or_int(V::and_int(bits, V::set1_int(static_cast<int>(0xfffc0000u))),
                                          V::set1_int(1 << 17))),
               V::set1(4.0f));
    const F s = V::sub(ax, mid);
    F p = V::lookup32(table[5], j);
    for (int k = 4; k >= 0; --k) p = V::fma(p, s, V::lookup32(table[k], j));
    return p;
  }

  // tanh(|x|) = E / (E + 2) with E = expm1(2|x|), the sign put back: one chain with no cancellation
  // anywhere, so no second polynomial for small x and no select. 2|x| = n ln2 + r, and
  // E = 2^n (1 + q) - 1 = fma(2^n, q, 2^n - 1) with q = expm1(r) = r + r^2 P(r) (expm1_reduced,
  // 8.5e-8 relative on |r| <= ln2/2), which is E itself when n = 0 (small x keeps
  // its relative accuracy down to the denormals). The quotient is the hardware estimate of
  // 1/(E + 2) with one Markstein correction, its residual E - y0 (E + 2) formed without rounding
  // E + 2 (rounded, it cost small x another ulp). 2|x| is capped at 40 (tanh is 1 in float from
  // 9.01), so 2^n stays finite; NaN propagates (MIN returns its second operand). Over every float
  // in [-12, 12], AVX-512 and AVX2: at most 1.82 ulp (1.66 with the Taylor polynomial), never above
  // 1 in magnitude.
  //
  // It replaced the earlier form -- 1 - 2/(e^2|x| + 1) above 0.625 and an odd polynomial below,
  // both computed for every lane and selected: about 34 operations a vector against 24, 1.33 ulp
  // -- where tanh is bound by the FMA pipes (speeds: docs/ARCHITECTURE.md). A single rational
  // x P(x^2) / Q(x^2) (17 operations) is faster but measured 5.2-5.9 ulp in float and returned
  // values above 1: the roundings of P, Q and the ratio add up.
  static F tanh(F x) {
    const F ax = V::abs(x);
    if constexpr (V::kLookup32) {  // tanh = |x| (tanh(|x|)/|x|), the sign put back
      if (within_table(ax))
        return V::bit_or(V::mul(ax, table_polynomial(kTanhRatioTable, ax)), V::sign_bit(x));
    }
    const F t = V::min(V::set1(40.0f), V::add(ax, ax));
    const auto [n, r, shifted] = reduce_by_ln2(t);
    const F q = expm1_reduced(r);
    const F s = pow2_of_shifted(shifted);  // n in [0, 58]
    const F e = V::fma(s, q, V::sub(s, V::set1(1.0f)));
    const F r0 = V::reciprocal_estimate(V::add(e, V::set1(2.0f)));
    const F y0 = V::mul(e, r0);
    const F residual = V::fnma(y0, e, V::fnma(V::set1(2.0f), y0, e));
    return V::bit_or(V::fma(residual, r0, y0), V::sign_bit(x));
  }

  // 1/(1 + e^-x) for x >= 0 and e^x/(1 + e^x) below, so the negative tail keeps its relative
  // accuracy down to denormal results instead of collapsing to 0 when e^-x overflows. 1 + e is
  // in [1, 2]: the reciprocal needs no division.
  static F sigmoid(F x) {
    const F e = exp_of_nonpositive(V::sub(V::zero(), V::abs(x)));
    const F s = V::reciprocal(V::add(V::set1(1.0f), e));
    return V::select(V::less(x, V::zero()), V::mul(e, s), s);
  }

  // The standard normal density and tail at 0 <= ax <= 15 (ax = |x|), in one pass sharing one
  // exponential: exp(-x^2/2) = 2^n m, and q = erfcx(ax/sqrt2)/2 (erfcx(z) = e^(z^2) erfc(z)), so
  // that the tail erfc(ax/sqrt2)/2 = 2^n (m q) and the density phi(x) = 2^n m / sqrt(2 pi). Both
  // GELU and its derivative are bound by the count of these operations (about 37 and 40 a vector,
  // at two vector operations a cycle on a 2-port AVX-512 core), so they are written for few:
  // - q = u g(u) with u = 1/(2 + ax/sqrt2) (the reciprocal estimate and one Newton step) and g a
  //   degree-8 polynomial (Estrin's scheme, half of Horner's depth) fitted by
  //   scripts/fit-polynomials.py normal-tail: q within 1.4e-7 relative on the whole range, where Numerical
  //   Recipes' erfc fit t exp(-z^2 + P(t)) needs an exponential of its own for the same;
  // - x^2/2 is never rounded before the reduction: reduce_product_by_ln2 takes -ax/2 times ax (a
  //   rounded x/sqrt2 squared near 20 would carry 2e-6 relative error into GELU's tail), one
  //   operation fewer than splitting x^2 into a rounded part and its exact remainder;
  // - the exponential's argument is never positive: no overflow clamp and no NaN select, and
  //   1e-6 relative needs only degree 6 (Taylor truncation < 1.2e-7 on |r| <= ln2/2);
  // - 2^n is applied last (V::scale_by_pow2), so results in the denormal range round once.
  struct NormalParts {
    F m, n, q;
  };
  static NormalParts normal_parts(F ax) {
    const F u = V::reciprocal(V::fma(ax, V::set1(0.70710678118654752f), V::set1(2.0f)));
    const F u2 = V::mul(u, u), u4 = V::mul(u2, u2), u8 = V::mul(u4, u4);
    const F g01 = V::fma(V::set1(5.649416447e-01f), u, V::set1(2.820813656e-01f));
    const F g23 = V::fma(V::set1(1.645984888e+00f), u, V::set1(9.694629312e-01f));
    const F g45 = V::fma(V::set1(9.255300522e+00f), u, V::set1(-5.459433794e-01f));
    const F g67 = V::fma(V::set1(3.704574203e+01f), u, V::set1(-3.181600952e+01f));
    const F g =
        V::fma(V::set1(-1.537727547e+01f), u8, V::fma(V::fma(g67, u2, g45), u4, V::fma(g23, u2, g01)));
    const Ln2Reduced reduced = reduce_product_by_ln2(V::mul(V::set1(-0.5f), ax), ax);  // -x^2/2, -ax/2 exact
    const F n = reduced.n, r = reduced.r;
    const F r2 = V::mul(r, r);
    const F e46 =
        V::fma(V::set1(1.0f / 720.0f), r2, V::fma(V::set1(1.0f / 120.0f), r, V::set1(1.0f / 24.0f)));
    const F e25 = V::fma(e46, r2, V::fma(V::set1(1.0f / 6.0f), r, V::set1(0.5f)));
    return {V::fma(e25, r2, V::add(r, V::set1(1.0f))), n, V::mul(u, g)};  // n >= -163
  }

  // erfc(ax/sqrt2)/2, the standard normal tail, for 0 <= ax <= 15.
  static F half_erfc_of_abs(F ax) {
    const NormalParts p = normal_parts(ax);
    return V::scale_by_pow2(V::mul(p.m, p.q), p.n);
  }

  // |x| capped at 15, where the normal tail is below float's smallest denormal; the cap also
  // keeps an infinite x away from inf - inf. NaN turns into the cap here (min returns its second
  // operand) and is restored by the caller's use of x itself.
  static F abs_for_normal_tail(F x) { return V::min(V::abs(x), V::set1(15.0f)); }

  // GELU (erf form, PyTorch's default): x Phi(x) = -|x| h below 0 and x - |x| h above, h the
  // tail (x = -inf gives 0, +inf stays inf, NaN stays NaN through x).
  // On the short range, x Phi(x) from the table's tail the same way.
  static F gelu(F x) {
    if constexpr (V::kLookup32) {
      const F ax = V::abs(x);
      if (within_table(ax)) return V::fnma(ax, table_polynomial(kNormalTailTable, ax), V::max(V::zero(), x));
    }
    const F ax = abs_for_normal_tail(x);
    return V::fnma(ax, half_erfc_of_abs(ax), V::max(V::zero(), x));
  }

  // d gelu/dx = Phi(x) + x phi(x): with h the tail and d = h - |x| phi = 2^n m (q - |x|/sqrt(2pi)),
  // it is d below 0 and 1 - d above. x is clamped to [-15, 15] with NaN kept (MAX and MIN return
  // their second operand when either is NaN), so the infinities take the limits 0 and 1.
  static F gelu_derivative(F x) {
    if constexpr (V::kLookup32) {
      const F ax = V::abs(x);
      if (within_table(ax)) {
        const F d = table_polynomial(kNormalTailMinusDensityTable, ax);
        return V::select(V::less(x, V::zero()), d, V::sub(V::set1(1.0f), d));
      }
    }
    const F ax = V::abs(V::min(V::set1(15.0f), V::max(V::set1(-15.0f), x)));
    const NormalParts p = normal_parts(ax);
    const F d = V::scale_by_pow2(V::mul(p.m, V::fnma(ax, V::set1(0.39894228040143268f), p.q)), p.n);
    return V::select(V::less(x, V::zero()), d, V::sub(V::set1(1.0f), d));
  }
};

}  // namespace
}  // namespace cpudl::kernels
