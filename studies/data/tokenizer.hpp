#pragma once
/// \file tokenizer.hpp
/// Tokenisers map bytes to token ids and back, exactly: decode(encode(s)) == s for every byte string s.
/// Two kinds: ByteTokenizer (V = 256, id = byte value) and BpeTokenizer (bpe.hpp). Both serialise to a
/// small text file whose first line names the kind, so load_tokenizer() can reload either.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace roundoff::studies::data {

using Token = std::int32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids in [0, vocab_size()).
  virtual std::vector<Token> encode(std::string_view text) const = 0;
  /// Concatenation of the byte strings of `tokens`; throws std::out_of_range on an id >= vocab_size().
  std::string decode(std::span<const Token> tokens) const;
  /// The bytes token `t` stands for (non-empty).
  virtual std::string_view token_bytes(Token t) const = 0;
  virtual std::size_t vocab_size() const = 0;
  /// "bytes" or "bpe-<V>".
  virtual std::string name() const = 0;
  /// The file format: first line "roundoff-tokenizer <kind> v1", then kind-specific lines.
  virtual std::string serialise() const = 0;
  /// Writes serialise() atomically.
  void save(const std::filesystem::path& path) const;
};

class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer();
  std::vector<Token> encode(std::string_view text) const override;
  std::string_view token_bytes(Token t) const override;
  std::size_t vocab_size() const override { return 256; }
  std::string name() const override { return "bytes"; }
  std::string serialise() const override;

 private:
  std::string bytes_;  // bytes_[i] == char(i)
};

/// Reloads a file written by Tokenizer::save (either kind). Throws std::runtime_error naming the file and
/// what is wrong with it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);
/// Same, from the serialised text.
std::unique_ptr<Tokenizer> parse_tokenizer(std::string_view text, const std::string& origin = "<text>");

/// Total bytes the tokens stand for: sum of token_bytes(t).size().
std::size_t byte_count(const Tokenizer& tok, std::span<const Token> tokens);
/// Mean bytes per token of `text` under `tok`: text.size() / encode(text).size().
double bytes_per_token(const Tokenizer& tok, std::string_view text);
/// Bits per byte from a mean cross-entropy in nats per token: nats / (ln 2 · bytes_per_token). For exact
/// accounting over an evaluation pass, use total nats over the predicted tokens and byte_count() of those
/// same tokens: bpb = total_nats / (ln 2 · total_bytes).
double bits_per_byte(double nats_per_token, double bytes_per_tok);

}  // namespace roundoff::studies::data
