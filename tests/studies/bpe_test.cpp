// BPE training: the incremental trainer with its priority queue (studies/data/bpe.cpp) learns exactly the merges
// of the straightforward algorithm below, which rescans every pair count for the best pair at each merge (the
// trainer before issue 9 item 9, kept here as the oracle).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "studies/data/bpe.hpp"
#include "studies/data/corpus.hpp"

namespace roundoff::studies::data {
namespace {

/// The oracle: count every adjacent pair over the pieces (weighted by piece frequency), take the highest count,
/// ties the smallest (left, right), replace it left to right in every piece, repeat.
std::vector<std::pair<Token, Token>> scan_merges(std::string_view text, std::size_t vocab_size) {
  std::unordered_map<std::string_view, std::int64_t> freq_of;
  for (auto p : pretokenise(text)) ++freq_of[p];
  std::vector<std::vector<Token>> words;
  std::vector<std::int64_t> freq;
  for (const auto& [piece, f] : freq_of) {
    words.emplace_back();
    for (const char c : piece) words.back().push_back(static_cast<unsigned char>(c));
    freq.push_back(f);
  }
  std::vector<std::pair<Token, Token>> merges;
  while (256 + merges.size() < vocab_size) {
    std::unordered_map<std::uint64_t, std::int64_t> count;
    for (std::size_t w = 0; w < words.size(); ++w)
      for (std::size_t i = 0; i + 1 < words[w].size(); ++i)
        count[(static_cast<std::uint64_t>(words[w][i]) << 32) | static_cast<std::uint32_t>(words[w][i + 1])] += freq[w];
    std::uint64_t best = 0;
    std::int64_t best_count = 0;
    for (const auto& [k, c] : count)
      if (c > best_count || (c == best_count && k < best)) best = k, best_count = c;
    if (best_count == 0) break;
    const auto l = static_cast<Token>(best >> 32), r = static_cast<Token>(best & 0xffffffffu);
    const auto id = static_cast<Token>(256 + merges.size());
    merges.emplace_back(l, r);
    for (auto& w : words) {
      std::size_t out = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == l && w[i + 1] == r) {
          w[out++] = id;
          ++i;
        } else {
          w[out++] = w[i];
        }
      }
      w.resize(out);
    }
  }
  return merges;
}

TEST(BpeTrain, SameMergesAsTheFullScanOnTheExcerpt) {
  const Corpus corpus = load_corpus(excerpt_dir());
  const std::string_view text = std::string_view(corpus.train).substr(0, 60000);
  const auto want = scan_merges(text, 900);
  const auto got = BpeTokenizer::train(text, 900).merges();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) ASSERT_EQ(got[k], want[k]) << "merge " << k;
}

/// Many equal counts (ties broken by the smallest pair) and self-overlapping pairs ("aaaa"), run until no pair
/// is left.
TEST(BpeTrain, SameMergesOnTiesAndRepeatsUntilExhausted) {
  const std::string text = "aaaa aaa ab ba abab baba zz zzz zzzz cd dc cdcd x1 1x 11 111 a1a1 ..,,.. ,.,.";
  const auto want = scan_merges(text, 400);
  const auto got = BpeTokenizer::train(text, 400).merges();
  EXPECT_LT(want.size(), 400u - 256u);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) ASSERT_EQ(got[k], want[k]) << "merge " << k;
}

}  // namespace
}  // namespace roundoff::studies::data
