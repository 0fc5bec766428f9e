#pragma once
/// \file backend.hpp
/// The two arithmetic backends every op is written over, and the per-call context that carries an op's
/// precision into its body.
///
///   Emulated   values are doubles that are always values of their storage format. Each elementwise
///              operation is rounded once to the op's compute format (numerics::add/mul/div/... with a
///              RoundingPlan built once per OpPrecision); each reduction runs numerics::sum/dot/gemm under the
///              op's Accumulation and is then rounded to the compute format; store() rounds to storage. The
///              ANE fields: exp/sigmoid from the lookup table (approx), reduction results saturated
///              (to_compute), NaN → +inf in in/store (nan). Flush to zero (OpPrecision::ftz, daz): inputs
///              flushed in storage after their entry cast (daz on), outputs flushed in the format they were
///              rounded to (ftz out or all), every compute result flushed in compute (ftz all).
///   Reference  values are MPFR numbers with ROUNDOFF_REFERENCE_DIGITS10 (40) decimal digits (133 bits);
///              the same algorithm in the same order with no format rounding (in/store/constants exact,
///              reductions sequential — at 133 bits the order's effect is below 2^-120 relative to Σ|terms|).
///              It evaluates the exact functions whatever approx says and ignores saturate, nan, ftz and
///              daz, so the shadow reports a table's error or a flush like any rounding.
///
/// Op bodies use only the Ctx<A> methods below, so one template source serves both.
///
/// Stochastic-rounding keys. Every rounding an op call performs takes a Key = key(tensor, element, slot): the
/// tensor whose element it casts or computes, that element's index in the tensor, and which of the element's
/// roundings it is. Stochastic rounding draws bits.draw(key) from the call's stream, so results do not depend
/// on thread count or call order, and no two roundings of one call may share a key (they would share a
/// draw). Conventions: slot 0 of an input tensor is its entry cast (in_array uses it); per-row or per-column
/// values (a row's Σx², a softmax denominator) take Tensor::Row / Tensor::Column with the row as element. A
/// reduction (sum, dot, gemm) takes a key too: its conversion to compute draws that key, its internal
/// roundings draw from the stream sub_stream(bits, key). tests/ops/stochastic_keys_test.cpp runs every op and
/// pass under stochastic rounding with a KeyLog and checks that the keys of each call are distinct.
#include <boost/multiprecision/mpfr.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/arith.hpp"
#include "numerics/binary32_values.hpp"
#include "numerics/elementary_span.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "numerics/row_reduce.hpp"
#include "ops/policy.hpp"

#ifndef ROUNDOFF_REFERENCE_DIGITS10
#define ROUNDOFF_REFERENCE_DIGITS10 40
#endif

namespace roundoff::ops {

/// The reference number type: MPFR, 40 significant decimal digits (133 bits), no expression templates.
using Ref = boost::multiprecision::number<
    boost::multiprecision::mpfr_float_backend<ROUNDOFF_REFERENCE_DIGITS10, boost::multiprecision::allocate_stack>,
    boost::multiprecision::et_off>;

/// Backend tags.
struct Emulated {
  using Value = double;
};
struct Reference {
  using Value = Ref;
};

/// The tensors (index spaces) of stochastic-rounding keys. X2 is an elementwise op's second input (SwiGLU's
/// up projection u, the residual branch f); RunningSum is online attention's running output o (element
/// (score element)·hs + d).
enum class Tensor : std::uint8_t {
  X, X2, W, Y, Dx, Dx2, Dw, Dy, Row, Column,
  Q, K, V, Dq, Dk, Dv, Preatt, Dpreatt, Att, Datt, Out, Dout, Lse, RunningSum, Cos, Sin,
};

/// A stochastic-rounding key (see the file comment). Distinct (tensor, element, slot) with element < 2^48 and
/// slot < 256 give distinct keys: bits = element·2^16 + tensor·2^8 + slot, so the keys of consecutive
/// elements of one (tensor, slot) are 2^16 apart.
struct Key {
  std::uint64_t bits = 0;
  friend constexpr bool operator==(Key, Key) = default;
};
template <std::integral I>
constexpr Key key(Tensor t, I element, unsigned slot) {
  return {static_cast<std::uint64_t>(element) << 16 | static_cast<std::uint64_t>(t) << 8 | slot};
}

/// Stream of the reduction (or running-sum context) keyed r within the stream b.
constexpr numerics::StochasticBits sub_stream(numerics::StochasticBits b, Key r) {
  return {b.seed, numerics::mix64(b.stream * 0x9E3779B97F4A7C15ull + r.bits + 1)};
}

/// Test hook (tests/ops/stochastic_keys_test.cpp): while set in a context's ExecOptions, every stochastic draw of an emulated context
/// appends (stream, key bits), and every reduction that rounds stochastically appends (its stream, kStreamUse),
/// so a test can check that one op call never draws a key twice. nullptr (the default) records nothing; only
/// stochastic draws test the pointer.
struct KeyLog {
  static constexpr std::uint64_t kStreamUse = ~std::uint64_t{0};
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> entries;
  void add(std::uint64_t stream, std::uint64_t k) {
    const std::lock_guard<std::mutex> lock(mutex);
    entries.emplace_back(stream, k);
  }
};

/// How an emulated context computes (never what: every setting gives the same bits, tests/ops check each fast
/// path against the per-element definition). Travels in every Ctx; an ops::Runner owns one for all its contexts
/// (docs/design.md, "No hidden global state").
struct ExecOptions {
  /// The ops' fast paths (batched GEMMs instead of per-element dots, span roundings, lane reductions, ...), on
  /// by default. Off, every op runs its per-element definition: the oracle the tests compare the fast paths with.
  bool fast_paths = true;
  /// The numerics kernels' options (GEMM kernels on/off, the ISA limit), passed to every numerics call.
  numerics::KernelOptions kernels{};
  /// The B-operand pack cache of the GEMMs (not owned; nullptr: none). The Runner points it at its own.
  numerics::kernels::PackCache* pack_cache = nullptr;
  /// The capacity of the Runner's own pack cache (numerics::kernels::PackCache; memory against repacking, never
  /// a bit).
  std::size_t pack_cache_bytes = numerics::kernels::PackCache::kDefaultCapacity;
  /// Test hook (not owned; nullptr: record nothing): see KeyLog.
  KeyLog* key_log = nullptr;
};

template <class A>
class Ctx;

/// Emulated context: the op's OpPrecision with its RoundingPlans, and the stochastic stream of this call.
template <>
class Ctx<Emulated> {
 public:
  using V = double;
  explicit Ctx(const OpPrecision& p, numerics::StochasticBits bits = {}, const ExecOptions& exec = {})
      : prec_(p), storage_(p.storage), compute_(p.compute), mode_(p.rounding), bits_(bits), exec_(exec),
        native_(native_kind(p.compute, p.rounding)), exp_lut_(table(p, numerics::LutFunction::Exp)),
        sigmoid_lut_(table(p, numerics::LutFunction::Sigmoid)), daz_(p.daz == Daz::On),
        ftz_out_(p.ftz != Ftz::Off), ftz_all_(p.ftz == Ftz::All) {}

  const OpPrecision& precision() const { return prec_; }
  const ExecOptions& exec() const { return exec_; }
  /// exec().fast_paths: whether ops may take their fast paths.
  bool fast_paths() const { return exec_.fast_paths; }
  const numerics::RoundingPlan& storage_plan() const { return storage_; }
  numerics::StochasticBits bits() const { return bits_; }
  void set_bits(numerics::StochasticBits b) { bits_ = b; }

  // Every rounding below is: round, then the flush (ftz / daz), then the NaN rule or the saturation. A flushed
  // value is a signed zero, which is not NaN and does not reach a saturation limit (L > 0), so the order of
  // the flush among those rules changes no bits.

  /// v flushed in a format whose smallest normal is `tiny` (numerics::min_normal): a zero of v's sign when
  /// 0 < |v| < tiny (subnormal there), else v (zeros, normals, infinities and NaN unchanged).
  static double flushed(double v, double tiny) { return std::fabs(v) < tiny ? std::copysign(0.0, v) : v; }

  /// Input cast on entry: x rounded to storage (identity for values already in storage), flushed in storage
  /// under daz on; NaN → +inf under the AneInf rule.
  double in(double x, Key k) const {
    return nan_rule(flush_in(numerics::round_to(storage_, mode_, x, draw(k))));
  }
  /// Output / saved tensor: x rounded to storage, flushed there under ftz out/all (NaN → +inf under AneInf).
  double store(double x, Key k) const {
    return nan_rule(flush_out(numerics::round_to(storage_, mode_, x, draw(k)), storage_));
  }
  /// x rounded to another format (tensor roles such as AdamW's moments), in this op's mode; flushed in that
  /// format under ftz out/all.
  double store_to(const numerics::RoundingPlan& p, double x, Key k) const {
    return nan_rule(flush_out(numerics::round_to(p, mode_, x, draw(k)), p));
  }
  /// Constant c (given in binary64) in the compute format, round-to-nearest-even. Not a result: never flushed.
  double c(double x) const { return numerics::round_to(compute_, numerics::Rounding::NearestEven, x); }
  /// A reduction result (in the accumulator format) converted to compute, flushed in compute under ftz all,
  /// then the op's saturation: with saturate = L > 0, |v| >= L becomes ±inf.
  double to_compute(double x, Key k) const {
    const double v = flush_compute(numerics::round_to(compute_, mode_, x, draw(k)));
    return prec_.saturate > 0 && std::fabs(v) >= prec_.saturate ? std::copysign(kInfinity, v) : v;
  }

  // The elementwise operations: one rounding to compute, then ftz all's flush in compute.
  double add(double a, double b, Key k) const {
    double r;
    return flush_compute(native(a, b, [](auto x, auto y) { return x + y; }, r)
                             ? r
                             : numerics::add(compute_, mode_, a, b, draw(k)));
  }
  double sub(double a, double b, Key k) const {
    double r;
    return flush_compute(native(a, b, [](auto x, auto y) { return x - y; }, r)
                             ? r
                             : numerics::sub(compute_, mode_, a, b, draw(k)));
  }
  double mul(double a, double b, Key k) const {
    double r;
    return flush_compute(native(a, b, [](auto x, auto y) { return x * y; }, r)
                             ? r
                             : numerics::mul(compute_, mode_, a, b, draw(k)));
  }
  double div(double a, double b, Key k) const {
    double r;
    return flush_compute(native(a, b, [](auto x, auto y) { return x / y; }, r)
                             ? r
                             : numerics::div(compute_, mode_, a, b, draw(k)));
  }
  double sqrt(double a, Key k) const {
    double r;
    return flush_compute(native(a, a, [](auto x, auto) { return std::sqrt(x); }, r)
                             ? r
                             : numerics::sqrt(compute_, mode_, a, draw(k)));
  }
  /// exp and sigmoid: correctly rounded in compute, or the ANE table's fp16 value rounded to compute.
  double exp(double a, Key k) const {
    return flush_compute(exp_lut_ ? numerics::round_to(compute_, mode_, (*exp_lut_)(a), draw(k))
                                  : numerics::exp(compute_, mode_, a, draw(k)));
  }
  double log(double a, Key k) const { return flush_compute(numerics::log(compute_, mode_, a, draw(k))); }
  double sigmoid(double a, Key k) const {
    return flush_compute(sigmoid_lut_ ? numerics::round_to(compute_, mode_, (*sigmoid_lut_)(a), draw(k))
                                      : numerics::sigmoid(compute_, mode_, a, draw(k)));
  }
  double rsqrt(double a, Key k) const { return flush_compute(numerics::rsqrt(compute_, mode_, a, draw(k))); }
  double sin(double a, Key k) const { return flush_compute(numerics::sin(compute_, mode_, a, draw(k))); }
  double cos(double a, Key k) const { return flush_compute(numerics::cos(compute_, mode_, a, draw(k))); }
  /// tanh and erf: correctly rounded in compute (numerics::elementary; no ANE table models them).
  double tanh(double a, Key k) const { return flush_compute(numerics::tanh(compute_, mode_, a, draw(k))); }
  double erf(double a, Key k) const { return flush_compute(numerics::erf(compute_, mode_, a, draw(k))); }
  /// x[i] flushed in compute under ftz all (nothing otherwise): for op span paths that round compute results
  /// themselves (ops/span_arith.cpp), so that they give add/sub/mul/div's bits.
  void flush_computed(std::span<double> x) const {
    if (ftz_all_) flush_span(x, compute_.min_normal);
  }
  /// Σ_{i<n} x[i·inc] under the accumulation, rounded to compute. r keys the reduction (its stochastic stream
  /// and its conversion to compute).
  double sum(const double* x, std::ptrdiff_t inc, std::size_t n, Key r) const;
  /// Σ x[i·incx]·y[i·incy] under the accumulation, rounded to compute.
  double dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n,
             Key r) const;
  /// C(M×N) (+)= A(M×K)·B(K×N), each C_ij a dot under the accumulation (numerics::gemm); C is left in the
  /// accumulator format. One thread inside an already parallel region, all threads otherwise.
  void gemm(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix A, numerics::ConstMatrix B, double* C,
            std::size_t ldc, bool accumulate, Key r) const;
  /// gemm() of the operands cast on entry: a holds the whole tensor ta (M·K values, row-major M×K, or K×M when
  /// a_transposed), b the tensor tb (K·N, K×N or N×K); the result is bit for bit that of
  /// gemm(M, N, K, in_array(a), in_array(b), ...). With the fast paths on, a deterministic mode and a kernel for
  /// the accumulation, the casts happen while the kernel packs its operands (no cast copy of either tensor);
  /// otherwise they are made in scratch_buffer slots 0 and 1.
  void gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const double> a, bool a_transposed, Tensor ta,
               std::span<const double> b, bool b_transposed, Tensor tb, double* C, std::size_t ldc, bool accumulate,
               Key r) const;
  /// gemm_in with a binary32 a (activations in binary32 storage; b binary64 or binary32): the kernels read the floats
  /// in place (numerics::kernels::gemm_fast's ConstMatrix32 forms, the same bits as on the values widened); where no
  /// kernel takes the product, the binary32 operands are widened into scratch_buffer slots kWidenA / kWidenB and the
  /// binary64 gemm_in runs.
  void gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a, bool a_transposed, Tensor ta,
               std::span<const double> b, bool b_transposed, Tensor tb, double* C, std::size_t ldc, bool accumulate,
               Key r) const;
  void gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a, bool a_transposed, Tensor ta,
               std::span<const float> b, bool b_transposed, Tensor tb, double* C, std::size_t ldc, bool accumulate,
               Key r) const;
  /// gemm_in into a binary32 C (an output in binary32 storage, its current values the initial sums when
  /// `accumulate`): true when a kernel computed it, C then holding the accumulator's results (binary32 values, as
  /// the binary64 C would hold them) for results_binary32; false, C untouched, when no kernel takes it (the caller
  /// then runs the binary64 form on a widened C).
  /// `scan`: what the stored results hold, found as the kernels store them (numerics::kernels::StoreScan), for
  /// results_binary32_kept.
  bool gemm_in_binary32(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a, bool a_transposed,
                        Tensor ta, std::span<const double> b, bool b_transposed, Tensor tb, float* C, std::size_t ldc,
                        bool accumulate, numerics::kernels::StoreScan* scan = nullptr) const;
  bool gemm_in_binary32(std::size_t M, std::size_t N, std::size_t K, std::span<const float> a, bool a_transposed,
                        Tensor ta, std::span<const float> b, bool b_transposed, Tensor tb, float* C, std::size_t ldc,
                        bool accumulate, numerics::kernels::StoreScan* scan = nullptr) const;
  /// result_array's span_fast form on a binary32 output computed by gemm_in_binary32: x[i] ← store(to_compute(x[i]))
  /// as round_results gives it on the widened values, chunk by chunk in L1 (a chunk without NaN under
  /// round_results' identity case is left as it is; any other is widened, rounded and narrowed back, exactly since
  /// the storage fits binary32).
  void results_binary32(std::span<float> x) const;
  /// True when results_binary32 leaves every chunk of a gemm_in_binary32 output as it is, known from the scan its
  /// kernels made as they stored it: no NaN under round_results' identity case on binary32 values, or fp16 values
  /// without NaN under its identity case on fp16 values (the conditions of results_binary32's two skips, over
  /// the whole output at once). The caller may then skip results_binary32.
  bool results_binary32_kept(const numerics::kernels::StoreScan& scan) const;
  /// C_ij of gemm(M, N, K, A, B, C, ldc, accumulate, r) alone, index = i·N + j: Σ_k x[k·incx]·y[k·incy] (row i
  /// of A, column j of B) under the accumulation, c (the current C_ij) entering the accumulator first when
  /// `accumulate`, with the stochastic stream that GEMM gives C_ij (numerics::gemm: sub_stream(bits, r) advanced by
  /// the index); left in the accumulator format. The per-element form of a GEMM, for op references
  /// (ops/matmul.hpp) and their tests: bit for bit C_ij of the whole GEMM, in every mode.
  double gemm_element(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t K,
                      bool accumulate, double c, Key r, std::size_t index) const;
  /// True when gemm() gives every C_ij the bits dot() gives before its conversion to compute, so that ops may
  /// batch their dots into GEMMs (the SIMD kernels). Holds whenever the accumulation does not round
  /// stochastically: numerics::gemm and numerics::dot then run the same reduction per element (or a kernel
  /// bit-identical to it) and only their stochastic streams would differ. The ops' own rounding (prec.rounding,
  /// e.g. stochastic stores) is unaffected: dot_result applies dot()'s conversion with dot()'s key.
  /// False while fast_paths() is off.
  bool gemm_is_dot() const { return fast_paths() && prec_.accumulate.rounding != numerics::Rounding::Stochastic; }
  /// C(M×N) = A·B with the k-range rows[i] for output row i (numerics::gemm_ranged: each C_ij the dot of its
  /// range in ascending k, under the accumulation), left in the accumulator format. In the calling thread.
  void gemm_ranged(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix A, numerics::ConstMatrix B,
                   std::span<const numerics::KRange> rows, double* C, std::size_t ldc, Key r) const {
    numerics::gemm_ranged(prec_.accumulate, M, N, K, A, B, rows, C, ldc, reduction_stream(r), exec_.kernels);
  }
  /// gemm() (C = A·B, no initial C) and gemm_ranged() of binary32 operands into a binary32 C, on a kernel only
  /// (numerics::kernels::gemm_fast and gemm_ranged_fast, ConstMatrix32 forms; gemm32 on one thread inside a parallel
  /// region, as gemm()): true when computed, C then holding bit for bit what gemm() / gemm_ranged() give on the
  /// operands widened (binary32 values, left in the accumulator format); false, C untouched, when no kernel takes
  /// the product (the accumulation rounds stochastically, the fast paths are off, or the kernels do not handle the
  /// accumulation or the inputs): the caller then runs its binary64 form. No key: the stochastic streams are
  /// never drawn.
  bool gemm32(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix32 A, numerics::ConstMatrix32 B,
              float* C, std::size_t ldc) const;
  bool gemm_ranged32(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix32 A, numerics::ConstMatrix32 B,
                     std::span<const numerics::KRange> rows, float* C, std::size_t ldc) const;
  /// compute_array on the results of gemm32 / gemm_ranged32, none NaN, under binary32_through() or
  /// binary16_through(): to_compute's rounding with no flush and no saturation (neither allows one) — binary32 RNE,
  /// which leaves the kernels' binary32 results as they are, or fp16 RNE (round_to_compute32), which leaves them as
  /// they are when the accumulator is fp16 too (its results are then values of compute).
  void compute_binary32(std::span<float> x) const {
    if (!binary32_through() && !(prec_.accumulate.format == compute_.format)) round_to_compute32(x);
  }
  /// dot()'s conversion of the accumulator value s of the reduction keyed r to compute.
  double dot_result(double s, Key r) const { return to_compute(s, r); }
  /// x[i] ← dot_result(x[i], kc(i)): reduction results (a GEMM's outputs) converted to compute, bit for bit
  /// (span_fast: numerics::round_array then the saturation, as result_array).
  template <class KC>
  void compute_array(std::span<double> x, KC&& kc) const {
    if (span_fast()) return round_computed(x);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = to_compute(x[i], kc(i));
  }
  /// Tensor t cast on entry as a whole array: dst[i] = in(src[i], key(t, i, 0)). dst may be src.
  void in_array(std::span<const double> src, std::span<double> dst, Tensor t) const;
  /// in_array of a tensor held in binary32 storage: each float widened exactly, then cast (chunks of kStoreChunk
  /// values widened on the stack, so that the tensor is read once).
  void in_array(std::span<const float> src, std::span<double> dst, Tensor t) const;
  /// Many independent reductions: out[r] = dot(x + r·x_row, x_step, y + r·y_row, y_step, rows.length[r], kf(r))
  /// (sum(x + r·x_row, x_step, length, kf(r)) when rows.y is null) for every r, bit for bit. When fast_paths() is on
  /// and the accumulation does not round stochastically (its streams are then never drawn), the reductions run
  /// in numerics::reduce_rows' SIMD lanes (rows across lanes, each keeping its own order and roundings; blocks
  /// of rows split over the threads outside a parallel region) and each result takes dot()'s conversion to
  /// compute with its key; otherwise, or without a lane kernel, the per-reduction calls run.
  template <class KeyFn>
  void dot_rows(const numerics::RowBatch& rows, std::span<double> out, KeyFn&& kf) const {
    const std::size_t R = rows.length.size();
    if (rows_fast(rows, out)) {
      for (std::size_t r = 0; r < R; ++r) out[r] = to_compute(out[r], kf(r));
      return;
    }
    for (std::size_t r = 0; r < R; ++r) {
      const auto ri = static_cast<std::ptrdiff_t>(r);
      out[r] = rows.y ? dot(rows.x + ri * rows.x_row, rows.x_step, rows.y + ri * rows.y_row, rows.y_step,
                            rows.length[r], kf(r))
                      : sum(rows.x + ri * rows.x_row, rows.x_step, rows.length[r], kf(r));
    }
  }

  // Span forms of store / store_to / to_compute. Each equals the per-element calls with the keys kf(i), bit
  // for bit. Fast (fast_paths() on, mode not stochastic): numerics::round_array (round_to's own fast path on
  // AVX-512 lanes, numerics/round_span.hpp, which rounds identically to round_to) followed by the same NaN
  // rule / saturation, value by value. Otherwise, and always under stochastic rounding (draws keyed per
  // element), the per-element calls themselves. dst may alias src.

  /// dst[i] = store(src[i], kf(i)).
  template <class KeyFn>
  void store_array(std::span<const double> src, std::span<double> dst, KeyFn&& kf) const {
    store_to_array(storage_, src, dst, kf);
  }
  /// dst[i] = store_to(p, src[i], kf(i)).
  template <class KeyFn>
  void store_to_array(const numerics::RoundingPlan& p, std::span<const double> src, std::span<double> dst,
                      KeyFn&& kf) const {
    if (span_fast()) return round_stored(p, src, dst, ftz_out_);
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = store_to(p, src[i], kf(i));
  }
  // Binary32 storage (issue 45, typed storage; docs/design.md "Typed storage"): a tensor whose storage format
  // fits binary32 (numerics::fits_binary32) may live in `float`s. Every value of the format is then a binary32
  // value, so widening a stored float gives exactly the binary64 value the binary64 tensor holds, and the op
  // computes on the same values; only the loads and stores change.

  /// Whether this entry's storage format fits binary32, so that its outputs may be stored in floats.
  bool binary32_storage() const { return numerics::fits_binary32(storage_.format); }
  /// Throws std::logic_error unless binary32_storage(): for op entry points taking binary32 tensors, before any
  /// parallel region (the check inside store_array below then cannot fire).
  void require_binary32_storage() const {
    if (!binary32_storage()) throw_not_binary32();
  }
  /// dst[i] = store(src[i], kf(i)) for src held in binary32 storage (each float widened exactly first, a chunk of
  /// kStoreChunk values at a time on the stack, so that src is read once).
  template <class KeyFn>
  void store_array(std::span<const float> src, std::span<double> dst, KeyFn&& kf) const {
    if (span_fast()) return widen_then_round(src, dst, ftz_out_);  // store_to_array's fast path, fused
    std::array<double, kStoreChunk> part;
    for (std::size_t c = 0; c < src.size(); c += kStoreChunk) {
      const std::size_t n = std::min(kStoreChunk, src.size() - c);
      numerics::widen_binary32(src.subspan(c, n), part, exec_.kernels);
      store_to_array(storage_, std::span<const double>(part.data(), n), dst.subspan(c, n),
                     [&](std::size_t j) { return kf(c + j); });
    }
  }
  /// dst[i] = store(src[i], kf(i)) into binary32 storage: the value store() gives, which is a binary32 value when
  /// binary32_storage() (std::logic_error otherwise: the narrowing would round a second time). Chunks of
  /// kStoreChunk values are stored in binary64 on the stack, then narrowed (exactly).
  template <class KeyFn>
  void store_array(std::span<const double> src, std::span<float> dst, KeyFn&& kf) const {
    if (!binary32_storage()) throw_not_binary32();
    std::array<double, kStoreChunk> part;
    for (std::size_t c = 0; c < src.size(); c += kStoreChunk) {
      const std::size_t n = std::min(kStoreChunk, src.size() - c);
      store_to_array(storage_, src.subspan(c, n), std::span<double>(part.data(), n),
                     [&](std::size_t j) { return kf(c + j); });
      numerics::narrow_to_binary32(std::span<const double>(part.data(), n), dst.subspan(c, n), exec_.kernels);
    }
  }
  /// x[i] ← store(to_compute(x[i], kc(i)), ks(i)): reduction results (e.g. a GEMM's outputs, left in the
  /// accumulator format) converted to compute, saturated, then stored.
  template <class KC, class KS>
  void result_array(std::span<double> x, KC&& kc, KS&& ks) const {
    if (span_fast()) return round_results(x);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = store(to_compute(x[i], kc(i)), ks(i));
  }
  /// Span forms of exp / sigmoid: dst[i] = exp(src[i], kf(i)) (sigmoid(src[i], kf(i))) for every i, bit for
  /// bit, in every mode. Exact functions: numerics::elementary_span (vectorised, numerics/elementary_span.hpp),
  /// with the per-element draws under stochastic rounding. ANE tables: the table's values rounded to compute by
  /// numerics::round_array (per element under stochastic rounding). With fast_paths() off, the per-element
  /// calls. dst may alias src.
  template <class KeyFn>
  void exp_array(std::span<const double> src, std::span<double> dst, KeyFn&& kf) const {
    elementary_array(numerics::Elementary::Exp, exp_lut_, src, dst, kf);
  }
  template <class KeyFn>
  void sigmoid_array(std::span<const double> src, std::span<double> dst, KeyFn&& kf) const {
    elementary_array(numerics::Elementary::Sigmoid, sigmoid_lut_, src, dst, kf);
  }
  /// True when compute is IEEE binary32 with round-to-nearest-even and ftz is off: every + − × ÷ √ on
  /// binary32 operands with a finite result is the hardware binary32 operation (the native path below), and
  /// every value stored keeps its subnormals, so vectorised op paths may use hardware binary32 arithmetic
  /// throughout. Under ftz out or all they decline: a stored value that the flush changes may feed later
  /// operations (AdamW's moment m into m̂), so a flush pass after the fact would not give the same bits.
  bool binary32_native() const { return native_ == Native::Binary32 && !ftz_out_; }
  /// True when compute is IEEE binary32 with round-to-nearest-even, whatever ftz says: for vectorised paths
  /// that apply precision().ftz's flushes themselves (AdamW's binary32 path).
  bool binary32_compute() const { return native_ == Native::Binary32; }
  /// True when this entry computes and stores in IEEE binary32 itself, so that an op on binary32 tensors may run
  /// in hardware binary32 from its loads to its stores: compute is binary32 with round-to-nearest-even, the
  /// storage format holds exactly binary32's values (numerics::holds_binary32 and fits_binary32), no flush (ftz,
  /// daz), no saturation, no ANE table for exp or sigmoid, the fast paths on and the default control register
  /// (numerics::default_mxcsr). Then every entry cast and store returns its non-NaN value, and every + − × ÷ of
  /// binary32 values in hardware is the correctly rounded result add/sub/mul/div give (numerics/binary32_arith.hpp);
  /// exp and sigmoid go through elementary_binary32. NaN is the exception (the NaN rule, the payload of the
  /// per-element path): the ops' binary32 bodies scan what they store and take their binary64 path for a row that
  /// holds a NaN. The keys play no part (every rounding is deterministic).
  bool binary32_through() const;
  /// The binary16 twin of binary32_through: compute and storage both IEEE binary16 (fp16) with round-to-nearest-even,
  /// no flush (ftz, daz), no saturation, no ANE table, the fast paths on and the default control register. Then the
  /// ops' binary32 bodies run as they are, each hardware binary32 + − × ÷ of fp16 values rounded once more to fp16
  /// in the same pass (arith_binary32: numerics::binary32_arith_fp16), which gives the correctly rounded fp16
  /// result add/sub/mul/div give: for fp16 operands (p = 11, exponents in [−24, 15]) a product is exact in binary32
  /// (22 bits, inside its normal
  /// range); a sum or difference is exact or rounded twice, innocuous since 24 ≥ 2p + 2 (Figueroa, as in
  /// ops/span_arith.hpp); a quotient lies in [2^−40, 2^40] and its double rounding is innocuous by the argument of
  /// docs/numerics.md, "Division on spans", with 24 bits for 53 (|δ| > 2^(e_m − 2p) exceeds half a binary32 ulp,
  /// 2^(e_m − 24)), subnormal results included; overflow rounds to ±inf in both. Exp and sigmoid take the compute
  /// plan (elementary_binary32). Every entry cast and store returns its non-NaN fp16 value provided the tensors
  /// read hold fp16 values, which the bodies check per call or, elementwise, per unit as it runs
  /// (binary32_through<A, T>(ctx, read), UnitThrough; storage_values32).
  /// NaN as under binary32_through.
  bool binary16_through() const;
  /// x[i] = round(compute, nearest-even, x[i]) for binary32 values (the fp16 rounding of binary16_through's steps).
  void round_to_compute32(std::span<float> x) const;
  /// True when every non-NaN x[i] is a value of storage (round_stored would return it).
  bool storage_values32(std::span<const float> x) const;
  /// binary32_through() and the accumulation is the plain binary32 chain (numerics::binary32_chain): the ops' row
  /// reductions on binary32 rows may then run as numerics::binary32_chain_rows, whose results are the reductions'
  /// (their conversion to compute the identity) for rows without NaN.
  bool binary32_chain() const;
  /// dst[i] = exp(src[i]) or sigmoid(src[i]) (f) under binary32_through(): numerics::elementary_span in compute on
  /// the widened values, chunk by chunk on the stack, narrowed back exactly (the results are binary32 values); a
  /// chunk of fp16 values under an fp16 compute with nearest-even reads the same results from a table
  /// (numerics::elementary_fp16_values).
  void elementary_binary32(numerics::Elementary f, std::span<const float> src, std::span<float> dst) const;

 private:
  /// Native fast path of add/sub/mul/div/sqrt: when the compute format IS IEEE binary32 (or binary64) with
  /// round-to-nearest-even, the hardware operation on operands that are exactly values of that format is the
  /// correctly rounded result numerics:: would return (IEEE 754 §5.1; the build has -ffp-contract=off and no
  /// flush-to-zero). Operands outside the format (e.g. binary64 storage under an fp32 compute) and non-finite
  /// results take the numerics:: path. ftz all's flush follows either path (the callers apply flush_compute).
  /// tests/ops/native_path_test.cpp checks the two agree bit for bit.
  enum class Native : std::uint8_t { None, Binary32, Binary64 };
  static Native native_kind(const numerics::Format& f, numerics::Rounding m) {
    if (m != numerics::Rounding::NearestEven) return Native::None;
    if (f == numerics::formats::fp32) return Native::Binary32;
    if (f == numerics::formats::fp64) return Native::Binary64;
    return Native::None;
  }
  template <class Op>
  bool native(double a, double b, Op&& op, double& r) const {
    switch (native_) {
      case Native::None: return false;
      case Native::Binary32: {
        const float fa = static_cast<float>(a), fb = static_cast<float>(b);
        if (static_cast<double>(fa) != a || static_cast<double>(fb) != b) return false;
        r = static_cast<double>(static_cast<float>(op(fa, fb)));
        return std::isfinite(r);
      }
      case Native::Binary64: r = op(a, b); return std::isfinite(r);
    }
    return false;
  }
  bool span_fast() const { return fast_paths() && mode_ != numerics::Rounding::Stochastic; }
  template <class KeyFn>
  void elementary_array(numerics::Elementary f, const numerics::Lut* lut, std::span<const double> src,
                        std::span<double> dst, KeyFn&& kf) const {
    const auto one = [&](std::size_t i) {
      return f == numerics::Elementary::Exp ? exp(src[i], kf(i)) : sigmoid(src[i], kf(i));
    };
    if (!fast_paths() || (lut && mode_ == numerics::Rounding::Stochastic)) {
      for (std::size_t i = 0; i < src.size(); ++i) dst[i] = one(i);
      return;
    }
    if (lut) {
      for (std::size_t i = 0; i < src.size(); ++i) dst[i] = (*lut)(src[i]);
      numerics::round_array(compute_, mode_, dst, dst);
      return flush_computed(dst);
    }
    thread_local std::vector<std::uint64_t> draws;
    draws.clear();
    if (mode_ == numerics::Rounding::Stochastic)
      for (std::size_t i = 0; i < src.size(); ++i) draws.push_back(draw(kf(i)));
    numerics::elementary_span(compute_, mode_, f, src, dst, draws, exec_.kernels);
    flush_computed(dst);
  }
  /// dot_rows' lane path: the accumulator values of every reduction, or false (out untouched).
  bool rows_fast(const numerics::RowBatch& rows, std::span<double> out) const;
  /// dst = nan_rule(round(p, src)) in a deterministic mode, through numerics::round_array; with `flush`, each
  /// value flushed in p's format between the two (daz for entry casts, ftz out/all for stores).
  static constexpr std::size_t kStoreChunk = 256;
  /// dst = round_stored(storage, widened src) with `flush`, in a deterministic mode (in_array's and store_array's
  /// fast path for binary32 tensors).
  void widen_then_round(std::span<const float> src, std::span<double> dst, bool flush) const;
  bool storage_holds_binary32() const;
  [[noreturn]] void throw_not_binary32() const;
  void round_stored(const numerics::RoundingPlan& p, std::span<const double> src, std::span<double> dst,
                    bool flush) const;
  /// x = to_compute(x) in a deterministic mode: round_array to compute, ftz all's flush, then the saturation.
  void round_computed(std::span<double> x) const;
  /// x = store(to_compute(x)) in a deterministic mode: round_computed then round_stored, chunk by chunk (each
  /// chunk's four passes stay in L1).
  void round_results(std::span<double> x) const;
  /// round_results leaves every non-NaN binary32 value as it is (its identity case; see there).
  bool results_identity_on_binary32() const;
  /// round_results leaves every non-NaN fp16 value as it is (compute and storage fp16, no flush, no saturation).
  bool results_identity_on_binary16() const;
  /// The kernel attempt of gemm_in (span_fast, deterministic accumulation; entry casts while packing).
  template <class MA, class MB, class TC>
  bool gemm_in_fast(std::size_t M, std::size_t N, std::size_t K, MA A, MB B, TC* C, std::size_t ldc,
                    bool accumulate, numerics::kernels::StoreScan* scan = nullptr) const;
  /// gemm_in after the kernel attempt: the operands cast on entry into scratch slots 0 and 1 (or kept weight
  /// casts), then gemm().
  void gemm_in_cast(std::size_t M, std::size_t N, std::size_t K, std::span<const double> a, bool a_transposed,
                    Tensor ta, std::span<const double> b, bool b_transposed, Tensor tb, double* C, std::size_t ldc,
                    bool accumulate, Key r) const;
  /// sub_stream(bits_, r), logged as a stream use when the accumulation rounds stochastically.
  numerics::StochasticBits reduction_stream(Key r) const;
  std::uint64_t draw(Key k) const {
    if (mode_ != numerics::Rounding::Stochastic) return 0;
    if (KeyLog* log = exec_.key_log) [[unlikely]]
      log->add(bits_.stream, k.bits);
    return bits_.draw(k.bits);
  }
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  static void flush_span(std::span<double> x, double tiny) {
    for (double& v : x) v = flushed(v, tiny);
  }
  double flush_in(double v) const { return daz_ ? flushed(v, storage_.min_normal) : v; }
  double flush_out(double v, const numerics::RoundingPlan& p) const { return ftz_out_ ? flushed(v, p.min_normal) : v; }
  double flush_compute(double v) const { return ftz_all_ ? flushed(v, compute_.min_normal) : v; }
  double nan_rule(double v) const { return prec_.nan == NanRule::AneInf && std::isnan(v) ? kInfinity : v; }
  static const numerics::Lut* table(const OpPrecision& p, numerics::LutFunction f) {
    switch (p.approx.kind) {
      case ApproxKind::Exact: return nullptr;
      case ApproxKind::AneLut: return &numerics::lut_for(f, lut_spec(p.approx, f));
    }
    return nullptr;
  }
  OpPrecision prec_;
  numerics::RoundingPlan storage_, compute_;
  numerics::Rounding mode_;
  numerics::StochasticBits bits_;
  ExecOptions exec_;
  Native native_;
  const numerics::Lut* exp_lut_;
  const numerics::Lut* sigmoid_lut_;
  bool daz_;      ///< prec.daz == On: inputs flushed in storage
  bool ftz_out_;  ///< prec.ftz != Off: written values flushed in their format
  bool ftz_all_;  ///< prec.ftz == All: compute results flushed in compute
};

/// Reference context: exact (133-bit) arithmetic, same algorithm, no format roundings.
template <>
class Ctx<Reference> {
 public:
  using V = Ref;
  explicit Ctx(const OpPrecision& p, numerics::StochasticBits bits = {}, const ExecOptions& exec = {})
      : prec_(p), storage_(p.storage), bits_(bits), exec_(exec) {}

  const OpPrecision& precision() const { return prec_; }
  const ExecOptions& exec() const { return exec_; }
  bool fast_paths() const { return exec_.fast_paths; }
  const numerics::RoundingPlan& storage_plan() const { return storage_; }
  numerics::StochasticBits bits() const { return bits_; }
  void set_bits(numerics::StochasticBits b) { bits_ = b; }

  Ref in(const Ref& x, Key) const { return x; }
  Ref store(const Ref& x, Key) const { return x; }
  Ref store_to(const numerics::RoundingPlan&, const Ref& x, Key) const { return x; }
  Ref c(double x) const { return Ref(x); }
  Ref to_compute(const Ref& x, Key) const { return x; }

  Ref add(const Ref& a, const Ref& b, Key) const { return a + b; }
  Ref sub(const Ref& a, const Ref& b, Key) const { return a - b; }
  Ref mul(const Ref& a, const Ref& b, Key) const { return a * b; }
  Ref div(const Ref& a, const Ref& b, Key) const { return a / b; }
  Ref sqrt(const Ref& a, Key) const { return boost::multiprecision::sqrt(a); }
  Ref exp(const Ref& a, Key) const { return boost::multiprecision::exp(a); }
  Ref log(const Ref& a, Key) const { return boost::multiprecision::log(a); }
  Ref sigmoid(const Ref& a, Key) const { return Ref(1) / (Ref(1) + boost::multiprecision::exp(-a)); }
  Ref rsqrt(const Ref& a, Key) const { return Ref(1) / boost::multiprecision::sqrt(a); }
  Ref sin(const Ref& a, Key) const { return boost::multiprecision::sin(a); }
  Ref cos(const Ref& a, Key) const { return boost::multiprecision::cos(a); }
  Ref tanh(const Ref& a, Key) const { return boost::multiprecision::tanh(a); }
  Ref erf(const Ref& a, Key) const { return boost::multiprecision::erf(a); }

  Ref sum(const Ref* x, std::ptrdiff_t inc, std::size_t n, Key) const {
    Ref s = 0;
    for (std::size_t i = 0; i < n; ++i) s += x[static_cast<std::ptrdiff_t>(i) * inc];
    return s;
  }
  Ref dot(const Ref* x, std::ptrdiff_t incx, const Ref* y, std::ptrdiff_t incy, std::size_t n, Key) const {
    Ref s = 0;
    for (std::size_t i = 0; i < n; ++i)
      s += x[static_cast<std::ptrdiff_t>(i) * incx] * y[static_cast<std::ptrdiff_t>(i) * incy];
    return s;
  }
  /// Same contract as Ctx<Emulated>::gemm (A/B given as Ref matrices).
  struct RefMatrix {
    const Ref* data;
    std::size_t ld;
    bool transposed = false;
    const Ref& operator()(std::size_t r, std::size_t c) const {
      return transposed ? data[c * ld + r] : data[r * ld + c];
    }
  };
  void gemm(std::size_t M, std::size_t N, std::size_t K, RefMatrix A, RefMatrix B, Ref* C, std::size_t ldc,
            bool accumulate, Key) const {
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        Ref s = accumulate ? C[i * ldc + j] : Ref(0);
        for (std::size_t k = 0; k < K; ++k) s += A(i, k) * B(k, j);
        C[i * ldc + j] = s;
      }
  }
  /// Same contract as Ctx<Emulated>::gemm_element.
  Ref gemm_element(const Ref* x, std::ptrdiff_t incx, const Ref* y, std::ptrdiff_t incy, std::size_t K,
                   bool accumulate, const Ref& c, Key, std::size_t) const {
    Ref s = accumulate ? c : Ref(0);
    for (std::size_t k = 0; k < K; ++k)
      s += x[static_cast<std::ptrdiff_t>(k) * incx] * y[static_cast<std::ptrdiff_t>(k) * incy];
    return s;
  }
  /// Same contract as Ctx<Emulated>::gemm_in (the casts are exact here).
  void gemm_in(std::size_t M, std::size_t N, std::size_t K, std::span<const Ref> a, bool a_transposed, Tensor,
               std::span<const Ref> b, bool b_transposed, Tensor, Ref* C, std::size_t ldc, bool accumulate,
               Key r) const {
    gemm(M, N, K, RefMatrix{a.data(), a_transposed ? M : K, a_transposed},
         RefMatrix{b.data(), b_transposed ? K : N, b_transposed}, C, ldc, accumulate, r);
  }
  void gemm_ranged(std::size_t M, std::size_t N, std::size_t, RefMatrix A, RefMatrix B,
                   std::span<const numerics::KRange> rows, Ref* C, std::size_t ldc, Key) const {
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        Ref s = 0;
        for (std::size_t k = rows[i].lo; k < rows[i].hi; ++k) s += A(i, k) * B(k, j);
        C[i * ldc + j] = s;
      }
  }
  bool gemm_is_dot() const { return true; }
  Ref dot_result(const Ref& s, Key) const { return s; }
  /// Ctx<Emulated>::dot_rows' contract on Ref operands (the per-reduction dots and sums).
  template <class KeyFn>
  void dot_rows(const numerics::BasicRowBatch<Ref>& rows, std::span<Ref> out, KeyFn&& kf) const {
    for (std::size_t r = 0; r < rows.length.size(); ++r) {
      const auto ri = static_cast<std::ptrdiff_t>(r);
      out[r] = rows.y ? dot(rows.x + ri * rows.x_row, rows.x_step, rows.y + ri * rows.y_row, rows.y_step,
                            rows.length[r], kf(r))
                      : sum(rows.x + ri * rows.x_row, rows.x_step, rows.length[r], kf(r));
    }
  }
  template <class KC>
  void compute_array(std::span<Ref>, KC&&) const {}
  void in_array(std::span<const Ref> src, std::span<Ref> dst, Tensor) const {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  }
  template <class KeyFn>
  void store_array(std::span<const Ref> src, std::span<Ref> dst, KeyFn&&) const {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  }
  template <class KeyFn>
  void store_to_array(const numerics::RoundingPlan&, std::span<const Ref> src, std::span<Ref> dst, KeyFn&&) const {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  }
  template <class KC, class KS>
  void result_array(std::span<Ref>, KC&&, KS&&) const {}
  template <class KeyFn>
  void exp_array(std::span<const Ref> src, std::span<Ref> dst, KeyFn&&) const {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = exp(src[i], Key{});
  }
  template <class KeyFn>
  void sigmoid_array(std::span<const Ref> src, std::span<Ref> dst, KeyFn&&) const {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = sigmoid(src[i], Key{});
  }
  bool binary32_native() const { return false; }

 private:
  OpPrecision prec_;
  numerics::RoundingPlan storage_;
  numerics::StochasticBits bits_;
  ExecOptions exec_;
};

/// Matrix operand of a backend's gemm.
template <class A>
struct MatrixOf;
template <>
struct MatrixOf<Emulated> {
  using type = numerics::ConstMatrix;
};
template <>
struct MatrixOf<Reference> {
  using type = Ctx<Reference>::RefMatrix;
};

/// Units an op computes: empty = all (the normal call); otherwise only these outer-loop units (rows, heads,
/// columns — each op documents its unit). The shadow uses this to run the Reference on a sample.
using Select = std::span<const std::int64_t>;

/// Runs f(u) for every selected unit; all units in parallel (OpenMP, static schedule) when sel is empty.
/// Units are independent outputs, so the result does not depend on the thread count.
template <class F>
void for_units(std::int64_t n_units, Select sel, F&& f) {
  if (sel.empty()) {
#pragma omp parallel for schedule(static)
    for (std::int64_t u = 0; u < n_units; ++u) f(u);
  } else {
    for (std::int64_t u : sel) f(u);
  }
}

/// Runs f(begin, end) over [0, n) in consecutive ranges of at most `chunk` elements, the ranges split over the
/// threads (OpenMP, static schedule). For elementwise work only: each element's result must not depend on
/// which range or thread computes it (no reduction across ranges), so the result is the same on any thread count.
template <class F>
void for_ranges(std::size_t n, F&& f, std::size_t chunk = std::size_t{1} << 15) {
  const auto ranges = static_cast<std::int64_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < ranges; ++r) {
    const std::size_t b = static_cast<std::size_t>(r) * chunk;
    f(b, std::min(n, b + chunk));
  }
}

/// Per-thread storage reused across op calls: buffer `slot` (< kScratchSlots) of the calling thread, at least n
/// elements (contents unspecified: every element read must be written first). An op called every step would
/// otherwise allocate, zero and page-fault its temporaries on every call (E11's classifier W cast is 69 MB). An op
/// takes distinct slots for the buffers it holds at once and calls no other op while holding them.
inline constexpr std::size_t kScratchSlots = 9;
template <class V>
std::span<V> scratch_buffer(std::size_t n, std::size_t slot) {
  thread_local std::vector<V> buffers[kScratchSlots];
  std::vector<V>& b = buffers[slot];
  if (b.size() < n) {
    b.clear();
    b.shrink_to_fit();
    b.resize(n);
  }
  return std::span<V>(b.data(), n);
}

/// The tensor x cast on entry (ctx.in_array with tensor t) into scratch_buffer slot `slot`.
template <class A>
std::span<const typename A::Value> entry_cast(const Ctx<A>& ctx, std::span<const typename A::Value> x, Tensor t,
                                              std::size_t slot) {
  const std::span<typename A::Value> r = scratch_buffer<typename A::Value>(x.size(), slot);
  ctx.in_array(x, r, t);
  return r;
}

/// Typed storage (issue 45) for bodies that compute on binary64 arrays (the GEMM ops, until their kernels read
/// binary32): slots 6–8 hold binary32 tensors widened for them. kWidenA and kWidenB take operands, kWidenC an output.
inline constexpr std::size_t kWidenA = 6, kWidenB = 7, kWidenC = 8;

/// x as binary64 values: x itself when S is V, else x widened (exactly) into scratch_buffer slot `slot`.
template <class V, class S>
std::span<const V> widened(std::span<const S> x, std::size_t slot) {
  if constexpr (std::is_same_v<S, V>) {
    return x;
  } else {
    const std::span<V> r = scratch_buffer<V>(x.size(), slot);
    numerics::widen_binary32(x, r);
    return r;
  }
}

/// An output tensor y as a binary64 array to compute into: y itself when S is V, else scratch_buffer slot `slot`
/// holding y's values widened when `keep` (an accumulated gradient) or unset (an output written whole). Write it
/// back with narrow_into.
template <class V, class S>
std::span<V> widened_out(std::span<S> y, std::size_t slot, bool keep) {
  if constexpr (std::is_same_v<S, V>) {
    return y;
  } else {
    const std::span<V> r = scratch_buffer<V>(y.size(), slot);
    if (keep) numerics::widen_binary32(std::span<const S>(y), r);
    return r;
  }
}

/// y ← v narrowed, when v is widened_out's scratch (nothing when y is binary64: v is y). Exact when every value of v
/// is a value of a storage format that fits binary32 (Ctx::binary32_storage, checked by the float entry points).
template <class V, class S>
void narrow_into(std::span<const V> v, std::span<S> y) {
  if constexpr (!std::is_same_v<S, V>) numerics::narrow_to_binary32(v, y);
}

/// Lifts emulated values exactly to Ref.
std::vector<Ref> lift(std::span<const double> x);

}  // namespace roundoff::ops
