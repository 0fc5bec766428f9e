#include "ops/backend.hpp"
#include "ops/weight_cast.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/binary32_arith.hpp"
#include "numerics/binary32_values.hpp"
#include "numerics/elementary_fp16.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/pack_cache_derived.hpp"
#include "numerics/round_span.hpp"

namespace roundoff::ops {

namespace {
/// Values per chunk of the span roundings that make several passes (4 KiB of doubles: they stay in L1).
constexpr std::size_t kResultChunk = 512;
}  // namespace

std::span<const double> weight_entry_cast(const Ctx<Emulated>& ctx, std::span<const double> x, Tensor t,
                                          std::size_t slot, std::shared_ptr<const std::vector<double>>& kept) {
  const OpPrecision& p = ctx.precision();
  numerics::kernels::PackCache* cache = ctx.exec().pack_cache;
  if (t != Tensor::W || p.accumulate.adder.group == 0 || !ctx.fast_paths() || cache == nullptr ||
      p.rounding == numerics::Rounding::Stochastic)
    return entry_cast(ctx, x, t, slot);
  const std::string tag = "cast-w " + numerics::name_of(p.storage) + " " + std::to_string(static_cast<int>(p.rounding)) +
                          " daz " + std::to_string(static_cast<int>(p.daz)) + " nan " +
                          std::to_string(static_cast<int>(p.nan));
  kept = numerics::kernels::find_derived(*cache, x.data(), x.size(), tag);
  if (kept && kept->size() == x.size()) return std::span<const double>(*kept);
  kept.reset();
  const std::span<const double> r = entry_cast(ctx, x, t, slot);
  if (numerics::kernels::holds_immutable(*cache, x.data(), x.size()))
    numerics::kernels::store_derived(*cache, x.data(), x.size(), tag, std::vector<double>(r.begin(), r.end()));
  return r;
}

numerics::StochasticBits Ctx<Emulated>::reduction_stream(Key r) const {
  const numerics::StochasticBits b = sub_stream(bits_, r);
  if (prec_.accumulate.rounding == numerics::Rounding::Stochastic)
    if (KeyLog* log = exec_.key_log) log->add(b.stream, KeyLog::kStreamUse);
  return b;
}

double Ctx<Emulated>::sum(const double* x, std::ptrdiff_t inc, std::size_t n, Key r) const {
  double s = 0;
  if (inc == 1) {
    s = numerics::sum(prec_.accumulate, std::span<const double>(x, n), reduction_stream(r));
  } else {
    thread_local std::vector<double> buf;
    buf.resize(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = x[static_cast<std::ptrdiff_t>(i) * inc];
    s = numerics::sum(prec_.accumulate, std::span<const double>(buf.data(), n), reduction_stream(r));
  }
  return to_compute(s, r);
}

double Ctx<Emulated>::dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n,
                          Key r) const {
  return dot_result(numerics::dot(prec_.accumulate, x, incx, y, incy, n, reduction_stream(r)), r);
}

void Ctx<Emulated>::gemm(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix A, numerics::ConstMatrix B,
                         double* C, std::size_t ldc, bool accumulate, Key r) const {
  numerics::gemm(prec_.accumulate, M, N, K, A, B, C, ldc, accumulate, reduction_stream(r), nullptr,
                 omp_in_parallel() ? 1 : 0, exec_.kernels, exec_.pack_cache);
}

double Ctx<Emulated>::gemm_element(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy,
                                  std::size_t K, bool accumulate, double c, Key r, std::size_t index) const {
  // A 1×1 GEMM of row i (A stored transposed, K×1 with ld incx) and column j (K×1 with ld incy) on the stream
  // numerics::gemm gives C_ij of the whole GEMM: sub_stream(bits_, r) advanced by i·N + j.
  const numerics::StochasticBits b = sub_stream(bits_, r);
  double out = c;
  numerics::gemm(prec_.accumulate, 1, 1, K, {x, static_cast<std::size_t>(incx), true},
                 {y, static_cast<std::size_t>(incy), false}, &out, 1, accumulate, {b.seed, b.stream + index}, nullptr, 1,
                 exec_.kernels, nullptr);
  return out;
}

bool Ctx<Emulated>::rows_fast(const numerics::RowBatch& rows, std::span<double> out) const {
  const numerics::Accumulation& a = prec_.accumulate;
  if (!fast_paths() || a.rounding == numerics::Rounding::Stochastic || !numerics::row_kernel_name(a, exec_.kernels))
    return false;
  // Blocks of rows split over the threads (outside a parallel region): independent outputs only.
  constexpr std::size_t kChunk = 64;
  const std::size_t R = rows.length.size();
  const auto chunks = static_cast<std::int64_t>((R + kChunk - 1) / kChunk);
  bool ok = true;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && chunks > 1) reduction(&& : ok)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t r0 = static_cast<std::size_t>(c) * kChunk, n = std::min(kChunk, R - r0);
    const auto off = static_cast<std::ptrdiff_t>(r0);
    numerics::RowBatch part = rows;
    part.length = rows.length.subspan(r0, n);
    part.x = rows.x + off * rows.x_row;
    if (rows.y) part.y = rows.y + off * rows.y_row;
    ok = numerics::reduce_rows(a, part, out.subspan(r0, n), nullptr, exec_.kernels) && ok;
  }
  return ok;
}

bool Ctx<Emulated>::gemm32(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix32 A,
                           numerics::ConstMatrix32 B, float* C, std::size_t ldc) const {
  if (prec_.accumulate.rounding == numerics::Rounding::Stochastic) return false;
  return numerics::kernels::gemm_fast(prec_.accumulate, M, N, K, A, B, C, ldc, false, nullptr,
                                      omp_in_parallel() ? 1 : 0, nullptr, nullptr, exec_.kernels, nullptr);
}

bool Ctx<Emulated>::gemm_ranged32(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix32 A,
                                  numerics::ConstMatrix32 B, std::span<const numerics::KRange> rows, float* C,
                                  std::size_t ldc) const {
  if (prec_.accumulate.rounding == numerics::Rounding::Stochastic || rows.size() != M) return false;
  return numerics::kernels::gemm_ranged_fast(prec_.accumulate, M, N, K, A, B, rows.data(), C, ldc, exec_.kernels);
}

template <class MA, class MB, class TC>
bool Ctx<Emulated>::gemm_in_fast(std::size_t M, std::size_t N, std::size_t K, MA A, MB B, TC* C, std::size_t ldc,
                                 bool accumulate, numerics::kernels::StoreScan* scan) const {
  // The kernels' cast-in-pack rounds to storage, flushes under daz and applies the NaN rule, in that order (as
  // round_stored does).
  if (!span_fast() || prec_.accumulate.rounding == numerics::Rounding::Stochastic) return false;
  const numerics::kernels::OperandCast cast{&storage_, mode_, prec_.nan == NanRule::AneInf, daz_};
  if constexpr (std::is_same_v<TC, float>)
    return numerics::kernels::gemm_fast(prec_.accumulate, M, N, K, A, B, C, ldc, accumulate, nullptr,
                                        omp_in_parallel() ? 1 : 0, &cast, &cast, exec_.kernels, exec_.pack_cache,
                                        scan);
  else
    return numerics::kernels::gemm_fast(prec_.accumulate, M, N, K, A, B, C, ldc, accumulate, nullptr,
                                        omp_in_parallel() ? 1 : 0, &cast, &cast, exec_.kernels, exec_.pack_cache);
}

void Ctx<Emulated>::gemm_in_cast(std::size_t M, std::size_t N, std::size_t K, std::span<const double> a,
                                 bool a_transposed, Tensor ta, std::span<const double> b, bool b_transposed, Tensor tb,
                                 double* C, std::size_t ldc, bool accumulate, Key r) const {
  const std::size_t lda = a_transposed ? M : K, ldb = b_transposed ? K : N;
  std::shared_ptr<const std::vector<double>> kept_a, kept_b;  // hold kept casts for the call
  const std::span<const double> as = weight_entry_cast(*this, a, ta, 0, kept_a),
                                bs = weight_entry_cast(*this, b, tb, 1, kept_b);
  gemm(M, N, K, {as.data(), lda, a_transposed}, {bs.data(), ldb, b_transposed}, C, ldc, accumulate, r);
}

void Ctx<Emulated>::gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const double> a, bool a_transposed,
                            Tensor ta, std::span<const double> b, bool b_transposed, Tensor tb, double* C,
                            std::size_t ldc, bool accumulate, Key r) const {
  const std::size_t lda = a_transposed ? M : K, ldb = b_transposed ? K : N;
  if (gemm_in_fast(M, N, K, numerics::ConstMatrix{a.data(), lda, a_transposed},
                   numerics::ConstMatrix{b.data(), ldb, b_transposed}, C, ldc, accumulate))
    return;
  gemm_in_cast(M, N, K, a, a_transposed, ta, b, b_transposed, tb, C, ldc, accumulate, r);
}

void Ctx<Emulated>::gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a, bool a_transposed,
                            Tensor ta, std::span<const double> b, bool b_transposed, Tensor tb, double* C,
                            std::size_t ldc, bool accumulate, Key r) const {
  const std::size_t lda = a_transposed ? M : K, ldb = b_transposed ? K : N;
  if (gemm_in_fast(M, N, K, numerics::ConstMatrix32{a.data(), lda, a_transposed},
                   numerics::ConstMatrix{b.data(), ldb, b_transposed}, C, ldc, accumulate))
    return;
  gemm_in_cast(M, N, K, widened<double>(a, kWidenA), a_transposed, ta, b, b_transposed, tb, C, ldc, accumulate, r);
}

void Ctx<Emulated>::gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a, bool a_transposed,
                            Tensor ta, std::span<const float> b, bool b_transposed, Tensor tb, double* C,
                            std::size_t ldc, bool accumulate, Key r) const {
  const std::size_t lda = a_transposed ? M : K, ldb = b_transposed ? K : N;
  if (gemm_in_fast(M, N, K, numerics::ConstMatrix32{a.data(), lda, a_transposed},
                   numerics::ConstMatrix32{b.data(), ldb, b_transposed}, C, ldc, accumulate))
    return;
  gemm_in_cast(M, N, K, widened<double>(a, kWidenA), a_transposed, ta, widened<double>(b, kWidenB), b_transposed, tb,
               C, ldc, accumulate, r);
}

bool Ctx<Emulated>::gemm_in_binary32(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a,
                                     bool a_transposed, Tensor, std::span<const double> b, bool b_transposed, Tensor,
                                     float* C, std::size_t ldc, bool accumulate,
                                     numerics::kernels::StoreScan* scan) const {
  const std::size_t lda = a_transposed ? M : K, ldb = b_transposed ? K : N;
  return gemm_in_fast(M, N, K, numerics::ConstMatrix32{a.data(), lda, a_transposed},
                      numerics::ConstMatrix{b.data(), ldb, b_transposed}, C, ldc, accumulate, scan);
}

bool Ctx<Emulated>::gemm_in_binary32(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a,
                                     bool a_transposed, Tensor, std::span<const float> b, bool b_transposed, Tensor,
                                     float* C, std::size_t ldc, bool accumulate,
                                     numerics::kernels::StoreScan* scan) const {
  const std::size_t lda = a_transposed ? M : K, ldb = b_transposed ? K : N;
  return gemm_in_fast(M, N, K, numerics::ConstMatrix32{a.data(), lda, a_transposed},
                      numerics::ConstMatrix32{b.data(), ldb, b_transposed}, C, ldc, accumulate, scan);
}

void Ctx<Emulated>::in_array(std::span<const double> src, std::span<double> dst, Tensor t) const {
  if (mode_ == numerics::Rounding::Stochastic) {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = in(src[i], key(t, i, 0));
  } else {
    round_stored(storage_, src, dst, daz_);
  }
}

void Ctx<Emulated>::in_array(std::span<const float> src, std::span<double> dst, Tensor t) const {
  if (mode_ == numerics::Rounding::Stochastic) {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = in(static_cast<double>(src[i]), key(t, i, 0));
    return;
  }
  widen_then_round(src, dst, daz_);
}

bool Ctx<Emulated>::storage_holds_binary32() const { return numerics::holds_binary32(storage_.format); }

void Ctx<Emulated>::widen_then_round(std::span<const float> src, std::span<double> dst, bool flush) const {
  // Without a flush, the rounding to a storage format that holds every binary32 value leaves each non-NaN value of
  // a binary32 tensor as it is (round_to of a value of the format, in every deterministic mode; the NaN rule acts
  // on NaNs only): a chunk without NaN is the widening alone, any other is rounded in place as before.
  if (!flush && storage_holds_binary32()) {
    for (std::size_t c = 0; c < src.size(); c += kStoreChunk) {
      const std::size_t n = std::min(kStoreChunk, src.size() - c);
      const std::span<double> part = dst.subspan(c, n);
      if (!numerics::widen_binary32_checked(src.subspan(c, n), part, exec_.kernels))
        round_stored(storage_, part, part, false);
    }
    return;
  }
  std::array<double, kStoreChunk> part;
  for (std::size_t c = 0; c < src.size(); c += kStoreChunk) {
    const std::size_t n = std::min(kStoreChunk, src.size() - c);
    numerics::widen_binary32(src.subspan(c, n), part, exec_.kernels);
    round_stored(storage_, std::span<const double>(part.data(), n), dst.subspan(c, n), flush);
  }
}

bool Ctx<Emulated>::results_identity_on_binary32() const {
  // compute and storage both hold every binary32 value and nothing else acts on a value: the roundings to either
  // format return it (round_to of a value of the format, in every mode), the flushes are off, there is no
  // saturation, and the NaN rule touches only NaNs.
  return numerics::holds_binary32(compute_.format) && numerics::holds_binary32(storage_.format) && !ftz_all_ &&
         !ftz_out_ && !(prec_.saturate > 0);
}

bool Ctx<Emulated>::binary32_through() const {
  return binary32_native() && !ftz_all_ && !daz_ && numerics::holds_binary32(storage_.format) &&
         numerics::fits_binary32(storage_.format) && !(prec_.saturate > 0) && exp_lut_ == nullptr &&
         sigmoid_lut_ == nullptr && fast_paths() && numerics::default_mxcsr();
}

bool Ctx<Emulated>::binary16_through() const {
  return compute_.format == numerics::formats::fp16 && storage_.format == numerics::formats::fp16 &&
         mode_ == numerics::Rounding::NearestEven && !ftz_out_ && !ftz_all_ && !daz_ && !(prec_.saturate > 0) &&
         exp_lut_ == nullptr && sigmoid_lut_ == nullptr && fast_paths() && numerics::default_mxcsr();
}

void Ctx<Emulated>::round_to_compute32(std::span<float> x) const {
  numerics::round_array(compute_, numerics::Rounding::NearestEven, std::span<const float>(x), x);
}

bool Ctx<Emulated>::storage_values32(std::span<const float> x) const {
  if (storage_.format == numerics::formats::fp16) return numerics::binary16_values(x, true, exec_.kernels);
  std::array<float, kResultChunk> part;
  for (std::size_t c = 0; c < x.size(); c += kResultChunk) {
    const std::size_t n = std::min(kResultChunk, x.size() - c);
    const std::span<const float> src = x.subspan(c, n);
    numerics::round_array(storage_, numerics::Rounding::NearestEven, src, std::span<float>(part.data(), n));
    for (std::size_t i = 0; i < n; ++i)
      if (!(part[i] == src[i]) && !std::isnan(src[i])) return false;
  }
  return true;
}

bool Ctx<Emulated>::binary32_chain() const {
  return binary32_through() && numerics::binary32_chain(prec_.accumulate);
}

void Ctx<Emulated>::elementary_binary32(numerics::Elementary f, std::span<const float> src,
                                        std::span<float> dst) const {
  // An fp16 compute under nearest-even: a chunk of fp16 values (no NaN) reads the table of f's correctly rounded
  // fp16 results (numerics/elementary_fp16.hpp), the values elementary_span gives them below.
  const bool table = compute_.format == numerics::formats::fp16 && mode_ == numerics::Rounding::NearestEven;
  std::array<double, kResultChunk> part;
  for (std::size_t c = 0; c < src.size(); c += kResultChunk) {
    const std::size_t n = std::min(kResultChunk, src.size() - c);
    if (table && numerics::elementary_fp16_values(f, src.subspan(c, n), dst.subspan(c, n), exec_.kernels)) continue;
    const std::span<double> p(part.data(), n);
    numerics::widen_binary32(src.subspan(c, n), p, exec_.kernels);
    numerics::elementary_span(compute_, mode_, f, p, p, {}, exec_.kernels);
    numerics::narrow_to_binary32(std::span<const double>(p), dst.subspan(c, n), exec_.kernels);
  }
}

void Ctx<Emulated>::round_results(std::span<double> x) const {
  // A chunk of binary32 values (NaN excluded; a binary32 accumulator's results, e.g. the fp32 policy's GEMMs) is
  // left as it is under results_identity_on_binary32(). Any other chunk takes the passes below.
  const bool binary32_identity = results_identity_on_binary32();
  for (std::size_t c = 0; c < x.size(); c += kResultChunk) {
    const std::span<double> part = x.subspan(c, std::min(kResultChunk, x.size() - c));
    if (binary32_identity && numerics::all_binary32(part, exec_.kernels)) continue;
    round_computed(part);
    round_stored(storage_, part, part, ftz_out_);
  }
}

bool Ctx<Emulated>::results_identity_on_binary16() const {
  // compute and storage fp16: the roundings to either return an fp16 value in every mode, stochastic included (no
  // rounding happens); no flush (an fp16 subnormal would go; ftz all sets ftz_out_ too), no saturation; the NaN
  // rule touches only NaNs.
  return compute_.format == numerics::formats::fp16 && storage_.format == numerics::formats::fp16 && !ftz_out_ &&
         !(prec_.saturate > 0);
}

void Ctx<Emulated>::results_binary32(std::span<float> x) const {
  // round_results on the widened chunk leaves it as it is exactly when all_binary32 holds there: no NaN (every
  // float widens to a binary32 value) and the default control register (all_binary32's other condition). Under
  // results_identity_on_binary16 the same holds for a chunk of fp16 values without NaN (an fp16 accumulator's
  // results, e.g. ane-fp16's GEMMs).
  const bool identity = results_identity_on_binary32() && numerics::default_mxcsr();
  const bool identity16 = results_identity_on_binary16();
  std::array<double, kResultChunk> part;
  for (std::size_t c = 0; c < x.size(); c += kResultChunk) {
    const std::span<float> xs = x.subspan(c, std::min(kResultChunk, x.size() - c));
    if (identity && !numerics::any_nan(std::span<const float>(xs), exec_.kernels)) continue;
    if (identity16 && numerics::binary16_values(std::span<const float>(xs), false, exec_.kernels)) continue;
    const std::span<double> p(part.data(), xs.size());
    numerics::widen_binary32(std::span<const float>(xs), p, exec_.kernels);
    round_results(p);
    numerics::narrow_to_binary32(std::span<const double>(p), xs, exec_.kernels);
  }
}

bool Ctx<Emulated>::results_binary32_kept(const numerics::kernels::StoreScan& scan) const {
  // results_binary32's skips: a chunk without NaN under `identity`, a chunk of fp16 values without NaN (the
  // binary16_values scan under the default control register) under `identity16`; here for every chunk at once.
  if (!numerics::default_mxcsr()) return false;
  return (results_identity_on_binary32() && scan.nan_free) || (results_identity_on_binary16() && scan.fp16_values);
}

void Ctx<Emulated>::round_stored(const numerics::RoundingPlan& p, std::span<const double> src,
                                 std::span<double> dst, bool flush) const {
  const bool nan_inf = prec_.nan == NanRule::AneInf;
  if (!nan_inf && !flush) return numerics::round_array(p, mode_, src, dst);
  for (std::size_t c = 0; c < src.size(); c += kResultChunk) {  // flush and NaN rule on each chunk while in L1
    const std::size_t n = std::min(kResultChunk, src.size() - c);
    const std::span<double> part = dst.subspan(c, n);
    numerics::round_array(p, mode_, src.subspan(c, n), part);
    if (flush) flush_span(part, p.min_normal);
    if (nan_inf)
      for (double& v : part) v = nan_rule(v);
  }
}

void Ctx<Emulated>::throw_not_binary32() const {
  throw std::logic_error("ops: a store into binary32 storage under storage format " +
                         numerics::name_of(storage_.format) + ", which does not fit binary32");
}

void Ctx<Emulated>::round_computed(std::span<double> x) const {
  numerics::round_array(compute_, mode_, x, x);
  flush_computed(x);
  if (prec_.saturate > 0)
    for (double& v : x)
      if (std::fabs(v) >= prec_.saturate) v = std::copysign(kInfinity, v);
}

std::vector<Ref> lift(std::span<const double> x) {
  std::vector<Ref> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = x[i];
  return r;
}

}  // namespace roundoff::ops
