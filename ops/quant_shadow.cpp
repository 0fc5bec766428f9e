#include "ops/quant_shadow.hpp"

#include <cstddef>

#include "numerics/exact_dot.hpp"
#include "ops/matmul_quant.hpp"

namespace roundoff::ops {

namespace {

/// Element (i, k) of A at a[i·ai + k·ak], (k, j) of B at b[k·bk + j·bj] (the strides of matmul.hpp's references).
struct PassLayout {
  std::size_t M, N, K;
  std::size_t ai, ak, bk, bj;
  bool add;  ///< the backward passes add into the output
};

PassLayout layout_of(Pass pass, MatmulShape s) {
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  switch (pass) {
    case Pass::Forward: return {N, O, I, I, 1, 1, I, false};        // y = x · Wᵀ
    case Pass::BackwardData: return {N, I, O, O, 1, I, 1, true};    // dx += dy · W
    case Pass::BackwardWeight: return {O, I, N, 1, O, I, 1, true};  // dW += dyᵀ · x
  }
  return {};
}

/// v (the operand of rows·ai + k·ak layout) ← its decoded values: code · scale (per tensor, or the block scale of
/// (outer, k / kb)); `outer` is the operand's index outside the contraction axis (A's row i, B's column j).
void decode(std::vector<double>& v, const OperandScales& sc, std::size_t outer_n, std::size_t K, std::size_t s_outer,
            std::size_t s_k, std::size_t kb) {
  if (sc.per_tensor) {
    for (double& x : v) x *= static_cast<double>(sc.inv);  // ≤ 4 significant bits times a binary32: exact
    return;
  }
  for (std::size_t u = 0; u < outer_n; ++u)
    for (std::size_t k = 0; k < K; ++k)
      v[u * s_outer + k * s_k] *= static_cast<double>(sc.at(u, k / kb));
}

}  // namespace

std::optional<std::vector<Ref>> quantized_gemm_reference(const Ctx<Emulated>& ctx, Pass pass, MatmulShape s,
                                                         std::span<const double> a, std::span<const double> b,
                                                         const Fp8Slots* fp8, std::span<const std::int64_t> units,
                                                         std::span<const Ref> before) {
  if (!ctx.precision().quant.active()) return std::nullopt;
  std::optional<Fp8Slots> read_only;
  if (fp8 != nullptr) {
    read_only = *fp8;
    read_only->record = false;
    read_only->counts = {};
  }
  const QuantOperands q = quantized_operands(ctx, pass, s, a, b, read_only ? &*read_only : nullptr);
  std::vector<double> da(q.a.begin(), q.a.end()), db(q.b.begin(), q.b.end());  // out of the scratch slots
  const PassLayout L = layout_of(pass, s);
  if (q.exact) {
    decode(da, q.sa, L.M, L.K, L.ai, L.ak, q.kb);
    decode(db, q.sb, L.N, L.K, L.bj, L.bk, q.kb);
  }
  std::vector<Ref> r(units.size() * L.N);
  const auto n_units = static_cast<std::ptrdiff_t>(units.size());
  // Every element is an exact sum rounded once, so the order of the work (and the thread count) cannot matter.
#pragma omp parallel for schedule(dynamic)
  for (std::ptrdiff_t u = 0; u < n_units; ++u) {
    const auto i = static_cast<std::size_t>(units[static_cast<std::size_t>(u)]);
    for (std::size_t j = 0; j < L.N; ++j) {
      numerics::ExactSum sum;
      if (L.add) sum.add(static_cast<double>(before[i * L.N + j]));  // a lifted binary64: exact
      const double* pa = da.data() + i * L.ai;
      const double* pb = db.data() + j * L.bj;
      for (std::size_t k = 0; k < L.K; ++k) sum.add_product(pa[k * L.ak], pb[k * L.bk]);
      sum.to_mpfr(r[static_cast<std::size_t>(u) * L.N + j].backend().data(), MPFR_RNDN);
    }
  }
  return r;
}

}  // namespace roundoff::ops
