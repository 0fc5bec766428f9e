#pragma once
/// \file adamw.hpp
/// AdamW (OpKind::AdamW), llm.c form with bias correction and decoupled weight decay:
///   g ← g·grad_scale (unscale),  m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²,
///   m̂ = m/(1−β1^t),  v̂ = v/(1−β2^t),  w ← w − lr·(m̂/(√v̂ + ε) + λ·w).
/// Rounding contract: every operation one rounding to the AdamW compute format; constants (β1, 1−β1,
/// 1−β1^t, ε, λ, lr, grad_scale) rounded to compute (so ε = 1e-8 is 0 in an fp16 compute format); m, v and
/// w stored in their tensor-role formats (Policy::storage_for(AdamM / AdamV / MasterWeight)); the optional
/// working copy in the Weight role format. Unit (Select) = one element.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>

#include "ops/backend.hpp"

namespace roundoff::ops {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_scale = 1.0;  ///< multiplies the gradient first (1 / loss scale)
};

/// Rounding plans of the tensor roles AdamW writes.
struct AdamWFormats {
  numerics::RoundingPlan master, m, v, weight;
  explicit AdamWFormats(const Policy& p)
      : master(p.storage_for(TensorRole::MasterWeight)),
        m(p.storage_for(TensorRole::AdamM)),
        v(p.storage_for(TensorRole::AdamV)),
        weight(p.storage_for(TensorRole::Weight)) {}
};

namespace detail {
/// AdamW's constants, each a binary32 value (a compute-format constant under an fp32 compute format).
struct AdamWBinary32 {
  float b1, b2, ob1, ob2, c1, c2, eps, wd, lr, gs;
  bool scale;  ///< grad_scale != 1: g is multiplied by gs first
  bool flush_stored = false;  ///< ftz out or all: m, v and the master (fp32 roles) flushed in fp32 when stored
  bool flush_all = false;     ///< ftz all: every operation's result flushed in fp32 too
};
/// Elements per block of the binary32 path (a multiple of 8).
inline constexpr std::size_t kAdamWBlock = 2048;
/// True when the running CPU has the AVX2 the binary32 path needs and opts.isa_limit allows AVX2.
bool adamw_binary32_supported(const numerics::KernelOptions& opts);
/// The binary32 path of adamw_update on elements [0, n), n ≤ kAdamWBlock, 8 lanes at a time (AVX2; the
/// elements of a last group of fewer than 8 are left to the scalar path): every operation
/// of the update is the hardware binary32 operation (vaddps, vmulps, vdivps, vsqrtps; no FMA), in the order
/// and with the operands of the scalar definition. Under compute = fp32 with nearest-even the scalar path
/// takes exactly these operations (Ctx's native path) whenever every operand is a binary32 value and every
/// result is finite, and the stores to fp32 master/m/v of binary32 values are the identity (then the ftz flushes,
/// which the flags reproduce: store_to's flush of m, v and w in fp32, and ftz all's flush of each operation's
/// result, each applied where the scalar path applies it, before the value is used). So an element is
/// written here only when w, m, v, g are binary32 values and every intermediate result is finite; bit l of
/// bad[i / 8] (i = 8·(i / 8) + l) is set, and w, m, v left untouched, for each other element, which the caller
/// recomputes on the scalar path.
void adamw_binary32(double* w, double* m, double* v, const double* g, std::size_t n, const AdamWBinary32& c,
                    std::uint8_t* bad);
}  // namespace detail

/// Updates w (master), m, v (n) in place from g (n) at step t ≥ 1; writes the working copy `weights` (n)
/// when it is non-empty.
///
/// Fast path (Emulated, fast_paths() on, all units, compute fp32 with nearest-even (Ctx::binary32_compute;
/// the kernel applies ftz's flushes itself), master/m/v roles fp32, AVX2): detail::adamw_binary32 on blocks of kAdamWBlock
/// elements, the elements it leaves on the scalar path, the working copy through store_to_array. Bit-identical
/// to the scalar path (argument at detail::adamw_binary32; tests/ops/span_ops_test.cpp compares the two).
template <class A>
void adamw_update(std::span<typename A::Value> w, std::span<typename A::Value> m, std::span<typename A::Value> v,
                  std::span<const typename A::Value> g, std::span<typename A::Value> weights, const AdamWConfig& cfg,
                  std::int64_t t, const AdamWFormats& f, const Ctx<A>& ctx, Select sel = {}) {
  const auto b1 = ctx.c(cfg.beta1), b2 = ctx.c(cfg.beta2), ob1 = ctx.c(1.0 - cfg.beta1), ob2 = ctx.c(1.0 - cfg.beta2);
  const auto c1 = ctx.c(1.0 - std::pow(cfg.beta1, static_cast<double>(t)));
  const auto c2 = ctx.c(1.0 - std::pow(cfg.beta2, static_cast<double>(t)));
  const auto eps = ctx.c(cfg.eps), wd = ctx.c(cfg.weight_decay), lr = ctx.c(cfg.lr), gs = ctx.c(cfg.grad_scale);
  const auto update = [&](std::int64_t i) {
    const auto e = static_cast<std::size_t>(i);
    const auto k = [e](unsigned slot) { return key(Tensor::W, e, slot); };  // all roundings of parameter e
    auto gi = g[e];
    if (cfg.grad_scale != 1.0) gi = ctx.mul(gi, gs, k(0));
    const auto mi = ctx.store_to(f.m, ctx.add(ctx.mul(b1, m[e], k(1)), ctx.mul(ob1, gi, k(2)), k(3)), k(4));
    const auto g2 = ctx.mul(gi, gi, k(5));
    const auto vi = ctx.store_to(f.v, ctx.add(ctx.mul(b2, v[e], k(6)), ctx.mul(ob2, g2, k(7)), k(8)), k(9));
    const auto mhat = ctx.div(mi, c1, k(10)), vhat = ctx.div(vi, c2, k(11));
    const auto step =
        ctx.add(ctx.div(mhat, ctx.add(ctx.sqrt(vhat, k(12)), eps, k(13)), k(14)), ctx.mul(wd, w[e], k(15)), k(16));
    m[e] = mi;
    v[e] = vi;
    w[e] = ctx.store_to(f.master, ctx.sub(w[e], ctx.mul(lr, step, k(17)), k(18)), k(19));
    if (!weights.empty()) weights[e] = ctx.store_to(f.weight, w[e], k(20));
  };
  if constexpr (std::is_same_v<A, Emulated>) {
    const numerics::Format& fp32 = numerics::formats::fp32;
    if (sel.empty() && ctx.fast_paths() && ctx.binary32_compute() && f.master.format == fp32 && f.m.format == fp32 &&
        f.v.format == fp32 && detail::adamw_binary32_supported(ctx.exec().kernels)) {
      const auto b32 = [](double x) { return static_cast<float>(x); };  // exact: compute-format constants
      const detail::AdamWBinary32 c32{b32(b1),  b32(b2), b32(ob1), b32(ob2), b32(c1),
                                      b32(c2),  b32(eps), b32(wd), b32(lr), b32(gs),
                                      cfg.grad_scale != 1.0, ctx.precision().ftz != Ftz::Off,
                                      ctx.precision().ftz == Ftz::All};
      const std::size_t n = w.size(), B = detail::kAdamWBlock;
      for_units(static_cast<std::int64_t>((n + B - 1) / B), {}, [&](std::int64_t b) {
        const std::size_t lo = static_cast<std::size_t>(b) * B, len = std::min(B, n - lo);
        std::uint8_t bad[detail::kAdamWBlock / 8];
        detail::adamw_binary32(w.data() + lo, m.data() + lo, v.data() + lo, g.data() + lo, len, c32, bad);
        for (std::size_t j = 0; j < (len + 7) / 8; ++j)
          for (unsigned l = bad[j]; l != 0; l &= l - 1)
            update(static_cast<std::int64_t>(lo + 8 * j + static_cast<std::size_t>(__builtin_ctz(l))));
        if (!weights.empty())
          ctx.store_to_array(f.weight, std::span<const double>(w.subspan(lo, len)), weights.subspan(lo, len),
                             [&](std::size_t i) { return key(Tensor::W, lo + i, 20); });
      });
      return;
    }
  }
  for_units(static_cast<std::int64_t>(w.size()), sel, update);
}

#define ROUNDOFF_ADAMW_DECL(EXTERN, A)                                                                        \
  EXTERN template void adamw_update<A>(std::span<A::Value>, std::span<A::Value>, std::span<A::Value>,          \
                                       std::span<const A::Value>, std::span<A::Value>, const AdamWConfig&,     \
                                       std::int64_t, const AdamWFormats&, const Ctx<A>&, Select);
ROUNDOFF_ADAMW_DECL(extern, Emulated)
ROUNDOFF_ADAMW_DECL(extern, Reference)

}  // namespace roundoff::ops
