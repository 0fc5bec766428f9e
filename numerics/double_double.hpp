#pragma once
/// \file double_double.hpp
/// Double-double ("double-word") numbers hi + lo and the few operations numerics/elementary_dd.cpp needs,
/// each with its proven relative error bound, u = 2^-53 (binary64 round-to-nearest, FMA available, no
/// underflow or overflow in any intermediate; the callers' ranges guarantee that).
///
/// A DD is normalised when hi = RN(hi + lo), hence |lo| <= u·|hi|. Every operation takes normalised inputs and
/// returns a normalised result. The bounds are relative to the exact operation on the (exact) input values:
///   add(x, y)    AccurateDWPlusDW (Joldes, Muller & Popescu, "Tight and rigorous error bounds for basic
///                building blocks of double-word arithmetic", ACM TOMS 44(2), 2017, Algorithm 6):
///                |err| <= (3u² + 13u³)·|x + y| < 4u²·|x + y|, whatever the signs (cancellation included).
///   mul(x, y)    DWTimesDW3 (ibid., Algorithm 12, with FMA): |err| <= 5u²·|x·y|.
///   mul(x, d)    DWTimesFP3 (ibid., Algorithm 9, with FMA): |err| <= 2u²·|x·d|.
///   div(x, y)    one correction of the binary64 quotient (proof in docs/numerics.md): |err| <= 12u²·|x/y|.
/// tests/numerics/elementary_dd_test.cpp measures each operation's error against MPFR on random inputs and
/// checks it against these bounds.
#include "numerics/arith.hpp"

namespace roundoff::numerics {

struct DD {
  double hi = 0;
  double lo = 0;
};

/// Fast2Sum: s + e = a + b exactly when |a| >= |b| (or a = 0).
inline DD fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}

inline DD dd_add(DD x, DD y) {
  double sh, sl, th, tl;
  two_sum(x.hi, y.hi, sh, sl);
  two_sum(x.lo, y.lo, th, tl);
  const DD v = fast_two_sum(sh, sl + th);
  return fast_two_sum(v.hi, tl + v.lo);
}

inline DD dd_mul(DD x, DD y) {
  double ch, cl1;
  two_prod(x.hi, y.hi, ch, cl1);
  const double tl0 = x.lo * y.lo;
  const double tl1 = __builtin_fma(x.hi, y.lo, tl0);
  const double cl2 = __builtin_fma(x.lo, y.hi, tl1);
  return fast_two_sum(ch, cl1 + cl2);
}

inline DD dd_mul(DD x, double d) {
  double ch, cl1;
  two_prod(x.hi, d, ch, cl1);
  return fast_two_sum(ch, __builtin_fma(x.lo, d, cl1));
}

inline DD dd_neg(DD x) { return {-x.hi, -x.lo}; }

/// q1 = RN(x.hi/y.hi), residual R = x - q1·y by mul and add, q2 = RN(R.hi/y.hi), result Fast2Sum(q1, q2).
inline DD dd_div(DD x, DD y) {
  const double q1 = x.hi / y.hi;
  const DD r = dd_add(x, dd_neg(dd_mul(y, q1)));
  return fast_two_sum(q1, r.hi / y.hi);
}

/// x·2^e exactly (no underflow or overflow of either part).
inline DD dd_ldexp(DD x, int e) { return {__builtin_ldexp(x.hi, e), __builtin_ldexp(x.lo, e)}; }

}  // namespace roundoff::numerics
