#pragma once
/// \file elementary_span.hpp
/// Elementary functions over spans, vectorised, bit for bit equal to the scalar numerics::elementary.
///
/// Contract: elementary_span(plan, mode, f, in, out, draws) writes out[i] = elementary(plan, mode, f, in[i],
/// draws[i]) (draws[i] read only under Rounding::Stochastic) for every i, bit for bit, whatever the CPU.
///
/// binary64 under nearest-even: exp and sigmoid go to numerics/elementary_dd_span.hpp
/// (double-double lanes, their own rounding test, the same per-element fallback).
///
/// How (argument and bound in docs/numerics.md, "Elementary functions on spans"): for exp and sigmoid, a format
/// of precision p <= 24 and |x| <= kSpanMaxArg, each lane evaluates f(x) in binary64 with its own range
/// reduction and polynomial (elementary_core), whose relative error is at most elementary_core_error(f)
/// (derived, not measured). The lane's interval [y - B, y + B] with B = (ε_f + 2^-47)·y then contains f(x);
/// rounding is monotone in every deterministic mode, so when both ends round to the same value that value is
/// round(f(x)), the correctly rounded result numerics::elementary also returns. Under stochastic rounding
/// numerics::elementary rounds glibc's binary64 value g with the draw, after checking that g ± 9·2^-52·g lies
/// strictly between two neighbours; the 2^-47 margin makes [y - B, y + B] contain that whole check interval
/// (given glibc's 8-ulp bound, kLibmUlps, the premise numerics::elementary already rests on), so when the
/// interval lies strictly between two neighbours and both ends round alike with the lane's draw, that is the
/// scalar result (stochastic rounding with a fixed draw is monotone too). Every other lane — a test that
/// fails, NaN, ±inf, |x| > kSpanMaxArg, other functions or formats with p > 24 — is computed by
/// numerics::elementary itself. The binary64 evaluation uses only correctly rounded IEEE operations (+ − × ÷
/// and fused multiply-add) in the same order in every tier (AVX-512F 8 lanes, AVX2+FMA 4 lanes, scalar), so
/// the tiers agree bit for bit and correctness never depends on the instruction set; the tier is chosen at run
/// time as the GEMM kernels' is (KernelOptions::isa(): kernels::detected_isa capped by the caller's isa_limit).
///
/// tests/numerics/elementary_span_test.cpp checks every fp16 and bf16 input in every mode (stochastic with
/// per-element draws) against numerics::elementary, a large sample of binary32 inputs and edge classes, the
/// error bound against MPFR, and the tiers against each other; the Exhaustive test runs every binary32 input.
#include <cstdint>
#include <span>

#include "numerics/arith.hpp"
#include "numerics/kernel_options.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

/// out[i] = elementary(plan, mode, f, in[i], draws[i]) for every i (draws: one per element under
/// Rounding::Stochastic, ignored otherwise and may then be empty). out may alias in exactly. Throws
/// std::invalid_argument when the sizes differ.
void elementary_span(const RoundingPlan& plan, Rounding mode, Elementary f, std::span<const double> in,
                     std::span<double> out, std::span<const std::uint64_t> draws = {},
                     const KernelOptions& opts = {});

/// True when elementary_span has a vectorised evaluation for f (exp and sigmoid) and the plan's format
/// (precision <= 24); otherwise it calls numerics::elementary per element.
bool elementary_span_vectorised(Elementary f, const RoundingPlan& plan);

/// Largest |x| the vectorised evaluation takes: f(x) stays within [2^-996, 2^996].
inline constexpr double kSpanMaxArg = 690.0;

/// The binary64 evaluation (exp and sigmoid only): y[i] with |y[i] - f(x[i])| <= elementary_core_error(f)·f(x[i])
/// for |x[i]| <= kSpanMaxArg, NaN for other x[i] (NaN included), on the given tier (capped at what the CPU
/// has). Exposed for the tests of the bound and of the tiers.
void elementary_core(Elementary f, std::span<const double> x, std::span<double> y, kernels::Isa isa);
/// ε_f, the derived relative error bound of elementary_core (docs/numerics.md).
double elementary_core_error(Elementary f);

}  // namespace roundoff::numerics
