// RoPE angle tables (the only op whose two backends differ in how a constant is formed: f_i in binary64
// rounded to compute vs f_i in MPFR) and the explicit instantiations.
#include "ops/rope.hpp"

#include <cmath>

namespace roundoff::ops {

namespace {
double inv_freq_binary64(std::int64_t i, std::int64_t hs, double base) {
  return std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(hs));
}
Ref inv_freq_ref(std::int64_t i, std::int64_t hs, double base) {
  return boost::multiprecision::pow(Ref(base), Ref(-2 * i) / Ref(hs));
}
double inv_freq(const Ctx<Emulated>& ctx, std::int64_t i, std::int64_t hs, double base) {
  return ctx.c(inv_freq_binary64(i, hs, base));
}
Ref inv_freq(const Ctx<Reference>&, std::int64_t i, std::int64_t hs, double base) { return inv_freq_ref(i, hs, base); }
}  // namespace

template <class A>
void rope_angles(std::span<typename A::Value> cos_t, std::span<typename A::Value> sin_t, std::int64_t T,
                 std::int64_t hs, double base, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const std::int64_t H = hs / 2;
  std::vector<V> f(static_cast<std::size_t>(H));
  for (std::int64_t i = 0; i < H; ++i) f[static_cast<std::size_t>(i)] = inv_freq(ctx, i, hs, base);
  for_units(T, sel, [&](std::int64_t p) {
    const V pos = ctx.c(static_cast<double>(p));
    for (std::int64_t i = 0; i < H; ++i) {
      const auto e = static_cast<std::size_t>(p * H + i);
      Steps<A> ce(ctx, Tensor::Cos, e), se(ctx, Tensor::Sin, e);  // scalar: its own reference (ops/steps.hpp)
      const V theta = ce.mul(pos, f[static_cast<std::size_t>(i)]);
      cos_t[e] = ce.store(ce.cos(theta));
      sin_t[e] = se.store(se.sin(theta));
    }
  });
}

ROUNDOFF_ROPE_DECL(, Emulated)
ROUNDOFF_ROPE_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void rope_forward(std::span<float> y, std::span<const float> x, std::span<const float> cos_t,
                  std::span<const float> sin_t, AttnShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  rope_forward_io<Emulated, float>(y, x, cos_t, sin_t, s, ctx, sel);
}
void rope_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> cos_t,
                        std::span<const float> sin_t, AttnShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  rope_backward_data_io<Emulated, float>(dx, dy, cos_t, sin_t, s, ctx, sel);
}

}  // namespace roundoff::ops
