// The binary64 GEMM kernel: packing, tier dispatch, and the non-finite outputs (argument in gemm_binary64.hpp).
#include "numerics/gemm_binary64.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "numerics/arith.hpp"
#include "numerics/gemm_binary64_lanes.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics::kernels {
namespace {

constexpr double kQuietNaN = std::numeric_limits<double>::quiet_NaN();  ///< the definition's NaN (round_to's)
constexpr std::size_t kRows = 8;  ///< rows per call of the tier's micro-kernel (its largest tile)

/// One ISA tier: panel width and micro-kernel.
struct Tier {
  std::size_t nr;
  void (*rows)(std::size_t, const double*, std::size_t, const double*, std::size_t, double*);
};

Tier tier_of(Isa isa) {
  if (isa == Isa::Avx2) return {f64_lanes::avx2::kNr, f64_lanes::avx2::rows};
  return {f64_lanes::avx512::kNr, f64_lanes::avx512::rows};
}
constexpr std::size_t kMaxNr = f64_lanes::avx512::kNr;
static_assert(f64_lanes::avx2::kNr <= kMaxNr);

/// Storage that grows and is reused by its thread (scratch: every element read is written first in a call).
class Scratch {
 public:
  double* get(std::size_t n) {
    if (n > data_.size()) data_.resize(n);
    return data_.data();
  }

 private:
  std::vector<double> data_;
};

/// Operands in the micro-kernel's layout: A row-major M×K, B as panels of nr columns (panel p: K × nr, columns
/// past N zero), each value cast on the way when a cast is given.
struct Packed {
  std::size_t M, N, K, nr, panels;
  double* A;
  double* B;
};

/// Reads n stored values from src (contiguous), cast when `cast` is given (into buf), and returns where they are.
const double* values(const double* src, std::size_t n, const OperandCast* cast, double* buf) {
  if (cast == nullptr) return src;
  cast_values(*cast, std::span<const double>(src, n), std::span<double>(buf, n));
  return buf;
}

void pack(const Packed& pk, ConstMatrix A, ConstMatrix B, const OperandCast* cast_a, const OperandCast* cast_b) {
  const std::size_t M = pk.M, N = pk.N, K = pk.K, nr = pk.nr;
  thread_local Scratch run_buf;
  double* run = run_buf.get(std::max({M, N, K}));
  if (!A.transposed) {
    for (std::size_t i = 0; i < M; ++i) {
      const double* v = values(A.data + i * A.ld, K, cast_a, run);
      std::copy(v, v + K, pk.A + i * K);
    }
  } else {  // stored K×M: stored row k holds A(·, k)
    for (std::size_t k = 0; k < K; ++k) {
      const double* v = values(A.data + k * A.ld, M, cast_a, run);
      for (std::size_t i = 0; i < M; ++i) pk.A[i * K + k] = v[i];
    }
  }
  std::fill(pk.B + (pk.panels - 1) * K * nr, pk.B + pk.panels * K * nr, 0.0);  // the last panel's padding
  if (!B.transposed) {  // stored row k holds B(k, ·)
    for (std::size_t k = 0; k < K; ++k) {
      const double* v = values(B.data + k * B.ld, N, cast_b, run);
      for (std::size_t j = 0; j < N; ++j) pk.B[((j / nr) * K + k) * nr + j % nr] = v[j];
    }
  } else {  // stored N×K: stored row j holds B(·, j)
    for (std::size_t j = 0; j < N; ++j) {
      const double* v = values(B.data + j * B.ld, K, cast_b, run);
      double* dst = pk.B + (j / nr) * K * nr + j % nr;
      for (std::size_t k = 0; k < K; ++k) dst[k * nr] = v[k];
    }
  }
}

/// Overflow events of output (i, j), replayed with the scalar definition's steps (see the header).
std::int64_t replay_overflows(std::size_t i, std::size_t j, std::size_t K, ConstMatrix A, ConstMatrix B,
                              bool accumulate, double c0) {
  const RoundingPlan fp64(formats::fp64);
  const Rounding rn = Rounding::NearestEven;
  std::int64_t n = 0;
  double s = c0;
  bool have = accumulate;
  for (std::size_t k = 0; k < K; ++k) {
    const double x = A(i, k), y = B(k, j);
    const double r = have ? numerics::fma(fp64, rn, x, y, s) : numerics::mul(fp64, rn, x, y);
    if (std::isinf(r) && std::isfinite(x) && std::isfinite(y) && (!have || std::isfinite(s))) ++n;
    s = r;
    have = true;
  }
  return n;
}

}  // namespace

bool binary64_chain(const Accumulation& a) {
  return a.format == formats::fp64 && a.rounding == Rounding::NearestEven && a.fused &&
         a.order == Order::Sequential && a.promote_every == 0 && a.adder.group == 0 && a.tile.size == 0 &&
         a.splitk.count == 0 && !a.flush.step && !validate(a);
}

const char* binary64_kernel_name(const Accumulation& a, const KernelOptions& opts) {
  const Isa isa = opts.isa();
  if (!binary64_chain(a) || isa == Isa::None) return nullptr;
  return isa == Isa::Avx2 ? "fp64-avx2" : "fp64-avx512";
}

bool gemm_binary64(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                   double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
                   const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts) {
  if (binary64_kernel_name(a, opts) == nullptr || M == 0 || N == 0 || K == 0) return false;
  const Tier tier = tier_of(opts.isa());
  const std::size_t nr = tier.nr, panels = (N + nr - 1) / nr;
  thread_local Scratch a_buf, b_buf;
  const Packed pk{M, N, K, nr, panels, a_buf.get(M * K), b_buf.get(panels * K * nr)};
  pack(pk, A, B, cast_a, cast_b);
  std::vector<double> c_initial;  // only to replay the outputs that end non-finite
  if (stats && accumulate) {
    c_initial.resize(M * N);
    for (std::size_t i = 0; i < M; ++i) std::copy(C + i * ldc, C + i * ldc + N, c_initial.begin() + i * N);
  }
  // Threads split output rows in chunks of whole micro-tiles; every output is computed alike by whichever owns it.
  const int nthreads = threads > 0 ? threads : omp_get_max_threads();
  const std::size_t per = (M + static_cast<std::size_t>(nthreads) - 1) / static_cast<std::size_t>(nthreads);
  const std::size_t chunk = (per + kRows - 1) / kRows * kRows;
  const auto nchunks = static_cast<std::ptrdiff_t>((M + chunk - 1) / chunk);
#pragma omp parallel for num_threads(nthreads) schedule(static, 1) if (nchunks > 1)
  for (std::ptrdiff_t ci = 0; ci < nchunks; ++ci) {
    const std::size_t i_begin = static_cast<std::size_t>(ci) * chunk, i_end = std::min(M, i_begin + chunk);
    double S[kRows * kMaxNr];
    for (std::size_t p = 0; p < panels; ++p) {
      const std::size_t j0 = p * nr, jn = std::min(nr, N - j0);
      for (std::size_t i = i_begin; i < i_end; i += kRows) {
        const std::size_t rows = std::min(kRows, i_end - i);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < nr; ++c)
            S[r * nr + c] = accumulate && c < jn ? C[(i + r) * ldc + j0 + c] : -0.0;
        tier.rows(rows, pk.A + i * K, K, pk.B + p * K * nr, K, S);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < jn; ++c) {
            const double v = S[r * nr + c];
            C[(i + r) * ldc + j0 + c] = std::isnan(v) ? kQuietNaN : v;
          }
      }
    }
  }
  if (stats) {
    std::int64_t overflows = 0;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        if (!std::isfinite(C[i * ldc + j]))
          overflows += replay_overflows(i, j, K, A, B, accumulate, accumulate ? c_initial[i * N + j] : 0.0);
    stats->terms += static_cast<std::int64_t>(M * N * K);
    stats->overflows += overflows;
  }
  return true;
}

bool gemm_ranged_binary64(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A,
                          ConstMatrix B, const KRange* rows, double* C, std::size_t ldc, const KernelOptions& opts) {
  if (binary64_kernel_name(a, opts) == nullptr || M == 0 || N == 0 || K == 0) return false;
  const Tier tier = tier_of(opts.isa());
  const std::size_t nr = tier.nr, panels = (N + nr - 1) / nr;
  thread_local Scratch ranged_a, ranged_b;
  const Packed pk{M, N, K, nr, panels, ranged_a.get(M * K), ranged_b.get(panels * K * nr)};
  pack(pk, A, B, nullptr, nullptr);
  double S[kRows * kMaxNr];
  for (std::size_t p = 0; p < panels; ++p) {
    const std::size_t j0 = p * nr, jn = std::min(nr, N - j0);
    const double* Bp = pk.B + p * K * nr;
    for (std::size_t i = 0; i < M;) {
      // Rows with the same lo (up to kRows) run their common prefix together, then each its own tail.
      const std::size_t lo = rows[i].lo;
      std::size_t g = 1, common = rows[i].hi - lo;
      for (; g < kRows && i + g < M && rows[i + g].lo == lo; ++g) common = std::min(common, rows[i + g].hi - lo);
      std::fill(S, S + g * nr, -0.0);
      tier.rows(g, pk.A + i * K + lo, K, Bp + lo * nr, common, S);
      for (std::size_t r = 0; r < g; ++r)
        if (const std::size_t len = rows[i + r].hi - lo; len > common)
          tier.rows(1, pk.A + (i + r) * K + lo + common, K, Bp + (lo + common) * nr, len - common, S + r * nr);
      for (std::size_t r = 0; r < g; ++r)
        for (std::size_t c = 0; c < jn; ++c) {
          const double v = S[r * nr + c];
          C[(i + r) * ldc + j0 + c] = std::isnan(v) ? kQuietNaN : v;
        }
      i += g;
    }
  }
  return true;
}

}  // namespace roundoff::numerics::kernels
