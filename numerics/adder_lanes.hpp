#pragma once
/// \file adder_lanes.hpp
/// Internal to numerics/adder_kernels.cpp: the multi-term adder's lane kernels of one ISA tier
/// (adder_lanes.inc compiled once per tier). The arithmetic and why it is bit-exact: adder_kernels.hpp.
#include <cstddef>
#include <cstdint>

namespace roundoff::numerics::adder_lanes {

/// Output columns per packed B panel (the lanes of one kernel call), in every tier.
inline constexpr std::size_t kPanel = 16;

/// The constants of one accumulation, as the kernels read them.
struct AdderPlan {
  std::size_t group;    ///< terms per adder step
  std::size_t promote;  ///< promote_every (0 = no promotion; promoted sums are binary32, round to nearest-even)
  bool exp_sum;         ///< anchor ExponentSum (products by their factors' exponent sums) else LeadingBit
  bool align_ne;        ///< alignment to nearest-even (else truncation)
  bool norm_ne;         ///< normalisation to nearest-even (else toward zero)
  bool pos_zero;        ///< edges InfPositiveZero: every zero result is +0
  double to_q;          ///< 2^−(p−1+extra): the register's last place is 2^E·to_q
  double from_q;        ///< 2^(p−1+extra)
  double q_out;         ///< 2^(1−p): the accumulator's quantum at 2^e is 2^e·q_out
  double min_quantum;   ///< 2^(emin−p+1): the accumulator's subnormal quantum
  double max_finite;    ///< the accumulator's largest finite value
  double ovf_value;     ///< an overflowing result's magnitude: inf, or max_finite (IEEE edges, toward zero)
};

/// rows (1 ≤ rows ≤ kMaxRows of the tier) outputs rows × kPanel over the terms k0 ≤ k < k1:
///   a[r][k]      row r's operand values, ea[r][k] their anchors 2^max(e, input_emin) (0 for zeros; ExponentSum);
///   b[k·kPanel + l], eb[k·kPanel + l]  the panel's operands and anchors;
///   st[r·kPanel + l]  in: the initial sum C_ij when has_init; out: the result.
/// Adds the overflows it counts (IEEE 754 §7.4, as numerics::gemm counts them) to overflows[r·kPanel + l].
namespace avx512 {
inline constexpr int kMaxRows = 4;
void rows(const AdderPlan& pl, int rows, const double* const* a, const double* const* ea, const double* b,
          const double* eb, std::size_t k0, std::size_t k1, bool has_init, double* st, std::int64_t* overflows);
}  // namespace avx512
namespace avx2 {
inline constexpr int kMaxRows = 2;
void rows(const AdderPlan& pl, int rows, const double* const* a, const double* const* ea, const double* b,
          const double* eb, std::size_t k0, std::size_t k1, bool has_init, double* st, std::int64_t* overflows);
}  // namespace avx2

}  // namespace roundoff::numerics::adder_lanes
