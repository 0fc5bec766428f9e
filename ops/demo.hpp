#pragma once
/// \file demo.hpp
/// One Llama-style Pre-RMSNorm transformer block, forward and backward, through a Runner: the smallest
/// complete use of every block op. Used by `roundoff demo` (per-op error table), the determinism and
/// shadow tests, and the block benchmark.
///
///   xn = rmsnorm(x; g1);  q, k, v = xn·Wqᵀ, xn·Wkᵀ, xn·Wvᵀ;  q, k = rope(q), rope(k)
///   a = attn_values(softmax(attn_scores(q, k)), v);  x1 = x + α·(a·Woᵀ)              (ResidualAttn)
///   xn2 = rmsnorm(x1; g2);  h = silu(xn2·W1ᵀ) ⊙ (xn2·W3ᵀ);  out = x1 + α·(h·W2ᵀ)      (ResidualFfn)
/// Backward from dout = c (a fixed random tensor: the loss Σ c·out), all gradients zeroed first.
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "ops/runner.hpp"

namespace roundoff::ops {

struct BlockConfig {
  std::int64_t B = 1, T = 32, C = 64, NH = 4, hidden = 176;
  double alpha = 0.35355339059327373;  ///< AutoANE's 1/√(2·4)
  double eps = 1e-5;
  std::uint64_t data_seed = 1;  ///< inputs and weights (N(0,1) activations, N(0, 1/C) weights)
};

/// Outputs and every gradient of one block pass (for bitwise comparisons).
struct BlockResult {
  std::vector<double> out, dx;
  std::vector<std::vector<double>> dweights;  ///< dWq dWk dWv dWo dW1 dW3 dW2 dg1 dg2
};

/// Runs forward + backward of the block under the runner's policy.
BlockResult run_block(Runner& run, const BlockConfig& cfg);

/// Runs one block (d = 64, T = 32, 4 heads) under ane-fp16 with the shadow on every call (8 units each) and
/// prints the per-op local-error table (op, pass, tensor, median/p95/max ulp, events).
void print_block_error_demo(std::ostream& out);

}  // namespace roundoff::ops
