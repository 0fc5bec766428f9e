#pragma once
/// \file probe.hpp
/// Error statistics and range events of op outputs, and the Tape that records them (tidy CSV).
///
/// Error of an emulated output y against a reference r (per element, r converted exactly from MPFR):
///   ulp error   |y − r| / ulp_storage(r)   (ulp of the op's storage format at the reference value)
///   relative    |y − r| / |r| (r ≠ 0);   normwise ‖y − r‖₂ / ‖r‖₂
///   dot ratio   |y − r| / (u_acc · Σ|a||b|) for dot-product outputs (u_acc: unit roundoff of the
///               accumulator format): the fraction of the classical bound γ_K ≈ K·u_acc actually used, ×K
/// Range events (over every element of the emulated output): ±inf, NaN, subnormal outputs, zeros, max |y|;
/// underflow = reference nonzero but emulated zero (compared elements only).
#include <array>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "ops/backend.hpp"
#include "ops/op_kind.hpp"

namespace roundoff::ops {

struct ErrorStats {
  std::int64_t count = 0;  ///< compared (finite) elements
  double median_ulp = 0, p95_ulp = 0, max_ulp = 0;
  std::int64_t above_1ulp = 0;
  double max_rel = 0;
  double norm_rel = 0;
  /// The error's signed component along the reference, relative: Σ(y−r)·r / Σr² (0 when Σr² = 0). Negative when
  /// the output is shrunk toward zero (e.g. small values flushed), positive when inflated; |signed_rel| ≤ norm_rel
  /// (Cauchy–Schwarz). Unbiased rounding (stochastic) keeps it near 0 where nearest rounding may not.
  double signed_rel = 0;
  double dot_ratio = std::numeric_limits<double>::quiet_NaN();  ///< NaN when not a dot-product output
  std::int64_t underflow = 0;
};

struct RangeEvents {
  std::int64_t elements = 0, inf = 0, nan = 0, subnormal = 0, zero = 0;
  double max_abs = 0;
};

/// Compares y with r elementwise at `elements` (all when empty). `abs_dot` (same indexing as r, may be
/// empty) holds Σ|a||b| per output for the dot ratio, with u_acc the accumulator's unit roundoff.
ErrorStats compare(std::span<const double> y, std::span<const Ref> r, const numerics::Format& storage,
                   std::span<const std::size_t> elements = {}, std::span<const Ref> abs_dot = {}, double u_acc = 0);
/// The same against a binary64 reference (e.g. a global reference model run in fp64).
ErrorStats compare(std::span<const double> y, std::span<const double> r, const numerics::Format& storage);
RangeEvents range_events(std::span<const double> y, const numerics::Format& storage);
/// The same on binary32 elements (typed storage; the same counts as on their widened values).
RangeEvents range_events(std::span<const float> y, const numerics::Format& storage);

/// The shadow's error of a GEMM against the exact product of its quantized operands (ops/quant_shadow.hpp): the
/// statistics of every compared element, and the normwise error ‖y_u − r_u‖₂ / ‖r_u‖₂ of each sampled unit u (an
/// output row) summarised by its median, 95th percentile and maximum over the units (numerics::quantile_sorted:
/// nearest rank, so with 19 units or fewer the 95th percentile is the maximum).
struct AccError {
  ErrorStats error;
  std::int64_t units = 0;
  double unit_median = 0, unit_p95 = 0, unit_max = 0;
};
/// y and r: the compared elements, `width` per unit, unit after unit (y.size() == r.size(), a multiple of width).
AccError compare_units(std::span<const double> y, std::span<const Ref> r, std::size_t width,
                       const numerics::Format& storage);

enum class RecordKind : std::uint8_t { Local, Global };
std::string_view name_of(RecordKind k);

/// One row of the tape: one output tensor of one op call.
struct OpRecord {
  std::int64_t step = 0;
  int layer = -1;
  OpKind op = OpKind::Matmul;
  Pass pass = Pass::Forward;
  std::string tensor;
  RecordKind kind = RecordKind::Local;
  ErrorStats error;
  RangeEvents range;
  /// Local records of GEMMs with quantized operands only: the error against the product of those operands
  /// (ops/quant_shadow.hpp); `error` stays the error against the unquantized operands' product.
  std::optional<AccError> acc = std::nullopt;
};

/// Which op calls the shadow checks, and how much of each.
struct Sampling {
  std::array<bool, kOpCount> ops = [] {
    std::array<bool, kOpCount> a{};
    a.fill(true);
    return a;
  }();
  std::int64_t every = 1;  ///< shadow call 0, N, 2N, ... of each (op, pass); 0 = never
  std::int64_t units = 8;  ///< units (rows, heads, columns — see each op) per shadowed call, stratified (spaced_units); 0 = all
};

/// Records in call order.
class Tape {
 public:
  void add(OpRecord r) { records_.push_back(std::move(r)); }
  const std::vector<OpRecord>& records() const { return records_; }
  void clear() { records_.clear(); }
  /// Tidy CSV, header + one row per record:
  /// step,layer,op,pass,tensor,kind,count,median_ulp,p95_ulp,max_ulp,above_1ulp,max_rel,norm_rel,dot_ratio,
  /// underflow,elements,inf,nan,subnormal,zero,max_abs
  void write_csv(std::ostream& out) const;
  /// A human-readable table, one line per record.
  void print_table(std::ostream& out) const;

 private:
  std::vector<OpRecord> records_;
};

}  // namespace roundoff::ops
