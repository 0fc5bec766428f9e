#pragma once
/// \file batches.hpp
/// Deterministic training batches and the fixed validation pass.
///
/// Training: batch `step` is B windows of S + 1 consecutive tokens (inputs = first S, targets = last S).
/// Window b of step t starts at  start(t, b) = StochasticBits{seed, kBatchStream}.draw(t·B + b) mod (N − S),
/// where N is the number of tokens, so every start s satisfies s + S + 1 <= N. It is a pure function of
/// (seed, step, b, N, S, B): independent of thread count, call order and of any earlier step, so a resumed
/// run sees exactly the batches of an uninterrupted one. (The modulo bias is below (N − S)/2^64.)
///
/// Validation: the split's tokens are covered in order by windows starting at 0, S, 2S, ...; window k has
/// inputs tokens[kS, kS + L) and targets tokens[kS + 1, kS + L + 1) with L = min(S, N − 1 − kS), so every
/// token but the first is predicted exactly once and only the last window may be shorter than S.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "studies/data/tokenizer.hpp"

namespace roundoff::studies::data {

/// StochasticBits stream id reserved for batch sampling (other streams: init, stochastic rounding).
inline constexpr std::uint64_t kBatchStream = 0xBA7C4;

class BatchSampler {
 public:
  /// Throws std::invalid_argument unless seq_len >= 1, batch >= 1 and n_tokens >= seq_len + 1.
  BatchSampler(std::size_t n_tokens, std::size_t seq_len, std::size_t batch, std::uint64_t seed);
  /// The B window starts of step `step`.
  std::vector<std::size_t> starts(std::uint64_t step) const;
  /// The (B, S + 1) windows of step `step`, row-major, copied from `tokens` (whose size must be n_tokens).
  std::vector<Token> batch(std::span<const Token> tokens, std::uint64_t step) const;

  std::size_t seq_len() const { return seq_len_; }
  std::size_t batch_size() const { return batch_; }

 private:
  std::size_t n_, seq_len_, batch_;
  std::uint64_t seed_;
};

/// One validation window: inputs tokens[start, start + length), targets tokens[start + 1, start + length + 1).
struct EvalWindow {
  std::size_t start;
  std::size_t length;  ///< number of predicted tokens, 1..S
};

/// The fixed, in-order validation windows of a split of `n_tokens` tokens (see the file comment).
/// Throws std::invalid_argument if n_tokens < 2 or seq_len == 0.
std::vector<EvalWindow> validation_windows(std::size_t n_tokens, std::size_t seq_len);

}  // namespace roundoff::studies::data
