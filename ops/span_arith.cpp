// Elementwise + − × ÷ on spans: the binary64 operation rounded once to the compute format (argument in the header).
#include "ops/span_arith.hpp"

#include <bit>
#include <cmath>

namespace roundoff::ops {

namespace {
/// The compute formats and modes the fast path is argued for.
bool admits(const OpPrecision& p) {
  const numerics::Format& f = p.compute;
  return fast_paths() && p.rounding == numerics::Rounding::NearestEven && f.precision <= 25 && f.emin >= -126 &&
         f.emax <= 127 && f.subnormals && f.specials == numerics::Specials::Ieee && !f.saturate;
}
bool same_bits(double x, double y) { return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y); }
}  // namespace

bool arith_span(const Ctx<Emulated>& ctx, ArithOp op, std::span<const double> a, std::span<const double> b,
                std::span<double> out, std::vector<std::uint8_t>& slow) {
  if (!admits(ctx.precision())) return false;
  const std::size_t n = out.size();
  thread_local numerics::RoundingPlan plan(numerics::formats::fp32);
  if (!(plan.format == ctx.precision().compute)) plan = numerics::RoundingPlan(ctx.precision().compute);
  thread_local std::vector<double> ra, rb;
  ra.resize(n);
  rb.resize(n);
  slow.assign(n, 0);
  // Operands that are not values of the compute format (rounding changes them, NaN included) go per element.
  numerics::round_array(plan, numerics::Rounding::NearestEven, a, ra);
  numerics::round_array(plan, numerics::Rounding::NearestEven, b, rb);
  for (std::size_t i = 0; i < n; ++i) slow[i] = !same_bits(ra[i], a[i]) || !same_bits(rb[i], b[i]);
  switch (op) {
    case ArithOp::Add:
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      break;
    case ArithOp::Sub:
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
      break;
    case ArithOp::Mul:
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      break;
    case ArithOp::Div:
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] / b[i];
      break;
  }
  numerics::round_array(plan, numerics::Rounding::NearestEven, out, out);
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i])) slow[i] = 1;
  return true;
}

}  // namespace roundoff::ops
