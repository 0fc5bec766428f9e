#include "studies/op_error/experiments.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <span>

#include "numerics/round.hpp"
#include "ops/backend.hpp"
#include "ops/residual.hpp"
#include "ops/rope.hpp"

namespace roundoff::studies::op_error {

namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

std::vector<double> draws(std::int64_t n, double sigma, const numerics::Format& f, std::mt19937_64& rng) {
  std::normal_distribution<double> d(0.0, sigma);
  const numerics::RoundingPlan plan(f);
  std::vector<double> v(sz(n));
  for (double& x : v) x = numerics::round_to(plan, numerics::Rounding::NearestEven, d(rng));
  return v;
}

double wrap(double a) {
  const double two_pi = 2.0 * std::numbers::pi;
  a = std::fmod(a, two_pi);
  if (a > std::numbers::pi) a -= two_pi;
  if (a <= -std::numbers::pi) a += two_pi;
  return a;
}

}  // namespace

std::vector<OverflowPoint> rmsnorm_overflow(const ops::OpPrecision& prec, std::int64_t d,
                                            const std::vector<double>& sigmas, std::int64_t rows, std::uint64_t seed) {
  const ops::Ctx<ops::Emulated> ctx(prec);
  std::vector<OverflowPoint> out;
  std::mt19937_64 rng(seed);
  for (double sigma : sigmas) {
    const std::vector<double> x = draws(rows * d, sigma, prec.storage, rng);
    OverflowPoint p{sigma, rows, 0, 0};
    std::int64_t over = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double* xr = x.data() + r * d;
      double ss = 0;
      for (std::int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      p.mean_rms += std::sqrt(ss / static_cast<double>(d));
      // The op's Σx² reduction, exactly as rmsnorm_forward performs it.
      if (std::isinf(ctx.dot(xr, 1, xr, 1, sz(d), ops::key(ops::Tensor::Row, r, 0)))) ++over;
    }
    p.mean_rms /= static_cast<double>(rows);
    p.overflow_fraction = static_cast<double>(over) / static_cast<double>(rows);
    out.push_back(p);
  }
  return out;
}

double overflow_threshold_rms(const std::vector<OverflowPoint>& pts) {
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const OverflowPoint& b = pts[i];
    if (b.overflow_fraction < 0.5) continue;
    if (i == 0) return b.mean_rms;
    const OverflowPoint& a = pts[i - 1];
    const double t = (0.5 - a.overflow_fraction) / (b.overflow_fraction - a.overflow_fraction);
    return a.mean_rms + t * (b.mean_rms - a.mean_rms);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<SwampPoint> residual_swamping(const ops::OpPrecision& prec, std::int64_t d, std::int64_t rows,
                                          const std::vector<double>& ratios, std::uint64_t seed) {
  const ops::Ctx<ops::Emulated> ctx(prec);
  std::mt19937_64 rng(seed);
  std::vector<SwampPoint> out;
  const std::int64_t n = rows * d;
  for (double ratio : ratios) {
    const std::vector<double> x = draws(n, 1.0, prec.storage, rng), u = draws(n, 1.0 / ratio, prec.storage, rng);
    std::vector<double> y(sz(n));
    ops::residual_forward<ops::Emulated>(y, x, u, 1.0, {rows, d}, ctx);
    double xx = 0, uu = 0, ee = 0;
    std::int64_t lost = 0, nonzero = 0;
    for (std::size_t i = 0; i < sz(n); ++i) {
      const double applied = y[i] - x[i];  // exact: both are values of a format with p ≤ 24
      xx += x[i] * x[i];
      uu += u[i] * u[i];
      ee += (applied - u[i]) * (applied - u[i]);
      if (u[i] != 0) {
        ++nonzero;
        if (y[i] == x[i]) ++lost;
      }
    }
    out.push_back({ratio, std::sqrt(xx / uu), std::sqrt(ee / uu),
                   nonzero > 0 ? static_cast<double>(lost) / static_cast<double>(nonzero) : 0.0});
  }
  return out;
}

double swamping_ratio(const std::vector<SwampPoint>& pts, bool lost) {
  for (const SwampPoint& p : pts)
    if ((lost ? p.lost_fraction : p.rel_error) >= 0.5) return p.measured_ratio;
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<SoftmaxBiasPoint> softmax_bias(const ops::OpPrecision& prec, const std::vector<std::int64_t>& lengths,
                                           double logit_std, std::uint64_t seed) {
  const ops::Ctx<ops::Emulated> ctx(prec);
  std::mt19937_64 rng(seed);
  std::vector<SoftmaxBiasPoint> out;
  for (std::int64_t S : lengths) {
    const std::int64_t rows = std::max<std::int64_t>(8, (std::int64_t{1} << 16) / S);
    SoftmaxBiasPoint p{S, rows, 0, 0, 0};
    std::vector<double> e(sz(S));
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::vector<double> x = draws(S, logit_std, prec.storage, rng);
      const double m = *std::max_element(x.begin(), x.end());
      double exact = 0;
      for (std::int64_t j = 0; j < S; ++j) {
        // The same steps as softmax_forward: e_j = exp(x_j − m), each one rounding to compute.
        const std::int64_t el = r * S + j;
        e[sz(j)] = ctx.exp(ctx.sub(x[sz(j)], m, ops::key(ops::Tensor::Att, el, 0)), ops::key(ops::Tensor::Att, el, 1));
        exact += e[sz(j)];
      }
      const double z = ctx.sum(e.data(), 1, sz(S), ops::key(ops::Tensor::Row, r, 0));
      const double rel = (z - exact) / exact;
      p.mean_rel_bias += rel;
      p.max_abs_rel = std::max(p.max_abs_rel, std::fabs(rel));
      p.mean_Z += exact;
    }
    p.mean_rel_bias /= static_cast<double>(rows);
    p.mean_Z /= static_cast<double>(rows);
    out.push_back(p);
  }
  return out;
}

std::vector<RopePoint> rope_angle_error(const ops::OpPrecision& prec, std::int64_t T, std::int64_t hs,
                                        std::int64_t step) {
  const std::int64_t H = hs / 2;
  std::vector<std::int64_t> sel;
  for (std::int64_t p = 0; p < T; p += step) sel.push_back(p);
  std::vector<double> ce(sz(T * H), 0.0), se(sz(T * H), 0.0);
  std::vector<ops::Ref> cr(sz(T * H)), sr(sz(T * H));
  ops::rope_angles<ops::Emulated>(ce, se, T, hs, 10000.0, ops::Ctx<ops::Emulated>(prec), sel);
  ops::rope_angles<ops::Reference>(cr, sr, T, hs, 10000.0, ops::Ctx<ops::Reference>(prec), sel);
  std::vector<RopePoint> out;
  for (std::int64_t p : sel) {
    RopePoint pt{p, 0, 0, 0};
    for (std::int64_t i = 0; i < H; ++i) {
      const std::size_t e = sz(p * H + i);
      const double c = static_cast<double>(cr[e]), s = static_cast<double>(sr[e]);
      const double err = std::fabs(wrap(std::atan2(se[e], ce[e]) - std::atan2(s, c)));
      pt.max_angle_error = std::max(pt.max_angle_error, err);
      pt.mean_angle_error += err;
      pt.max_table_error = std::max({pt.max_table_error, std::fabs(ce[e] - c), std::fabs(se[e] - s)});
    }
    pt.mean_angle_error /= static_cast<double>(H);
    out.push_back(pt);
  }
  return out;
}

}  // namespace roundoff::studies::op_error
