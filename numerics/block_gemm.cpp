#include "numerics/block_gemm.hpp"

#include <omp.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/exact_dot.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

namespace {

/// The decoded values of a block matrix without its tensor scale (see block_gemm.hpp), rows·cols doubles.
std::vector<double> values_without_tensor_scale(const BlockMatrix& m) {
  // dequantize divides NVFP4 by S_enc; with S_enc = 1 it gives P·S_dec exactly (at most 3 + 4 significant bits).
  const float ts = m.format.rule == ScaleRule::Nvfp4 ? 1.0f : m.tensor_scale;
  return dequantize(m.format, m.codes, m.scales, ts, formats::fp64, m.biases, m.cols);
}

void check_operand(const BlockMatrix& m, const char* name) {
  const auto k = static_cast<std::size_t>(m.format.block_size);
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(std::string("block_gemm: operand ") + name + " (" + m.format.name + "): " + why);
  };
  if (m.cols == 0 || m.cols % k != 0)
    throw bad(std::to_string(m.cols) + " columns are not a positive multiple of the block size " + std::to_string(k) +
              "; valid: K a multiple of " + std::to_string(k));
  if (m.codes.size() != m.rows * m.cols)
    throw bad(std::to_string(m.codes.size()) + " codes for " + std::to_string(m.rows) + "x" + std::to_string(m.cols) +
              "; valid: rows·cols codes");
  const std::size_t blocks = m.rows * (m.cols / k) / static_cast<std::size_t>(m.format.block_rows);
  if (m.scales.size() != blocks)
    throw bad(std::to_string(m.scales.size()) + " scales; valid: " + std::to_string(blocks) + " (one per block)");
}

}  // namespace

void block_gemm(const Accumulation& outer, const BlockMatrix& a, const BlockMatrix& bt, double* C, std::size_t ldc,
                StochasticBits bits, int threads) {
  check_valid(outer);
  check_operand(a, "A");
  check_operand(bt, "B");
  if (a.format.block_size != bt.format.block_size)
    throw std::invalid_argument("block_gemm: A's blocks of " + std::to_string(a.format.block_size) + " (" +
                                a.format.name + ") and B's of " + std::to_string(bt.format.block_size) + " (" +
                                bt.format.name + ") differ; valid: formats with the same block size");
  if (a.cols != bt.cols)
    throw std::invalid_argument("block_gemm: A is " + std::to_string(a.rows) + "x" + std::to_string(a.cols) +
                                " but B is " + std::to_string(bt.cols) + "x" + std::to_string(bt.rows) +
                                "; valid: A's columns equal B's rows (K)");
  const std::size_t M = a.rows, N = bt.rows, K = a.cols;
  if (ldc < N) throw std::invalid_argument("block_gemm: ldc " + std::to_string(ldc) + " is below N = " + std::to_string(N));
  const auto k = static_cast<std::size_t>(a.format.block_size);
  const std::size_t nb = K / k;
  const std::vector<double> va = values_without_tensor_scale(a), vb = values_without_tensor_scale(bt);
  const bool tensor_scaled = a.format.rule == ScaleRule::Nvfp4 || bt.format.rule == ScaleRule::Nvfp4;
  const double sa = a.format.rule == ScaleRule::Nvfp4 ? static_cast<double>(a.tensor_scale) : 1.0;
  const double sb = bt.format.rule == ScaleRule::Nvfp4 ? static_cast<double>(bt.tensor_scale) : 1.0;
  const double s_enc = sa * sb;  // exact: two fp32 values
  const RoundingPlan out_plan(result_format(outer));
  const auto MN = static_cast<std::ptrdiff_t>(M * N);
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads()) if (MN > 64)
  {
    std::vector<double> terms(nb);  // one per thread, every element written before the sum reads it
#pragma omp for schedule(static)
    for (std::ptrdiff_t ij = 0; ij < MN; ++ij) {
      const std::size_t i = static_cast<std::size_t>(ij) / N, j = static_cast<std::size_t>(ij) % N;
      for (std::size_t t = 0; t < nb; ++t) {
        ExactSum s;
        for (std::size_t kk = t * k; kk < (t + 1) * k; ++kk) s.add_product(va[i * K + kk], vb[j * K + kk]);
        terms[t] = s.to_double();
      }
      double c = sum(outer, terms, StochasticBits{bits.seed, bits.stream + static_cast<std::uint64_t>(i * N + j)});
      if (tensor_scaled && std::isfinite(c) && c != 0) {
        const double q = c / s_enc;
        c = round_pair(out_plan, Rounding::NearestEven, q, std::fma(-q, s_enc, c) / s_enc);
      }
      C[i * ldc + j] = c;
    }
  }
}

}  // namespace roundoff::numerics
