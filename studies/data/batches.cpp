#include "studies/data/batches.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "numerics/rounding.hpp"

namespace roundoff::studies::data {

BatchSampler::BatchSampler(std::size_t n_tokens, std::size_t seq_len, std::size_t batch, std::uint64_t seed)
    : n_(n_tokens), seq_len_(seq_len), batch_(batch), seed_(seed) {
  if (seq_len == 0 || batch == 0)
    throw std::invalid_argument("batch sampler: sequence length and batch size must be >= 1");
  if (n_tokens < seq_len + 1)
    throw std::invalid_argument("batch sampler: " + std::to_string(n_tokens) + " tokens are fewer than one window of " +
                                std::to_string(seq_len + 1));
}

std::vector<std::size_t> BatchSampler::starts(std::uint64_t step) const {
  const numerics::StochasticBits bits{seed_, kBatchStream};
  const std::uint64_t range = n_ - seq_len_;
  std::vector<std::size_t> out(batch_);
  for (std::size_t b = 0; b < batch_; ++b) out[b] = static_cast<std::size_t>(bits.draw(step * batch_ + b) % range);
  return out;
}

std::vector<Token> BatchSampler::batch(std::span<const Token> tokens, std::uint64_t step) const {
  if (tokens.size() != n_)
    throw std::invalid_argument("batch sampler: built for " + std::to_string(n_) + " tokens, given " +
                                std::to_string(tokens.size()));
  std::vector<Token> out;
  out.reserve(batch_ * (seq_len_ + 1));
  for (std::size_t s : starts(step)) out.insert(out.end(), tokens.begin() + static_cast<std::ptrdiff_t>(s),
                                                 tokens.begin() + static_cast<std::ptrdiff_t>(s + seq_len_ + 1));
  return out;
}

std::vector<EvalWindow> validation_windows(std::size_t n_tokens, std::size_t seq_len) {
  if (n_tokens < 2 || seq_len == 0)
    throw std::invalid_argument("validation windows: need >= 2 tokens and sequence length >= 1");
  std::vector<EvalWindow> out;
  for (std::size_t start = 0; start + 1 < n_tokens; start += seq_len)
    out.push_back({start, std::min(seq_len, n_tokens - 1 - start)});
  return out;
}

}  // namespace roundoff::studies::data
