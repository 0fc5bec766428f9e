#pragma once
/// \file accum_mpfr_twin.hpp
/// "The same algorithm executed in MPFR at the target format": an independent implementation of every
/// Accumulation (orders, fused/unfused products, promotion, the multi-term adder, the exact tile stage, the
/// subnormal flush) for the bit-exactness tests. The flush decides subnormality in MPFR (|v| < 2^emin compared
/// as MPFR numbers), not through the engine's formats code.
///
/// It shares only the Accumulation description with numerics/accumulate.cpp. Each operation is evaluated
/// exactly by MPFR (2400 bits hold any sum or product of binary64 values; a tile's sum of products is held at
/// 4600 bits), then rounded once to the target
/// format by MPFR itself: precision p, mpfr_set_emin(emin − p + 2) with mpfr_subnormalize (MPFR's exponents
/// are IEEE's + 1), and an unbounded emax, so that overflow is decided as IEEE 754 §7.4 says (the unbounded
/// result exceeds max_finite) and then mapped to inf / max_finite / NaN per the format's contract. MPFR gives
/// RNDN, RNDZ, RNDU, RNDD and RNDA; nearest-away, round-to-odd and stochastic rounding are derived from the
/// RZ/RA neighbours (stochastic: up iff draw < ⌊f·2^64⌋, or draw = ⌊f·2^64⌋ when f·2^64 is not an integer, f the
/// exact fraction of the gap). Formats must have subnormals.
#include <mpfr.h>

#include <cstdint>
#include <span>

#include "numerics/accumulate.hpp"

namespace roundoff::test {

struct TwinResult {
  double value = 0;
  std::int64_t overflows = 0;
};

/// Σ x_i under `a`, executed in MPFR.
TwinResult twin_sum(const numerics::Accumulation& a, std::span<const double> x, numerics::StochasticBits bits = {});
/// Σ x_i·y_i under `a`, executed in MPFR; with has_init, `init` is the exact starting value (gemm accumulate).
TwinResult twin_dot(const numerics::Accumulation& a, std::span<const double> x, std::span<const double> y,
                    numerics::StochasticBits bits = {}, bool has_init = false, double init = 0);

/// One rounding of the exact MPFR value v to format f (exposed for the oracle's own tests). Sets *overflow
/// when v is finite and its unbounded rounding exceeds max_finite.
double twin_round(const numerics::Format& f, numerics::Rounding mode, mpfr_srcptr v, std::uint64_t draw,
                  bool* overflow = nullptr);

}  // namespace roundoff::test
