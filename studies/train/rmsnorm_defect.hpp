#pragma once
/// \file rmsnorm_defect.hpp
/// AutoANE's RMSNorm backward as its cpu_ops.h computed it during the E11/E36/E37 runs (Defects::rmsnorm_bwd,
/// AUTOANE_FACTS §3.2): with r the row's rstd and dot = r²·Σ_j w_j·dy_j·x_j / C,
///   dx_i = w_i·r·(dy_i − x_i·dot)        instead of the correct   dx_i = r·(w_i·dy_i − x_i·dot).
/// The gain multiplies the x·dot term as well. With every gain 1 the two are the same function, and the same
/// bits below.
///
/// Rounding contract: that of ops::rmsnorm_backward_data (ops/rmsnorm.hpp) with the last step changed:
/// g_i = w_i·dy_i, s = Σ g_j·x_j (Accumulation), a = (r·r·r)·s / C exactly as there; then, each rounded to
/// compute, d_i = w_i·(r·dy_i − a·x_i) and dx_i += d_i, stored. Same policy entry (rmsnorm, bwd-data) and the
/// same stochastic-rounding keys. Emulated backend only (the shadow does not run on a defect).
#include <span>
#include <vector>

#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::studies::train {

/// dx (rows, cols) += the defective ∂L/∂x given dy (rows, cols), x, w (cols), rstd (rows).
inline void rmsnorm_backward_data_defect(std::span<double> dx, std::span<const double> dy, std::span<const double> x,
                                         std::span<const double> w, std::span<const double> rstd, ops::RowShape s,
                                         const ops::Ctx<ops::Emulated>& ctx) {
  const std::int64_t C = s.cols;
  std::vector<double> xs(x.size()), ws(w.size()), dys(dy.size()), g(dy.size());
  using ops::key;
  using ops::Tensor;
  ctx.in_array(x, xs, Tensor::X);
  ctx.in_array(w, ws, Tensor::W);
  ctx.in_array(dy, dys, Tensor::Dy);
  const double n = ctx.c(static_cast<double>(C));
  ops::for_units(s.rows, {}, [&](std::int64_t r) {
    const auto o = static_cast<std::size_t>(r * C);
    const double inv = ctx.in(rstd[static_cast<std::size_t>(r)], key(Tensor::Row, r, 0));
    for (std::size_t i = 0; i < static_cast<std::size_t>(C); ++i)
      g[o + i] = ctx.mul(ws[i], dys[o + i], key(Tensor::Dx, o + i, 0));
    const double sg = ctx.dot(g.data() + o, 1, xs.data() + o, 1, static_cast<std::size_t>(C), key(Tensor::Row, r, 1));
    const double a = ctx.div(ctx.mul(ctx.mul(ctx.mul(inv, inv, key(Tensor::Row, r, 2)), inv, key(Tensor::Row, r, 3)),
                                     sg, key(Tensor::Row, r, 4)),
                             n, key(Tensor::Row, r, 5));
    for (std::int64_t i = 0; i < C; ++i) {
      const std::size_t e = o + static_cast<std::size_t>(i);
      const double inner = ctx.sub(ctx.mul(inv, dys[e], key(Tensor::Dx, e, 1)), ctx.mul(a, xs[e], key(Tensor::Dx, e, 2)),
                                   key(Tensor::Dx, e, 3));
      const double d = ctx.mul(ws[static_cast<std::size_t>(i)], inner, key(Tensor::Dx, e, 7));
      dx[e] = ctx.store(ctx.add(ctx.in(dx[e], key(Tensor::Dx, e, 4)), d, key(Tensor::Dx, e, 5)), key(Tensor::Dx, e, 6));
    }
  });
}

}  // namespace roundoff::studies::train
