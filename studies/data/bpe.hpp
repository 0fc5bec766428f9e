#pragma once
/// \file bpe.hpp
/// Byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant) with a fixed, documented
/// pre-tokenisation and deterministic training.
///
/// Pre-tokenisation splits text into pieces; merges never cross piece boundaries. Byte classes: letter =
/// A-Z, a-z or any byte >= 0x80; digit = 0-9; space = ' '; other whitespace = \t \n \r \v \f; punctuation =
/// everything else. Pieces, scanned left to right:
///   * an optional single ' ' followed by a maximal run of letters, or of digits, or of punctuation;
///   * a maximal run of whitespace, except that when the run is followed by a non-whitespace byte and ends
///     in ' ', that last ' ' is left to start the next piece.
/// Training (on the train split only): start from the 256 byte tokens; repeatedly count adjacent pairs
/// over all pieces weighted by piece frequency, take the pair with the highest count, ties broken by the
/// smallest (left id, right id), give it id 256 + k, and replace its occurrences left to right
/// (non-overlapping) in every piece. Stops at the requested vocabulary size or when no pair is left.
/// Implementation: pair counts are updated incrementally (only the pieces holding the merged pair are
/// re-counted) and the best pair comes from a lazily invalidated max-heap of (count, pair), which picks the
/// same pair as a full scan over the counts (tests/studies/bpe_test.cpp checks the merges against the scan).
/// Encoding applies the merges in rank order, which reproduces the training segmentation exactly.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "studies/data/tokenizer.hpp"

namespace roundoff::studies::data {

/// The pre-tokenisation pieces of `text` (views into it); their concatenation is `text`.
std::vector<std::string_view> pretokenise(std::string_view text);

class BpeTokenizer final : public Tokenizer {
 public:
  /// Trains on `text` up to `vocab_size` tokens (>= 256). Deterministic: the same text and size give the
  /// same merges on every machine. Throws std::invalid_argument if vocab_size < 256 or > 65536.
  static BpeTokenizer train(std::string_view text, std::size_t vocab_size);
  /// Builds from a merge list (pair k creates token 256 + k); throws std::invalid_argument on an id that
  /// does not exist yet at its rank.
  explicit BpeTokenizer(std::vector<std::pair<Token, Token>> merges, std::string trained_on_sha256 = {});

  std::vector<Token> encode(std::string_view text) const override;
  std::string_view token_bytes(Token t) const override;
  std::size_t vocab_size() const override { return vocab_.size(); }
  std::string name() const override { return "bpe-" + std::to_string(vocab_size()); }
  /// "roundoff-tokenizer bpe v1", "vocab_size V", "trained_on_sha256 H", "merges M", then M lines "l r".
  std::string serialise() const override;

  const std::vector<std::pair<Token, Token>>& merges() const { return merges_; }
  /// sha256 of the text it was trained on ("" if unknown).
  const std::string& trained_on_sha256() const { return trained_on_; }

 private:
  /// Appends the tokens of one pre-tokenisation piece.
  void encode_piece(std::string_view piece, std::vector<Token>& out) const;

  std::vector<std::pair<Token, Token>> merges_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::uint64_t, Token> rank_;  // (l << 32 | r) -> merged id
  std::string trained_on_;
};

/// A tokenizer from its CLI/config name: "bytes" (ByteTokenizer) or "bpe-<V>" (BpeTokenizer::train on
/// `train_text`, 256 <= V <= 65536). Throws std::invalid_argument naming the valid forms otherwise.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, std::string_view train_text);

}  // namespace roundoff::studies::data
