// Elementwise + − × ÷ on spans: the binary64 operation rounded once to the compute format (argument in the header).
#include "ops/span_arith.hpp"

#include <bit>
#include <cmath>

#include "numerics/round_span.hpp"

namespace roundoff::ops {

namespace {
/// The compute formats and modes the fast path is argued for.
bool admits(const Ctx<Emulated>& ctx) {
  const OpPrecision& p = ctx.precision();
  const numerics::Format& f = p.compute;
  return ctx.fast_paths() && p.rounding == numerics::Rounding::NearestEven && f.precision <= 25 && f.emin >= -126 &&
         f.emax <= 127 && f.subnormals && f.specials == numerics::Specials::Ieee && !f.saturate;
}
bool same_bits(double x, double y) { return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y); }
numerics::SpanOp span_op(ArithOp op) {
  switch (op) {
    case ArithOp::Add: return numerics::SpanOp::Add;
    case ArithOp::Sub: return numerics::SpanOp::Sub;
    case ArithOp::Mul: return numerics::SpanOp::Mul;
    case ArithOp::Div: return numerics::SpanOp::Div;
  }
  return numerics::SpanOp::Add;
}
}  // namespace

bool arith_span(const Ctx<Emulated>& ctx, ArithOp op, std::span<const double> a, std::span<const double> b,
                std::span<double> out, std::vector<std::size_t>& slow) {
  if (!admits(ctx)) return false;
  const std::size_t n = out.size();
  const bool bcast = b.size() == 1 && n != 1;
  thread_local numerics::RoundingPlan plan(numerics::formats::fp32);
  if (!(plan.format == ctx.precision().compute)) plan = numerics::RoundingPlan(ctx.precision().compute);
  slow.clear();
  // One fused SIMD pass when the CPU has it (numerics/round_span.hpp: the same roundings as round_array).
  // ftz all: the flush in compute after the rounding, as Ctx's add/sub/mul/div do (the slow elements are
  // recomputed by them afterwards).
  if (numerics::op_round_avx512(plan, span_op(op), a.data(), b.data(), bcast, out.data(), n, slow, ctx.exec().kernels) ||
      numerics::op_round_avx2(plan, span_op(op), a.data(), b.data(), bcast, out.data(), n, slow, ctx.exec().kernels)) {
    ctx.flush_computed(out);
    return true;
  }
  thread_local std::vector<double> ra, rb, bs;
  if (bcast) {
    bs.assign(n, b[0]);
    b = std::span<const double>(bs);
  }
  ra.resize(n);
  rb.resize(n);
  // Operands that are not values of the compute format (rounding changes them, NaN included) go per element.
  numerics::round_array(plan, numerics::Rounding::NearestEven, a, ra);
  numerics::round_array(plan, numerics::Rounding::NearestEven, b, rb);
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
    if (!same_bits(ra[i], a[i]) || !same_bits(rb[i], b[i]) || !std::isfinite(out[i])) slow.push_back(i);
  ctx.flush_computed(out);
  return true;
}

}  // namespace roundoff::ops
