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
#include <vector>

#include "ops/backend.hpp"
#include "ops/steps.hpp"

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
/// adamw_binary32 on binary32 moments m, v (the same operations: a binary32 moment is read as the kernel reads
/// an exact binary64 one, and the moments it stores are the binary32 results it would have stored widened).
void adamw_binary32(double* w, float* m, float* v, const double* g, std::size_t n, const AdamWBinary32& c,
                    std::uint8_t* bad);
/// adamw_binary32 on binary32 masters and moments (a binary32 master likewise).
void adamw_binary32(float* w, float* m, float* v, const double* g, std::size_t n, const AdamWBinary32& c,
                    std::uint8_t* bad);
/// adamw_binary32 on binary32 gradients too (read as the kernel reads exact binary64 ones).
void adamw_binary32(double* w, float* m, float* v, const float* g, std::size_t n, const AdamWBinary32& c,
                    std::uint8_t* bad);
void adamw_binary32(float* w, float* m, float* v, const float* g, std::size_t n, const AdamWBinary32& c,
                    std::uint8_t* bad);

/// AdamW's constants in compute (Ctx::c): β1, β2, 1−β1, 1−β2, 1−β1^t, 1−β2^t, ε, λ, lr, grad_scale.
template <class V>
struct AdamWConstants {
  V b1, b2, ob1, ob2, c1, c2, eps, wd, lr, gs;
};
template <class A>
AdamWConstants<typename A::Value> adamw_constants(const AdamWConfig& cfg, std::int64_t t, const Ctx<A>& ctx) {
  return {ctx.c(cfg.beta1),
          ctx.c(cfg.beta2),
          ctx.c(1.0 - cfg.beta1),
          ctx.c(1.0 - cfg.beta2),
          ctx.c(1.0 - std::pow(cfg.beta1, static_cast<double>(t))),
          ctx.c(1.0 - std::pow(cfg.beta2, static_cast<double>(t))),
          ctx.c(cfg.eps),
          ctx.c(cfg.weight_decay),
          ctx.c(cfg.lr),
          ctx.c(cfg.grad_scale)};
}

/// Slots of W at an element that the update (adamw_element without the working copy) takes; the copy's store is
/// the next. tests/ops/reference_test.cpp checks the count against adamw_element's Steps.
inline constexpr unsigned kAdamWUpdateSlots = 20;

/// The update of parameter e, every rounding on W at e in the order below (ops/steps.hpp); the working copy when
/// `weights` is non-empty. Returns the slots the update took before the copy (kAdamWUpdateSlots).
/// M: the moments' storage, A::Value or (Emulated) float when the AdamM and AdamV roles hold only binary32
/// values: a moment is read widened (exact) and stored narrowed, which is exact too since every stored moment
/// is a value of its role's format. W: the masters' storage, A::Value or (Emulated) float when the MasterWeight role
/// holds only binary32 values (read widened, stored narrowed: exact for the same reason). G: the gradients' storage,
/// A::Value or (Emulated) float for binary32 gradients (read widened: exact).
template <class A, class M = typename A::Value, class W = typename A::Value, class G = typename A::Value>
unsigned adamw_element(std::size_t e, std::span<std::type_identity_t<W>> w, std::span<std::type_identity_t<M>> m,
                       std::span<std::type_identity_t<M>> v, std::span<const std::type_identity_t<G>> g,
                       std::span<typename A::Value> weights, bool unscale,
                       const AdamWConstants<typename A::Value>& k, const AdamWFormats& f, const Ctx<A>& ctx) {
  using V = typename A::Value;
  Steps<A> p(ctx, Tensor::W, e);
  V gi = static_cast<V>(g[e]);
  if (unscale) gi = p.mul(gi, k.gs);
  else p.skip();
  const V bm = p.mul(k.b1, static_cast<V>(m[e]));
  const V og = p.mul(k.ob1, gi);
  const V mi = p.store_to(f.m, p.add(bm, og));
  const V g2 = p.mul(gi, gi);
  const V bv = p.mul(k.b2, static_cast<V>(v[e]));
  const V og2 = p.mul(k.ob2, g2);
  const V vi = p.store_to(f.v, p.add(bv, og2));
  const V mhat = p.div(mi, k.c1);
  const V vhat = p.div(vi, k.c2);
  const V den = p.add(p.sqrt(vhat), k.eps);
  const V ratio = p.div(mhat, den);
  const V wi = static_cast<V>(w[e]);
  const V decay = p.mul(k.wd, wi);
  const V step = p.add(ratio, decay);
  m[e] = static_cast<M>(mi);
  v[e] = static_cast<M>(vi);
  const V wn = p.store_to(f.master, p.sub(wi, p.mul(k.lr, step)));
  w[e] = static_cast<W>(wn);
  const unsigned taken = p.taken();
  if (!weights.empty()) weights[e] = p.store_to(f.weight, wn);
  return taken;
}
}  // namespace detail

/// The reference: every element through detail::adamw_element (the llm.c loop).
template <class A>
void adamw_update_reference(std::span<typename A::Value> w, std::span<typename A::Value> m,
                            std::span<typename A::Value> v, std::span<const typename A::Value> g,
                            std::span<typename A::Value> weights, const AdamWConfig& cfg, std::int64_t t,
                            const AdamWFormats& f, const Ctx<A>& ctx) {
  const auto k = detail::adamw_constants(cfg, t, ctx);
  for (std::size_t e = 0; e < w.size(); ++e)
    detail::adamw_element(e, w, m, v, g, weights, cfg.grad_scale != 1.0, k, f, ctx);
}

namespace detail {
/// adamw_update with the moments stored as M, the masters as W and the gradients as G (adamw_element).
template <class A, class M, class W = typename A::Value, class G = typename A::Value>
void adamw_update_stored(std::span<W> w, std::span<M> m, std::span<M> v,
                         std::span<const G> g, std::span<typename A::Value> weights,
                         const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f, const Ctx<A>& ctx, Select sel) {
  const auto k = adamw_constants(cfg, t, ctx);
  const auto update = [&](std::int64_t i) {
    adamw_element<A, M, W, G>(static_cast<std::size_t>(i), w, m, v, g, weights, cfg.grad_scale != 1.0, k, f, ctx);
  };
  if constexpr (std::is_same_v<A, Emulated>) {
    const numerics::Format& fp32 = numerics::formats::fp32;
    if (sel.empty() && ctx.fast_paths() && ctx.binary32_compute() && f.master.format == fp32 && f.m.format == fp32 &&
        f.v.format == fp32 && adamw_binary32_supported(ctx.exec().kernels)) {
      const auto b32 = [](double x) { return static_cast<float>(x); };  // exact: compute-format constants
      const AdamWBinary32 c32{b32(k.b1),  b32(k.b2), b32(k.ob1), b32(k.ob2), b32(k.c1),
                              b32(k.c2),  b32(k.eps), b32(k.wd), b32(k.lr), b32(k.gs),
                              cfg.grad_scale != 1.0, ctx.precision().ftz != Ftz::Off,
                              ctx.precision().ftz == Ftz::All};
      const std::size_t n = w.size(), B = kAdamWBlock;
      for_units(static_cast<std::int64_t>((n + B - 1) / B), {}, [&](std::int64_t b) {
        const std::size_t lo = static_cast<std::size_t>(b) * B, len = std::min(B, n - lo);
        std::uint8_t bad[kAdamWBlock / 8];
        adamw_binary32(w.data() + lo, m.data() + lo, v.data() + lo, g.data() + lo, len, c32, bad);
        for (std::size_t j = 0; j < (len + 7) / 8; ++j)
          for (unsigned l = bad[j]; l != 0; l &= l - 1)
            update(static_cast<std::int64_t>(lo + 8 * j + static_cast<std::size_t>(__builtin_ctz(l))));
        if constexpr (std::is_same_v<W, double>) {  // binary32 masters come without a working copy
          if (!weights.empty())
            ctx.store_to_array(f.weight, std::span<const double>(w.subspan(lo, len)), weights.subspan(lo, len),
                               SlotSeq(Tensor::W, lo, 1, kAdamWUpdateSlots).next());  // the copy's slot
        }
      });
      return;
    }
  }
  for_units(static_cast<std::int64_t>(w.size()), sel, update);
}
}  // namespace detail

/// Updates w (master), m, v (n) in place from g (n) at step t ≥ 1; writes the working copy `weights` (n)
/// when it is non-empty: adamw_update_reference, element by element or (fast path) by blocks.
///
/// Fast path (Emulated, fast_paths() on, all units, compute fp32 with nearest-even (Ctx::binary32_compute;
/// the kernel applies ftz's flushes itself), master/m/v roles fp32, AVX2): detail::adamw_binary32 on blocks of kAdamWBlock
/// elements, the elements it leaves on the scalar path, the working copy through store_to_array. Bit-identical
/// to the scalar path (argument at detail::adamw_binary32; tests/ops/span_ops_test.cpp compares the two).
template <class A>
void adamw_update(std::span<typename A::Value> w, std::span<typename A::Value> m, std::span<typename A::Value> v,
                  std::span<const typename A::Value> g, std::span<typename A::Value> weights, const AdamWConfig& cfg,
                  std::int64_t t, const AdamWFormats& f, const Ctx<A>& ctx, Select sel = {}) {
  detail::adamw_update_stored<A, typename A::Value>(w, m, v, g, weights, cfg, t, f, ctx, sel);
}

/// adamw_update with binary32 moments m, v (the trainer's storage when the AdamM and AdamV roles hold only
/// binary32 values, studies/train/param_store.hpp): the same bits as the binary64 moments would get, widened.
/// Precondition: every m[i], v[i] a value of its role's format (then each store is exact).
void adamw_update(std::span<double> w, std::span<float> m, std::span<float> v, std::span<const double> g,
                  std::span<double> weights, const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f,
                  const Ctx<Emulated>& ctx, Select sel = {});
/// adamw_update with binary32 masters w and moments m, v (the trainer's storage when the MasterWeight role holds
/// only binary32 values too), no working copy: the same bits. Precondition: every w[i] a value of the master format.
void adamw_update(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const double> g,
                  const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f, const Ctx<Emulated>& ctx,
                  Select sel = {});
/// The two above with binary32 gradients g (the trainer's gradient store when the gradient role holds only
/// binary32 values): read widened, exact, so the same bits as on the binary64 gradients.
void adamw_update(std::span<double> w, std::span<float> m, std::span<float> v, std::span<const float> g,
                  std::span<double> weights, const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f,
                  const Ctx<Emulated>& ctx, Select sel = {});
void adamw_update(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const float> g,
                  const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f, const Ctx<Emulated>& ctx,
                  Select sel = {});

#define ROUNDOFF_ADAMW_DECL(EXTERN, A)                                                                        \
  EXTERN template void adamw_update<A>(std::span<A::Value>, std::span<A::Value>, std::span<A::Value>,          \
                                       std::span<const A::Value>, std::span<A::Value>, const AdamWConfig&,     \
                                       std::int64_t, const AdamWFormats&, const Ctx<A>&, Select);
ROUNDOFF_ADAMW_DECL(extern, Emulated)
ROUNDOFF_ADAMW_DECL(extern, Reference)

}  // namespace roundoff::ops
