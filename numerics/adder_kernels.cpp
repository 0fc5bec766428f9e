// Multi-term adder GEMM kernels (contract and exactness argument in adder_kernels.hpp): plan, packing, threads,
// tier dispatch. The lane arithmetic is in adder_lanes.inc.
#include "numerics/adder_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "numerics/adder_lanes.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics::kernels {
namespace {

using adder_lanes::AdderPlan;
using adder_lanes::kPanel;

bool deterministic_adder_mode(Rounding r) { return r == Rounding::TowardZero || r == Rounding::NearestEven; }

std::optional<AdderPlan> adder_plan(const Accumulation& a) {
  if (validate(a) || a.adder.group <= 0) return std::nullopt;
  const MultiTermAdder& m = a.adder;
  // The accumulation rebuilt from the fields the kernels implement: any other field set (one added to
  // Accumulation or MultiTermAdder later included) makes the two differ, and the spec is declined.
  MultiTermAdder mm{};
  mm.group = m.group;
  mm.extra_bits = m.extra_bits;
  mm.align = m.align;
  mm.normalize = m.normalize;
  mm.carry_bits = m.carry_bits;
  mm.anchor = m.anchor;
  mm.input_emin = m.input_emin;
  mm.edges = m.edges;
  Accumulation c{};
  c.format = a.format;
  c.rounding = a.rounding;
  c.fused = true;
  c.order = Order::Sequential;
  c.promote_every = a.promote_every;
  c.promote_format = a.promote_format;
  c.adder = mm;
  if (!(c == a)) return std::nullopt;
  if (!deterministic_adder_mode(m.align) || !deterministic_adder_mode(m.normalize)) return std::nullopt;
  if (a.rounding == Rounding::Stochastic) return std::nullopt;
  const Format& f = a.format;
  if (!f.subnormals || f.specials != Specials::Ieee || f.saturate || f.precision < 2 || f.precision > 30 ||
      f.emin - f.precision + 1 < -850 || f.emax > 850)
    return std::nullopt;
  const int p = f.precision;
  if (p + m.extra_bits > 42) return std::nullopt;
  const bool exp_sum = m.anchor == AdderAnchor::ExponentSum;
  if (!(m.align == Rounding::TowardZero && m.normalize == Rounding::TowardZero)) {
    // The register must never lose bits: |T| <= g·2^(p+1+extra) + 2^(p+extra) (2^(p+extra) per LeadingBit
    // product) must stay below 2^(p+extra+carry).
    const double bound = m.group * std::ldexp(1.0, p + m.extra_bits + (exp_sum ? 1 : 0)) +
                         std::ldexp(1.0, p + m.extra_bits);
    if (!(bound < std::ldexp(1.0, p + m.extra_bits + m.carry_bits))) return std::nullopt;
  }
  if (a.promote_every > 0) {
    if (a.rounding != Rounding::NearestEven || !(a.promote_format == formats::fp32) || p > 24 || f.emin < -126 ||
        f.emax > 127)
      return std::nullopt;
  }
  const RoundingPlan acc(f);
  AdderPlan pl{};
  pl.group = static_cast<std::size_t>(m.group);
  pl.promote = static_cast<std::size_t>(a.promote_every);
  pl.exp_sum = exp_sum;
  pl.align_ne = m.align == Rounding::NearestEven;
  pl.norm_ne = m.normalize == Rounding::NearestEven;
  pl.pos_zero = m.edges == AdderEdges::InfPositiveZero;
  pl.to_q = std::ldexp(1.0, -(p - 1 + m.extra_bits));
  pl.from_q = std::ldexp(1.0, p - 1 + m.extra_bits);
  pl.q_out = std::ldexp(1.0, 1 - p);
  pl.min_quantum = std::ldexp(1.0, f.emin - p + 1);
  pl.max_finite = acc.max_finite;
  pl.ovf_value = (pl.pos_zero || pl.norm_ne) ? HUGE_VAL : acc.max_finite;
  return pl;
}

/// An operand the kernels take: 0, or finite with at most 26 significant bits and 2^-400 <= |x| <= 2^400.
bool operand_ok(double x) {
  if (x == 0) return true;
  const double m = std::fabs(x);
  return m >= 0x1p-400 && m <= 0x1p400 && (std::bit_cast<std::uint64_t>(x) & ((std::uint64_t{1} << 27) - 1)) == 0;
}

/// The ExponentSum anchor of an operand the kernels take: 2^max(e(x), emin), 0 for a zero.
double anchor_of(double x, int emin) {
  if (x == 0) return 0.0;
  const int e = static_cast<int>((std::bit_cast<std::uint64_t>(x) >> 52) & 0x7FF) - 1023;
  return std::ldexp(1.0, std::max(e, emin));
}

bool initial_ok(double c, bool promoted) {
  if (c != 0 && !(std::fabs(c) >= 0x1p-900 && std::fabs(c) <= 0x1p900)) return false;
  return !promoted || static_cast<double>(static_cast<float>(c)) == c;
}

/// Packed operands: A rows (values and anchors, row-major M×K) and B panels (per panel, K×kPanel values and
/// anchors; columns past N are 0).
struct Packs {
  std::vector<double> a, ea, b, eb;
  std::size_t panels = 0;
};

Packs& tls_packs() {
  thread_local Packs p;
  return p;
}

/// Packs row i of A over the terms [lo, hi) (the rest of the row is never read); false when an element is not a
/// kernel operand.
bool pack_a_row(Packs& pk, const ConstMatrix& A, std::size_t K, std::size_t i, std::size_t lo, std::size_t hi,
                bool exp_sum, int emin) {
  bool ok = true;
  double* av = pk.a.data() + i * K;
  double* ev = exp_sum ? pk.ea.data() + i * K : nullptr;
  for (std::size_t k = lo; k < hi; ++k) {
    const double x = A(i, k);
    ok = ok && operand_ok(x);
    av[k] = x;
    if (exp_sum) ev[k] = anchor_of(x, emin);
  }
  return ok;
}

/// Packs B rows [k0, k1) into every panel; false when an element is not a kernel operand.
bool pack_b_rows(Packs& pk, const ConstMatrix& B, std::size_t N, std::size_t K, std::size_t k0, std::size_t k1,
                 bool exp_sum, int emin) {
  bool ok = true;
  for (std::size_t p = 0; p < pk.panels; ++p) {
    double* bv = pk.b.data() + p * K * kPanel;
    double* ev = pk.eb.data() + p * K * kPanel;
    for (std::size_t k = k0; k < k1; ++k)
      for (std::size_t l = 0; l < kPanel; ++l) {
        const std::size_t j = p * kPanel + l;
        const double y = j < N ? B(k, j) : 0.0;
        ok = ok && operand_ok(y);
        bv[k * kPanel + l] = y;
        if (exp_sum) ev[k * kPanel + l] = anchor_of(y, emin);
      }
  }
  return ok;
}

void resize(Packs& pk, std::size_t M, std::size_t N, std::size_t K, bool exp_sum) {
  pk.panels = (N + kPanel - 1) / kPanel;
  pk.a.resize(M * K);
  pk.b.resize(pk.panels * K * kPanel);
  pk.ea.resize(exp_sum ? M * K : 0);
  pk.eb.resize(exp_sum ? pk.panels * K * kPanel : 0);
}

int max_rows(Isa isa) { return isa == Isa::Avx2 ? adder_lanes::avx2::kMaxRows : adder_lanes::avx512::kMaxRows; }

/// Rows i0..i0+R−1 (one k-range [k0, k1)) of panel p: initial sums from C when has_init, results to C.
void tile(const AdderPlan& pl, Isa isa, const Packs& pk, std::size_t K, std::size_t N, int R, std::size_t i0,
          std::size_t p, std::size_t k0, std::size_t k1, bool has_init, double* C, std::size_t ldc,
          std::int64_t* overflows) {
  const double* a[4];
  const double* ea[4];
  double st[4 * kPanel];
  const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0);
  for (int r = 0; r < R; ++r) {
    const std::size_t i = i0 + static_cast<std::size_t>(r);
    a[r] = pk.a.data() + i * K;
    ea[r] = pl.exp_sum ? pk.ea.data() + i * K : nullptr;
    for (std::size_t l = 0; l < kPanel; ++l)
      st[static_cast<std::size_t>(r) * kPanel + l] = has_init && l < jn ? C[i * ldc + j0 + l] : 0.0;
  }
  const double* b = pk.b.data() + p * K * kPanel;
  const double* eb = pl.exp_sum ? pk.eb.data() + p * K * kPanel : nullptr;
  if (isa == Isa::Avx2) adder_lanes::avx2::rows(pl, R, a, ea, b, eb, k0, k1, has_init, st, overflows);
  else adder_lanes::avx512::rows(pl, R, a, ea, b, eb, k0, k1, has_init, st, overflows);
  for (int r = 0; r < R; ++r)
    for (std::size_t l = 0; l < jn; ++l)
      C[(i0 + static_cast<std::size_t>(r)) * ldc + j0 + l] = st[static_cast<std::size_t>(r) * kPanel + l];
}

}  // namespace

const char* adder_kernel_name(const Accumulation& a, Isa isa) {
  if (isa == Isa::None || !adder_plan(a)) return nullptr;
  return isa == Isa::Avx2 ? "adder-avx2" : "adder-avx512";
}

bool gemm_adder(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads, Isa isa) {
  if (isa == Isa::None || M == 0 || N == 0 || K == 0) return false;
  const auto plan = adder_plan(a);
  if (!plan) return false;
  const AdderPlan& pl = *plan;
  const int emin = a.adder.input_emin;
  Packs& pk = tls_packs();  // the calling thread's buffers, shared by the team below
  resize(pk, M, N, K, pl.exp_sum);
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  const auto R = static_cast<std::size_t>(max_rows(isa));
  // Threads own chunks of whole row tiles; every output is computed the same way by whichever thread owns it.
  const std::size_t per_thread = (M + static_cast<std::size_t>(nt) - 1) / static_cast<std::size_t>(nt);
  const std::size_t chunk = (per_thread + R - 1) / R * R;
  const auto nchunks = static_cast<std::ptrdiff_t>((M + chunk - 1) / chunk);
  bool ok = true;
  std::int64_t overflows = 0;
#pragma omp parallel num_threads(nt) reduction(+ : overflows)
  {
    bool mine = true;
    const auto rows = static_cast<std::ptrdiff_t>(M), ks = static_cast<std::ptrdiff_t>(K);
#pragma omp for schedule(static) nowait
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
      const auto ii = static_cast<std::size_t>(i);
      mine = pack_a_row(pk, A, K, ii, 0, K, pl.exp_sum, emin) && mine;
      if (accumulate)
        for (std::size_t j = 0; j < N && mine; ++j) mine = initial_ok(C[ii * ldc + j], pl.promote > 0);
    }
#pragma omp for schedule(static)
    for (std::ptrdiff_t k = 0; k < ks; ++k)
      mine = pack_b_rows(pk, B, N, K, static_cast<std::size_t>(k), static_cast<std::size_t>(k) + 1, pl.exp_sum,
                         emin) && mine;
#pragma omp critical(roundoff_adder_kernels_ok)
    ok = ok && mine;
#pragma omp barrier
    if (ok) {
#pragma omp for schedule(static, 1)
      for (std::ptrdiff_t ci = 0; ci < nchunks; ++ci) {
        const std::size_t i_begin = static_cast<std::size_t>(ci) * chunk, i_end = std::min(M, i_begin + chunk);
        for (std::size_t p = 0; p < pk.panels; ++p)
          for (std::size_t i = i_begin; i < i_end; i += R) {
            const int r = static_cast<int>(std::min(R, i_end - i));
            tile(pl, isa, pk, K, N, r, i, p, 0, K, accumulate, C, ldc, &overflows);
          }
      }
    }
  }
  if (!ok) return false;
  if (stats) {
    stats->terms += static_cast<std::int64_t>(M * N * K);
    stats->overflows += overflows;
  }
  return true;
}

bool gemm_ranged_adder(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A,
                       ConstMatrix B, const KRange* rows, double* C, std::size_t ldc, Isa isa) {
  if (isa == Isa::None || M == 0 || N == 0 || K == 0) return false;
  const auto plan = adder_plan(a);
  if (!plan) return false;
  const AdderPlan& pl = *plan;
  Packs& pk = tls_packs();
  resize(pk, M, N, K, pl.exp_sum);
  // Packed by the calling thread (callers may be inside a parallel region): each row of A over its own range,
  // the rows of B that some range covers (from the lowest start to the highest end); nothing else is read.
  std::size_t kmin = K, kmax = 0;
  for (std::size_t i = 0; i < M; ++i) {
    if (!pack_a_row(pk, A, K, i, rows[i].lo, rows[i].hi, pl.exp_sum, a.adder.input_emin)) return false;
    kmin = std::min(kmin, rows[i].lo);
    kmax = std::max(kmax, rows[i].hi);
  }
  if (!pack_b_rows(pk, B, N, K, kmin, kmax, pl.exp_sum, a.adder.input_emin)) return false;
  const auto R = static_cast<std::size_t>(max_rows(isa));
  std::int64_t overflows = 0;  // gemm_ranged reports no statistics
  for (std::size_t i = 0; i < M;) {
    std::size_t g = 1;  // consecutive rows with the same range run together
    while (g < R && i + g < M && rows[i + g].lo == rows[i].lo && rows[i + g].hi == rows[i].hi) ++g;
    for (std::size_t p = 0; p < pk.panels; ++p)
      tile(pl, isa, pk, K, N, static_cast<int>(g), i, p, rows[i].lo, rows[i].hi, false, C, ldc, &overflows);
    i += g;
  }
  return true;
}

}  // namespace roundoff::numerics::kernels
