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

/// The ExponentSum anchor of an operand the kernels take: 2^max(e(x), emin), 0 for a zero. A power of two in
/// binary64's normal range (every operand's own: 2^-400 <= |x| <= 2^400) is built from its encoding, which is the
/// value ldexp(1, n) returns; ldexp for any other n.
double anchor_of(double x, int emin) {
  if (x == 0) return 0.0;
  const int e = static_cast<int>((std::bit_cast<std::uint64_t>(x) >> 52) & 0x7FF) - 1023;
  const int n = std::max(e, emin);
  if (n >= -1022 && n <= 1023) return std::bit_cast<double>(static_cast<std::uint64_t>(n + 1023) << 52);
  return std::ldexp(1.0, n);
}

bool initial_ok(double c, bool promoted) {
  if (c != 0 && !(std::fabs(c) >= 0x1p-900 && std::fabs(c) <= 0x1p900)) return false;
  return !promoted || static_cast<double>(static_cast<float>(c)) == c;
}

/// What packing found in a row or column: every element a kernel operand; some inf or NaN (the outputs that read
/// them are recomputed by the generic path, the value packed as 0); or a finite value the kernels do not take.
enum class Found : std::uint8_t { Operands, NonFinite, Unsupported };
Found worse(Found a, Found b) { return std::max(a, b); }
Found classify(double x) { return operand_ok(x) ? Found::Operands : std::isfinite(x) ? Found::Unsupported : Found::NonFinite; }

/// Packed operands: A rows (values and anchors, row-major M×K) and B panels (per panel, K×kPanel values and
/// anchors; columns past N are 0); what packing found per row of A and column of B.
struct Packs {
  std::vector<double> a, ea, b, eb;
  std::vector<Found> row, col;
  std::size_t panels = 0;
};

Packs& tls_packs() {
  thread_local Packs p;
  return p;
}

/// Packs row i of A over the terms [lo, hi) (the rest of the row is never read).
void pack_a_row(Packs& pk, const ConstMatrix& A, std::size_t K, std::size_t i, std::size_t lo, std::size_t hi,
                bool exp_sum, int emin) {
  Found f = Found::Operands;
  double* av = pk.a.data() + i * K;
  double* ev = exp_sum ? pk.ea.data() + i * K : nullptr;
  for (std::size_t k = lo; k < hi; ++k) {
    double x = A(i, k);
    if (const Found c = classify(x); c != Found::Operands) {
      f = worse(f, c);
      x = 0.0;
    }
    av[k] = x;
    if (exp_sum) ev[k] = anchor_of(x, emin);
  }
  pk.row[i] = f;
}

/// Packs element y of a row or column: its packed value (0 for anything the kernels do not take), its anchor, and
/// what it is folded into f.
inline void pack_one(double y, double* v, double* ev, Found& f, bool exp_sum, int emin) {
  if (const Found c = classify(y); c != Found::Operands) {
    f = worse(f, c);
    y = 0.0;
  }
  *v = y;
  if (exp_sum) *ev = anchor_of(y, emin);
}

/// Packs panel p of B over the terms [k0, k1). Each column's elements are packed as they are read: a transposed B
/// (stored N × K) column by column along its storage rows, a row-major B a row of the panel at a time; the same
/// values either way (what a column found is the worst of its elements, in any order).
void pack_b_panel(Packs& pk, const ConstMatrix& B, std::size_t N, std::size_t K, std::size_t p, std::size_t k0,
                  std::size_t k1, bool exp_sum, int emin) {
  double* bv = pk.b.data() + p * K * kPanel;
  double* ev = exp_sum ? pk.eb.data() + p * K * kPanel : nullptr;
  const std::size_t j0 = p * kPanel, nj = j0 < N ? std::min(kPanel, N - j0) : 0;
  Found f[kPanel];
  std::fill(f, f + kPanel, Found::Operands);
  if (B.transposed) {
    for (std::size_t l = 0; l < kPanel; ++l)
      for (std::size_t k = k0; k < k1; ++k)
        pack_one(l < nj ? B(k, j0 + l) : 0.0, bv + k * kPanel + l, exp_sum ? ev + k * kPanel + l : nullptr, f[l],
                 exp_sum, emin);
  } else {
    for (std::size_t k = k0; k < k1; ++k) {
      const double* src = B.data + k * B.ld + j0;
      for (std::size_t l = 0; l < kPanel; ++l)
        pack_one(l < nj ? src[l] : 0.0, bv + k * kPanel + l, exp_sum ? ev + k * kPanel + l : nullptr, f[l], exp_sum,
                 emin);
    }
  }
  for (std::size_t l = 0; l < nj; ++l) pk.col[j0 + l] = f[l];
}

void resize(Packs& pk, std::size_t M, std::size_t N, std::size_t K, bool exp_sum) {
  pk.panels = (N + kPanel - 1) / kPanel;
  pk.a.resize(M * K);
  pk.b.resize(pk.panels * K * kPanel);
  pk.ea.resize(exp_sum ? M * K : 0);
  pk.eb.resize(exp_sum ? pk.panels * K * kPanel : 0);
  pk.row.assign(M, Found::Operands);
  pk.col.assign(N, Found::Operands);
}

/// The outputs the generic path recomputes: those whose row of A or column of B holds an inf or NaN, or (with
/// accumulate) whose C_ij is not finite, each with its initial C_ij. Empty optional when some operand or C_ij is
/// unsupported, or when the recomputation would be most of the product (the caller then declines).
struct Redo {
  std::size_t i, j;
  double c;
};
std::optional<std::vector<Redo>> outputs_to_redo(const Packs& pk, std::size_t M, std::size_t N, const double* C,
                                                 std::size_t ldc, bool accumulate, bool promoted) {
  std::size_t bad_rows = 0, bad_cols = 0;
  for (Found f : pk.row) {
    if (f == Found::Unsupported) return std::nullopt;
    bad_rows += f == Found::NonFinite;
  }
  for (Found f : pk.col) {
    if (f == Found::Unsupported) return std::nullopt;
    bad_cols += f == Found::NonFinite;
  }
  if (2 * (bad_rows * N + bad_cols * M) > M * N) return std::nullopt;
  std::vector<Redo> redo;
  if (!accumulate && bad_rows == 0 && bad_cols == 0) return redo;  // every C_ij starts at 0: the loop finds nothing
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      const double c = accumulate ? C[i * ldc + j] : 0.0;
      if (accumulate && std::isfinite(c) && !initial_ok(c, promoted)) return std::nullopt;
      if (pk.row[i] == Found::NonFinite || pk.col[j] == Found::NonFinite || !std::isfinite(c))
        redo.push_back(Redo{i, j, c});
    }
  if (2 * redo.size() > M * N) return std::nullopt;
  return redo;
}

int max_rows(Isa isa) { return isa == Isa::Avx2 ? adder_lanes::avx2::kMaxRows : adder_lanes::avx512::kMaxRows; }

/// Rows i0..i0+R−1 (one k-range [k0, k1)) of panel p: initial sums from C when has_init, results to C; the
/// overflows of the outputs the generic path does not recompute (outputs_to_redo) are added to *overflows, unless
/// overflows is null (no caller asked for statistics: nothing is counted, the results are the same).
void tile(const AdderPlan& pl, Isa isa, const Packs& pk, std::size_t K, std::size_t N, int R, std::size_t i0,
          std::size_t p, std::size_t k0, std::size_t k1, bool has_init, double* C, std::size_t ldc,
          std::int64_t* overflows) {
  const double* a[4];
  const double* ea[4];
  double st[4 * kPanel];
  std::int64_t counts[4 * kPanel] = {};
  bool counted[4 * kPanel] = {};
  const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0);
  for (int r = 0; r < R; ++r) {
    const std::size_t i = i0 + static_cast<std::size_t>(r);
    a[r] = pk.a.data() + i * K;
    ea[r] = pl.exp_sum ? pk.ea.data() + i * K : nullptr;
    for (std::size_t l = 0; l < kPanel; ++l) {
      const std::size_t e = static_cast<std::size_t>(r) * kPanel + l;
      st[e] = has_init && l < jn ? C[i * ldc + j0 + l] : 0.0;
      if (overflows != nullptr)
        counted[e] = l < jn && pk.row[i] != Found::NonFinite && pk.col[j0 + l] != Found::NonFinite &&
                     std::isfinite(st[e]);
    }
  }
  const double* b = pk.b.data() + p * K * kPanel;
  const double* eb = pl.exp_sum ? pk.eb.data() + p * K * kPanel : nullptr;
  if (isa == Isa::Avx2) adder_lanes::avx2::rows(pl, R, a, ea, b, eb, k0, k1, has_init, st, counts);
  else adder_lanes::avx512::rows(pl, R, a, ea, b, eb, k0, k1, has_init, st, counts);
  for (int r = 0; r < R; ++r)
    for (std::size_t l = 0; l < jn; ++l) {
      const std::size_t e = static_cast<std::size_t>(r) * kPanel + l;
      C[(i0 + static_cast<std::size_t>(r)) * ldc + j0 + l] = st[e];
      if (overflows != nullptr && counted[e]) *overflows += counts[e];
    }
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
  std::optional<std::vector<Redo>> redo;
  std::int64_t overflows = 0;
#pragma omp parallel num_threads(nt) reduction(+ : overflows)
  {
    const auto rows = static_cast<std::ptrdiff_t>(M), panels = static_cast<std::ptrdiff_t>(pk.panels);
#pragma omp for schedule(static) nowait
    for (std::ptrdiff_t i = 0; i < rows; ++i)
      pack_a_row(pk, A, K, static_cast<std::size_t>(i), 0, K, pl.exp_sum, emin);
#pragma omp for schedule(static)
    for (std::ptrdiff_t p = 0; p < panels; ++p)
      pack_b_panel(pk, B, N, K, static_cast<std::size_t>(p), 0, K, pl.exp_sum, emin);
#pragma omp single
    redo = outputs_to_redo(pk, M, N, C, ldc, accumulate, pl.promote > 0);
    if (redo) {
#pragma omp for schedule(static, 1)
      for (std::ptrdiff_t ci = 0; ci < nchunks; ++ci) {
        const std::size_t i_begin = static_cast<std::size_t>(ci) * chunk, i_end = std::min(M, i_begin + chunk);
        for (std::size_t p = 0; p < pk.panels; ++p)
          for (std::size_t i = i_begin; i < i_end; i += R) {
            const int r = static_cast<int>(std::min(R, i_end - i));
            tile(pl, isa, pk, K, N, r, i, p, 0, K, accumulate, C, ldc, stats != nullptr ? &overflows : nullptr);
          }
      }
    }
  }
  if (!redo) return false;
  // Outputs that read an inf or NaN: the generic path, one output at a time from its initial C_ij, in the calling
  // thread after the kernels (whose counts for these outputs tile() dropped) — numerics::gemm of one output is
  // exactly that output of the whole product (outputs are independent), and it counts its own overflows.
  for (const Redo& r : *redo) {
    const ConstMatrix row = A.transposed ? ConstMatrix{A.data + r.i, A.ld, true} : ConstMatrix{A.data + r.i * A.ld, K};
    const ConstMatrix col = B.transposed ? ConstMatrix{B.data + r.j * B.ld, K, true} : ConstMatrix{B.data + r.j, B.ld};
    double& c = C[r.i * ldc + r.j];
    c = r.c;
    AccumStats one;
    gemm(a, 1, 1, K, row, col, &c, 1, accumulate, {}, &one, 1);
    overflows += one.overflows;
  }
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
    pack_a_row(pk, A, K, i, rows[i].lo, rows[i].hi, pl.exp_sum, a.adder.input_emin);
    kmin = std::min(kmin, rows[i].lo);
    kmax = std::max(kmax, rows[i].hi);
  }
  for (std::size_t p = 0; p < pk.panels; ++p) pack_b_panel(pk, B, N, K, p, kmin, kmax, pl.exp_sum, a.adder.input_emin);
  const auto redo = outputs_to_redo(pk, M, N, C, ldc, false, false);
  if (!redo) return false;
  const auto R = static_cast<std::size_t>(max_rows(isa));
  for (std::size_t i = 0; i < M;) {
    std::size_t g = 1;  // consecutive rows with the same range run together
    while (g < R && i + g < M && rows[i + g].lo == rows[i].lo && rows[i + g].hi == rows[i].hi) ++g;
    for (std::size_t p = 0; p < pk.panels; ++p)
      tile(pl, isa, pk, K, N, static_cast<int>(g), i, p, rows[i].lo, rows[i].hi, false, C, ldc, nullptr);  // no statistics
    i += g;
  }
  // Outputs that read an inf or NaN: numerics::dot of their range, which is what gemm_ranged defines them as.
  for (const Redo& r : *redo) {
    const KRange k = rows[r.i];
    const double* x = A.transposed ? A.data + k.lo * A.ld + r.i : A.data + r.i * A.ld + k.lo;
    const double* y = B.transposed ? B.data + r.j * B.ld + k.lo : B.data + k.lo * B.ld + r.j;
    C[r.i * ldc + r.j] = dot(a, x, static_cast<std::ptrdiff_t>(A.transposed ? A.ld : 1), y,
                             static_cast<std::ptrdiff_t>(B.transposed ? 1 : B.ld), k.hi - k.lo);
  }
  return true;
}

}  // namespace roundoff::numerics::kernels
