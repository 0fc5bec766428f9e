#pragma once
/// \file elementary_dd_span.hpp
/// exp and sigmoid over spans, correctly rounded to binary64 under round-to-nearest-even, vectorised, bit for
/// bit equal to the scalar numerics::elementary.
///
/// How. numerics::elementary at binary64 returns the correctly rounded f(x) (numerics/elementary_dd.hpp's
/// double-double enclosure when its bound decides the rounding, MPFR otherwise). Here each SIMD lane with
/// |x| <= 700 (exp) or |x| <= 600 (sigmoid) evaluates the same double-double enclosure — the very operations of
/// elementary_dd.cpp's exp_dd / sigmoid_dd in the same order, IEEE binary64 + − × ÷ and FMA only, so the lane's
/// (hi, lo, scale) are the scalar's bits and its proven bound |(hi + lo)·2^scale − f(x)| <= ε|f(x)| holds
/// (ε = 2^-102 exp, 2^-100 sigmoid; docs/numerics.md) — and then rounds it by a test in binary64: with
/// δ = 4ε·hi >= 2ε|hi + lo| (hi + lo is normalised: |lo| <= 2^-53·hi), f(x) lies in [hi − (|lo| + δ),
/// hi + (|lo| + δ)]; when RN(|lo| + δ) is below half the gap from hi to its lower neighbour (2^(E−53) for hi in
/// [2^E, 2^(E+1)), 2^(E−54) when hi = 2^E), so is |lo| + δ (that half gap is a binary64 value and RN is monotone),
/// the interval lies strictly inside hi's rounding interval (the gap above is never smaller), and
/// RN(f(x)) = hi; the result hi·2^scale is exact because the lane domain keeps it normal (hi in [0.49, 2),
/// 2^scale in [2^-1010, 2^1010]). Every other lane — the test fails (f(x) within about 2^-46 relative of a
/// midpoint), x outside the lane domain, NaN, ±inf — is computed by numerics::elementary itself, so the span
/// equals the per-element calls whatever the test decides. Tiers: AVX-512 (8 lanes) and AVX2 + FMA (4 lanes),
/// chosen by KernelOptions::isa(); Isa::None or another format or mode: the per-element calls.
///
/// tests/numerics/elementary_dd_span_test.cpp checks the lanes' enclosures against evaluate_dd bit for bit and
/// the span against numerics::elementary on random, edge and near-midpoint inputs at every tier; the
/// Exhaustive test runs millions more.
#include <span>

#include "numerics/arith.hpp"
#include "numerics/kernel_options.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

/// True when elementary_dd_span takes (f, plan, mode) in lanes: exp or sigmoid, binary64, nearest-even, and
/// opts.isa() at least AVX2.
bool elementary_dd_span_applies(Elementary f, const RoundingPlan& plan, Rounding mode, const KernelOptions& opts);

/// out[i] = elementary(plan, NearestEven, f, in[i]) for every i when elementary_dd_span_applies(...) (then returns
/// true); returns false otherwise, writing nothing. out may alias in exactly; sizes must be equal.
bool elementary_dd_span(const RoundingPlan& plan, Rounding mode, Elementary f, std::span<const double> in,
                        std::span<double> out, const KernelOptions& opts);

}  // namespace roundoff::numerics
